package llmcache

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/tiktoken-go/tokenizer"
)

// Price is what a model charges, in US dollars per million tokens.
type Price struct {
	Prompt     float64 `json:"prompt_per_mtok" yaml:"prompt_per_mtok"`         // per million prompt tokens
	Completion float64 `json:"completion_per_mtok" yaml:"completion_per_mtok"` // per million completion tokens
}

// Prices maps a model name, as sent in the request, to its price. The entry
// "*", if present, prices every model not listed; a model with no price
// costs nothing in the counters (its tokens are still counted).
type Prices map[string]Price

// cost returns the price of u tokens of model, in US dollars.
func (p Prices) cost(model string, u usage) float64 {
	pr, ok := p[model]
	if !ok {
		pr = p["*"]
	}
	return (float64(u.PromptTokens)*pr.Prompt + float64(u.CompletionTokens)*pr.Completion) / 1e6
}

// request is what the cache reads from a chat completion request body.
type request struct {
	Model     string
	Stream    bool
	MaxTokens int64 // the larger of max_completion_tokens and max_tokens; 0 or less if unset
	N         int64 // choices asked for; at least 1
	// NoUsage is set for a stream without stream_options.include_usage:
	// its answer reports no usage, and its tokens are counted here.
	NoUsage  bool
	messages []wireMessage
	tools    json.RawMessage
}

type wireMessage struct {
	Role         string          `json:"role"`
	Name         string          `json:"name"`
	Content      json.RawMessage `json:"content"`
	ToolCalls    json.RawMessage `json:"tool_calls"`
	FunctionCall json.RawMessage `json:"function_call"`
}

func parseRequest(body []byte) (request, error) {
	var r struct {
		Model               string          `json:"model"`
		Stream              bool            `json:"stream"`
		MaxTokens           int64           `json:"max_tokens"`
		MaxCompletionTokens int64           `json:"max_completion_tokens"`
		N                   int64           `json:"n"`
		Messages            []wireMessage   `json:"messages"`
		Tools               json.RawMessage `json:"tools"`
		Functions           json.RawMessage `json:"functions"`
		StreamOptions       *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	// Decoded by exact member names only: encoding/json matches names
	// regardless of case, which a provider may not (see ReadRequest).
	if err := unambiguous(body); err != nil {
		return request{}, err
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return request{}, fmt.Errorf("%w: body: %w", ErrInvalidRequest, err)
	}
	q := request{Model: r.Model, Stream: r.Stream, MaxTokens: max(r.MaxTokens, r.MaxCompletionTokens), N: max(r.N, 1), messages: r.Messages, tools: r.Tools}
	q.NoUsage = r.Stream && (r.StreamOptions == nil || !r.StreamOptions.IncludeUsage)
	if len(q.tools) == 0 {
		q.tools = r.Functions
	}
	return q, nil
}

// codecs holds one tokenizer per model name seen.
var codecs sync.Map // model string → tokenizer.Codec

// codecFor returns the tokenizer of model, or o200k_base (the encoding of
// current OpenAI models) for a model it does not know, such as one served
// by vLLM or Ollama: the estimate is then rough, and the usage the API
// reports afterwards is what is counted.
func codecFor(model string) tokenizer.Codec {
	if c, ok := codecs.Load(model); ok {
		return c.(tokenizer.Codec)
	}
	c, err := tokenizer.ForModel(tokenizer.Model(model))
	if err != nil {
		c, err = tokenizer.Get(tokenizer.O200kBase)
		if err != nil {
			panic("llmcache: the tokenizer has no o200k_base: " + err.Error())
		}
	}
	codecs.Store(model, c)
	return c
}

func countTokens(c tokenizer.Codec, s string) int64 {
	if s == "" {
		return 0
	}
	n, err := c.Count(s)
	if err != nil { // only in strict UTF-8 mode, which is not set
		return int64(len(s)+3) / 4
	}
	return int64(n)
}

// estimatePrompt counts the prompt tokens of q before the call, the way
// OpenAI's chat format frames messages: three tokens per message for the
// role markers, one more for a name, the content, and three to prime the
// reply. Tool definitions are counted as their JSON text. It is an estimate:
// the API's usage afterwards is exact.
func estimatePrompt(q request) int64 {
	c := codecFor(q.Model)
	n := int64(3)
	for _, m := range q.messages {
		n += 3 + countTokens(c, m.Role)
		if m.Name != "" {
			n += 1 + countTokens(c, m.Name)
		}
		n += countTokens(c, contentText(m.Content))
		n += countTokens(c, string(m.ToolCalls)) + countTokens(c, string(m.FunctionCall))
	}
	n += countTokens(c, string(q.tools))
	return n
}

// contentText returns the text of a message content: a string, or the text
// parts of an array of parts. Images and audio are not counted.
func contentText(raw json.RawMessage) string {
	if len(raw) == 0 || raw[0] == 'n' {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return string(raw)
	}
	var out string
	for _, p := range parts {
		out += p.Text
	}
	return out
}
