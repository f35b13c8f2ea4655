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

func mustKey(t *testing.T, ns string, req openai.ChatCompletionRequest) llmcache.Key {
	t.Helper()
	k, err := llmcache.KeyOf(ns, req)
	if err != nil {
		t.Fatalf("KeyOf(%q, …): %v", ns, err)
	}
	return k
}

// TestKeyGolden pins one key: cache entries outlive releases, and a silent
// change would turn every cached answer into a miss (and every retry into a
// paid call). A deliberate change bumps the key domain's version.
func TestKeyGolden(t *testing.T) {
	if got, want := mustKey(t, "tenant-a/alerts", baseRequest()).String(), "93717d9b3208f993cc516d6231e52cb6"; got != want {
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
		{"stream", func(r *openai.ChatCompletionRequest) { r.Stream = true }},
		{"stream options", func(r *openai.ChatCompletionRequest) {
			r.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
		}},
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
	_, err := llmcache.KeyOf("ns", r)
	if !errors.Is(err, llmcache.ErrInvalidRequest) || !errors.Is(err, canon.ErrInexactInteger) {
		t.Errorf("KeyOf with seed 2^53+1: error = %v; want ErrInvalidRequest wrapping canon.ErrInexactInteger", err)
	}
}
