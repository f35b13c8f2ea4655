package standin_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/standin"
)

const triageSchema = `{"type":"object","additionalProperties":false,"required":["severity","summary","page"],
 "properties":{"severity":{"type":"string","enum":["critical","warning","info"]},"summary":{"type":"string","maxLength":200},
 "page":{"type":"boolean"},"score":{"type":"integer","minimum":1,"maximum":5},"tags":{"type":"array","items":{"type":"string"},"maxItems":2}}}`

func TestSchemaAnswers(t *testing.T) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(triageSchema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AddResource("s.json", doc)
	sch, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		offSchema float64
		wantValid bool
	}{{"valid", 0, true}, {"off schema", 1, false}} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := standin.New(standin.Options{OffSchemaRate: tt.offSchema})
			if err != nil {
				t.Fatal(err)
			}
			url, stop, err := s.Start("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			client, done := standin.Client(url)
			defer done()
			seen := map[string]bool{}
			for i := range 5 {
				resp, err := client.CreateChatCompletion(t.Context(), openai.ChatCompletionRequest{
					Model:    "m",
					Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "triage alert " + string(rune('a'+i))}},
					ResponseFormat: &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
						JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: "triage", Schema: json.RawMessage(triageSchema), Strict: true}},
				})
				if err != nil {
					t.Fatal(err)
				}
				content := resp.Choices[0].Message.Content
				seen[content] = true
				var v any
				if err := json.Unmarshal([]byte(content), &v); err != nil {
					t.Fatalf("answer %q is not JSON", content)
				}
				if err := sch.Validate(v); (err == nil) != tt.wantValid {
					t.Fatalf("answer %s: validation error %v; want valid %v", content, err, tt.wantValid)
				}
			}
			if len(seen) < 2 {
				t.Errorf("5 prompts got %d distinct answers; want answers that depend on the prompt", len(seen))
			}
		})
	}
}
