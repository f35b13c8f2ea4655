package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigCheckProxyWarnings: config check warns of a proxy whose
// clients have a spend limit and whose models are not all priced, or have
// no bound for calls without max_tokens, and explains the proxy's models
// and reservation.
func TestConfigCheckProxyWarnings(t *testing.T) {
	dir := t.TempDir()
	file, keys := filepath.Join(dir, "oncegate.yaml"), filepath.Join(dir, "proxy-keys")
	if err := os.WriteFile(keys, []byte("team-a sk-team-a-0123456789abcdefghij\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(`
llm:
  standin: true
  prices: {gpt-4o-mini: {prompt_per_mtok: 0.15, completion_per_mtok: 0.60}}
proxy:
  listen: 127.0.0.1:8081
  keys_file: `+keys+`
  max_budget: 5
  models: [gpt-4o-mini, gpt-4o]
pipelines:
  - {name: hooks, subject: triggers.webhooks, effect: {sink: jetstream, subject: effects.webhooks}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := runCmd(t, "", "config", "check", file)
	if err != nil {
		t.Fatalf("config check: %v", err)
	}
	for _, want := range []string{
		`warning: proxy: proxy.models lists "gpt-4o", which llm.prices does not price: clients with a spend limit are refused it`,
		`warning: proxy: a call to "gpt-4o-mini" from a client with a spend limit that sets no max_tokens is refused: set proxy.completion_tokens or llm.prices[gpt-4o-mini].max_output_tokens`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("config check's warnings lack %q:\n%s", want, stderr)
		}
	}
	if !strings.Contains(stdout, "models only gpt-4o-mini, gpt-4o") {
		t.Errorf("config check's explanation lacks the proxy's models:\n%s", stdout)
	}
}
