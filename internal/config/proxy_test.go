package config

import (
	"errors"
	"strings"
	"testing"
)

// TestProxyWarnings: config check warns, for a proxy with spend limits,
// of the models a limited client will be refused (unpriced ones, listed
// in proxy.models or not), of the calls without max_tokens it will
// refuse (no proxy.completion_tokens, no max_output_tokens), and of limits
// counted at the built-in example price; a proxy without limits has
// nothing to warn of.
func TestProxyWarnings(t *testing.T) {
	for _, tt := range []struct {
		name, doc string
		want      []string // substrings, one per warning, in order
	}{
		{"no limits", "proxy: {models: [gpt-4o]}\n", nil},
		{"built-in prices", "proxy: {max_budget: 5}\n", []string{
			"built-in example (gpt-4o-mini at OpenAI's list price of " + DefaultPricesAsOf + ")",
			`refused every model llm.prices does not price (it prices "gpt-4o-mini")`,
		}},
		{"priced, output limits known", "llm: {prices: {a: {prompt_per_mtok: 1, completion_per_mtok: 2, max_output_tokens: 100}}}\nproxy: {clients: {ci: {max_budget: 1}}, models: [a]}\n", nil},
		{"an allowed model unpriced", "llm: {prices: {a: {prompt_per_mtok: 1, completion_per_mtok: 2}}}\nproxy: {max_budget: 5, completion_tokens: 500, models: [a, b]}\n", []string{
			`proxy.models lists "b", which llm.prices does not price`,
		}},
		{"no output limit", "llm: {prices: {a: {prompt_per_mtok: 1, completion_per_mtok: 2}, '*': {prompt_per_mtok: 9, completion_per_mtok: 9}}}\nproxy: {max_budget: 5, models: [a, z]}\n", []string{
			`a call to "a" from a client with a spend limit that sets no max_tokens is refused: set proxy.completion_tokens or llm.prices[a].max_output_tokens`,
			`a call to "z" from a client with a spend limit that sets no max_tokens is refused: set proxy.completion_tokens or llm.prices[*].max_output_tokens`,
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.doc+minimal), "proxy.yaml")
			if err != nil {
				t.Fatal(err)
			}
			got := c.ProxyWarnings()
			if len(got) != len(tt.want) {
				t.Fatalf("ProxyWarnings() = %q; want %d warnings", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %d = %q; want it to say %q", i, got[i], w)
				}
			}
		})
	}
}

// TestProxyValidate: proxy.completion_tokens, proxy.models and
// llm.prices' max_output_tokens are checked.
func TestProxyValidate(t *testing.T) {
	for _, tt := range []struct{ doc, path string }{
		{"proxy: {completion_tokens: -1}\n", "proxy.completion_tokens"},
		{"proxy: {models: [a, '']}\n", "proxy.models[1]"},
		{"proxy: {models: [a, ' a']}\n", "proxy.models[1]"},
		{"proxy: {models: [a, b, a]}\n", "proxy.models[2]"},
		{"llm: {prices: {a: {max_output_tokens: -5}}}\n", "llm.prices[a].max_output_tokens"},
	} {
		_, err := Parse([]byte(tt.doc+minimal), "proxy.yaml")
		var fe *FieldError
		if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.path) {
			t.Errorf("%q: %v; want ErrInvalid at %s", tt.doc, err, tt.path)
		}
	}
}

// TestExplainBuiltInPrices: explain marks the built-in example price as
// such, with its date, and shows a model's output limit.
func TestExplainBuiltInPrices(t *testing.T) {
	var b strings.Builder
	if err := Default().Explain(&b); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "gpt-4o-mini: $0.15 prompt, $0.6 completion per million tokens, at most 16384 output tokens (built-in example, OpenAI's list price of "+DefaultPricesAsOf) {
		t.Errorf("Explain:\n%s\nwant the built-in price marked as an example", out)
	}
}
