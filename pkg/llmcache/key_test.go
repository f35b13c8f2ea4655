package llmcache_test

import (
	"encoding/json"
	"errors"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/pkg/canon"
	"github.com/oncegate/oncegate/pkg/llmcache"
)

func baseRequest() openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: "You triage alerts."},
			{Role: openai.ChatMessageRoleUser, Content: "Disk /var is 93% full on db-2."},
		},
		Temperature: 0.2,
		MaxTokens:   200,
	}
}

// testEndpoint is the endpoint the key tests key for.
const testEndpoint = "https://api.openai.com/v1"

func mustKey(t *testing.T, ns string, req openai.ChatCompletionRequest) llmcache.Key {
	t.Helper()
	k, err := llmcache.KeyOf(testEndpoint, llmcache.Call{Namespace: ns}, req)
	if err != nil {
		t.Fatalf("KeyOf(%q, …): %v", ns, err)
	}
	return k
}

// TestKeyGolden pins one key: cache entries outlive releases, and a silent
// change would turn every cached answer into a miss (and every retry into a
// paid call). A deliberate change bumps the key domain's version.
func TestKeyGolden(t *testing.T) {
	if got, want := mustKey(t, "tenant-a/alerts", baseRequest()).String(), "20fc419aa1d34883c39743def870b884"; got != want {
		t.Errorf("KeyOf(base request) = %s; want %s", got, want)
	}
}

func TestKeyChangesWithTheAnswer(t *testing.T) {
	base := mustKey(t, "ns", baseRequest())
	seed := 42
	for _, tt := range []struct {
		name string
		edit func(r *openai.ChatCompletionRequest)
	}{
		{"model", func(r *openai.ChatCompletionRequest) { r.Model = "gpt-4o" }},
		{"user message", func(r *openai.ChatCompletionRequest) { r.Messages[1].Content = "Disk /var is 94% full on db-2." }},
		{"system message", func(r *openai.ChatCompletionRequest) { r.Messages[0].Content = "You triage alerts tersely." }},
		{"role", func(r *openai.ChatCompletionRequest) { r.Messages[0].Role = openai.ChatMessageRoleUser }},
		{"message name", func(r *openai.ChatCompletionRequest) { r.Messages[1].Name = "oncall" }},
		{"message order", func(r *openai.ChatCompletionRequest) { r.Messages[0], r.Messages[1] = r.Messages[1], r.Messages[0] }},
		{"temperature", func(r *openai.ChatCompletionRequest) { r.Temperature = 0.3 }},
		{"top_p", func(r *openai.ChatCompletionRequest) { r.TopP = 0.9 }},
		{"max tokens", func(r *openai.ChatCompletionRequest) { r.MaxTokens = 201 }},
		{"max completion tokens", func(r *openai.ChatCompletionRequest) { r.MaxCompletionTokens = 100 }},
		{"n", func(r *openai.ChatCompletionRequest) { r.N = 2 }},
		{"seed", func(r *openai.ChatCompletionRequest) { r.Seed = &seed }},
		{"stop", func(r *openai.ChatCompletionRequest) { r.Stop = []string{"\n\n"} }},
		{"presence penalty", func(r *openai.ChatCompletionRequest) { r.PresencePenalty = 0.5 }},
		{"logit bias", func(r *openai.ChatCompletionRequest) { r.LogitBias = map[string]int{"1234": -100} }},
		{"response format", func(r *openai.ChatCompletionRequest) {
			r.ResponseFormat = &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}
		}},
		{"tools", func(r *openai.ChatCompletionRequest) {
			r.Tools = []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "file_ticket"}}}
		}},
		{"tool choice", func(r *openai.ChatCompletionRequest) { r.ToolChoice = "none" }},
		{"reasoning effort", func(r *openai.ChatCompletionRequest) { r.ReasoningEffort = "high" }},
		// A streamed answer is stored and replayed as a stream, a plain one
		// as JSON: they are different entries.
		{"stream", func(r *openai.ChatCompletionRequest) { r.Stream = true }},
		{"stream options", func(r *openai.ChatCompletionRequest) {
			r.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := baseRequest()
			tt.edit(&r)
			if k := mustKey(t, "ns", r); k == base {
				t.Errorf("changing the %s left the key at %v", tt.name, k)
			}
		})
	}
}

func TestKeyIgnoresTransport(t *testing.T) {
	base := mustKey(t, "ns", baseRequest())
	for _, tt := range []struct {
		name string
		edit func(r *openai.ChatCompletionRequest)
	}{
		{"end-user id", func(r *openai.ChatCompletionRequest) { r.User = "user-81" }},
		{"store", func(r *openai.ChatCompletionRequest) { r.Store = true }},
		{"metadata", func(r *openai.ChatCompletionRequest) { r.Metadata = map[string]string{"run": "r-9"} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := baseRequest()
			tt.edit(&r)
			if k := mustKey(t, "ns", r); k != base {
				t.Errorf("changing the %s changed the key: %v; want %v", tt.name, k, base)
			}
		})
	}
}

// TestKeySameRequestSpelledDifferently builds one request from two JSON
// texts that differ in member order, whitespace and number spelling.
func TestKeySameRequestSpelledDifferently(t *testing.T) {
	var a, b openai.ChatCompletionRequest
	if err := json.Unmarshal([]byte(`{"model":"m","temperature":0.5,"messages":[{"role":"user","content":"hi"}],"logit_bias":{"7":1,"3":-2}}`), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte("{ \"logit_bias\": {\"3\": -2, \"7\": 1},\n \"messages\": [ {\"content\": \"hi\", \"role\": \"user\"} ],\n \"temperature\": 5e-1, \"model\": \"m\" }"), &b); err != nil {
		t.Fatal(err)
	}
	if ka, kb := mustKey(t, "ns", a), mustKey(t, "ns", b); ka != kb {
		t.Errorf("keys %v and %v for one request spelled two ways", ka, kb)
	}
}

func TestKeyNamespaces(t *testing.T) {
	r := baseRequest()
	seen := map[llmcache.Key]string{}
	for _, ns := range []string{"", "a", "ab", "a/b", "tenant-a/alerts", "tenant-b/alerts"} {
		k := mustKey(t, ns, r)
		if other, dup := seen[k]; dup {
			t.Errorf("namespaces %q and %q share key %v", ns, other, k)
		}
		seen[k] = ns
	}
}

func TestKeyRejectsInexactSeed(t *testing.T) {
	r := baseRequest()
	seed := 1<<53 + 1
	r.Seed = &seed
	_, err := llmcache.KeyOf(testEndpoint, llmcache.Call{Namespace: "ns"}, r)
	if !errors.Is(err, llmcache.ErrInvalidRequest) || !errors.Is(err, canon.ErrInexactInteger) {
		t.Errorf("KeyOf with seed 2^53+1: error = %v; want ErrInvalidRequest wrapping canon.ErrInexactInteger", err)
	}
}

// TestKeyTemplate: with a template named, the rendered messages (which may
// carry a timestamp) do not split the cache, and the template's input,
// name and version do.
func TestKeyTemplate(t *testing.T) {
	render := func(at string) openai.ChatCompletionRequest {
		r := baseRequest()
		r.Messages[1].Content = "Disk /var is 93% full on db-2. Rendered at " + at
		return r
	}
	tmpl := func(name, version, input string) llmcache.Call {
		return llmcache.Call{Namespace: "ns", Template: &llmcache.Template{Name: name, Version: version, Input: []byte(input)}}
	}
	key := func(c llmcache.Call, r openai.ChatCompletionRequest) llmcache.Key {
		t.Helper()
		k, err := llmcache.KeyOf(testEndpoint, c, r)
		if err != nil {
			t.Fatalf("KeyOf: %v", err)
		}
		return k
	}
	in := `{"host":"db-2","mount":"/var","used":93}`
	base := key(tmpl("triage", "3", in), render("10:00:00"))
	if k := key(tmpl("triage", "3", `{ "used": 93, "mount": "/var", "host": "db-2" }`), render("10:00:07")); k != base {
		t.Errorf("same template input rendered at another time: key %v; want %v", k, base)
	}
	for name, c := range map[string]llmcache.Call{
		"input":   tmpl("triage", "3", `{"host":"db-3","mount":"/var","used":93}`),
		"name":    tmpl("summarize", "3", in),
		"version": tmpl("triage", "4", in),
	} {
		if k := key(c, render("10:00:00")); k == base {
			t.Errorf("another template %s kept the key %v", name, k)
		}
	}
	if k := key(llmcache.Call{Namespace: "ns"}, render("10:00:00")); k == base {
		t.Errorf("the call without a template shares the templated key %v", k)
	}
	if _, err := llmcache.KeyOf(testEndpoint, tmpl("triage", "3", `{"a":1,"a":2}`), render("x")); !errors.Is(err, llmcache.ErrInvalidRequest) || !errors.Is(err, canon.ErrDuplicateName) {
		t.Errorf("template input with a duplicate name: error %v; want ErrInvalidRequest wrapping canon.ErrDuplicateName", err)
	}
}

func TestKeyByIntent(t *testing.T) {
	r := baseRequest()
	a := llmcache.Call{Namespace: "ns", Intent: "0123456789abcdef0123456789abcdef"}
	b := llmcache.Call{Namespace: "ns", Intent: "fedcba9876543210fedcba9876543210"}
	ka, _ := llmcache.KeyOf(testEndpoint, a, r)
	kb, _ := llmcache.KeyOf(testEndpoint, b, r)
	if ka != kb {
		t.Errorf("intents without KeyByIntent: keys %v and %v; want one shared key", ka, kb)
	}
	a.KeyByIntent, b.KeyByIntent = true, true
	ka2, _ := llmcache.KeyOf(testEndpoint, a, r)
	kb2, _ := llmcache.KeyOf(testEndpoint, b, r)
	if ka2 == kb2 || ka2 == ka {
		t.Errorf("KeyByIntent: keys %v and %v (shared %v); want two new keys", ka2, kb2, ka)
	}
}
