package app_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/natsrun"
	"github.com/oncegate/oncegate/internal/secretfile"
)

// TestPreflightListsEverything: Start checks every secret, variable and
// file the configuration needs before it starts anything, and returns
// them all in one *PreflightError, one line each, wrapping ErrNotStarted
// and each problem's own sentinel: no model, the endpoint's API key
// variable, an effect's variable and an effect's file open to others, a
// webhook source's secret, the encryption key's mode, the NATS token
// file's mode, the proxy's keys file. Nothing is made: not even the data
// directory.
func TestPreflightListsEverything(t *testing.T) {
	dir := t.TempDir()
	loose := func(name string, content []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := loose("oncegate.key", []byte("0123456789abcdef0123456789abcdef"))
	token := loose("nats-token", []byte("nats-s3cret-token-0123456789"))
	routing := loose("routing-key", []byte("R0123456789abcdef0123456789abcde"))
	cfg, err := config.ParseEnv([]byte(`
data_dir: `+filepath.Join(dir, "data")+`
encryption: {key_file: `+key+`}
nats:
  embedded: {listen: "127.0.0.1:0"}
  token_file: `+token+`
ingress:
  listen: 127.0.0.1:0
  sources:
    - {name: github, kind: github, subject: triggers.github, secret_env: TEST_GITHUB_SECRET}
proxy:
  listen: 127.0.0.1:0
  keys_file: `+filepath.Join(dir, "no-such-keys")+`
pipelines:
  - name: triage
    subject: triggers.github
    step: {name: summary, prompt: "Summarise {{.}}"}
    effects:
      slack: {preset: slack, url_env: TEST_SLACK_URL, text: "{{.answer_text}}"}
      pagerduty: {preset: pagerduty, routing_key_file: `+routing+`, summary: s, source: s}
`), "test.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = app.Start(context.Background(), cfg, app.Options{NoOps: true, Getenv: func(string) string { return "" }})
	var pe *app.PreflightError
	if !errors.As(err, &pe) || !errors.Is(err, app.ErrNotStarted) {
		t.Fatalf("Start = %v; want a *PreflightError wrapping ErrNotStarted", err)
	}
	t.Logf("%v", err)
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 1+len(pe.Problems) {
		t.Errorf("%d lines for %d problems; want a heading and one line each:\n%s", len(lines), len(pe.Problems), err)
	}
	for _, want := range []string{
		"llm.base_url: pipeline triage and the proxy need a model",
		"pipelines[triage].effects[slack].url_env: environment variable TEST_SLACK_URL is not set",
		"pipelines[triage].effects[pagerduty].routing_key_file: " + routing,
		"ingress.sources[github]: environment variable TEST_GITHUB_SECRET is not set",
		"chmod 600 " + key,
		"chmod 600 " + token,
		"proxy.keys_file: ",
	} {
		n := 0
		for _, l := range lines[1:] {
			if strings.Contains(l, want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d problems say %q; want 1:\n%s", n, want, err)
		}
	}
	for _, is := range []error{config.ErrMissing, secretfile.ErrMode, app.ErrKeyFilePermissions, os.ErrNotExist} {
		if !errors.Is(err, is) {
			t.Errorf("Start error is not %v:\n%s", is, err)
		}
	}
	if !errors.As(err, new(*natsrun.FileError)) {
		t.Errorf("Start error holds no *natsrun.FileError for the token file:\n%s", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data directory: %v; want it not made", err)
	}

	// An endpoint off this host needs its key's variable.
	cfg.LLM.BaseURL = "https://api.openai.com/v1"
	_, err = app.Preflight(cfg, app.Options{LookupEnv: func(string) (string, bool) { return "", false }})
	if err == nil || !strings.Contains(err.Error(), "llm.api_key_env: environment variable OPENAI_API_KEY is not set") || strings.Contains(err.Error(), "needs a model") {
		t.Errorf("Preflight with a remote endpoint and no key = %v; want the key's variable named", err)
	}
}

// TestProxyAlone: with the proxy alone (no pipeline, the cache in the
// data directory) nothing needs NATS: Start starts no server and opens no
// connection, /readyz is ready, and Run waits for its context.
func TestProxyAlone(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte("team-a sk-team-a-0123456789abcdefghij\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.ParseEnv([]byte(`
data_dir: `+filepath.Join(dir, "data")+`
llm: {standin: true}
metrics: {listen: "127.0.0.1:0"}
proxy: {listen: "127.0.0.1:0", keys_file: `+keys+`}
`), "test.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := app.Start(ctx, cfg, app.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Embedded != nil || a.Conn != nil || a.Consumer != nil || a.Proxy == nil {
		t.Errorf("the proxy alone: embedded server %v, connection %v, consumer %v, proxy %v; want the proxy only", a.Embedded, a.Conn, a.Consumer, a.Proxy)
	}
	if err := a.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + a.OpsAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz = %d %s; want 200", resp.StatusCode, body)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v; want context.Canceled once its context is", err)
	}
}
