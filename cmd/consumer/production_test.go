package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/standin"
)

// These tests take Oncegate to production as a platform engineer would the
// first time: a recipe run as its header says, with what is missing
// missing, and the proxy alone.

const alertmanagerRecipe = "../../examples/recipes/alertmanager.yaml"

// standinEnv asks for the stand-in model by name, for a child process
// that runs a configuration with a model step offline (the built-in one).
var standinEnv = []string{"ONCEGATE_LLM_STANDIN=true"}

// exitOrStart waits until c exits (true) or started reports that it is
// serving (false), whichever comes first.
func exitOrStart(t *testing.T, c *child, started func() bool) (exited bool, err error) {
	t.Helper()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-c.done:
			c.done <- err // for the cleanup
			return true, err
		case <-tick.C:
			if started() {
				return false, nil
			}
		case <-deadline.C:
			t.Fatalf("the consumer neither exited nor started within 60s; stderr:\n%s", c.stderr.String())
		}
	}
}

// exitCodeOf is a finished process's exit status.
func exitCodeOf(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestRunNeedsAModel: a pipeline with a model step and no model (no
// llm.base_url) is refused, by config check and by run, which starts
// nothing, naming both ways to give it one; the stand-in answers only when
// asked for by name (llm.standin). run once answered the Alertmanager
// recipe's triage with the stand-in, one INFO line saying so, and routed
// real pages by its made-up answers.
func TestRunNeedsAModel(t *testing.T) {
	t.Setenv("ALERTMANAGER_WEBHOOK_TOKEN", "am-t0ken-0123456789")
	t.Setenv("PAGERDUTY_ROUTING_KEY", "R0123456789abcdef0123456789abcde")
	t.Setenv("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T0/B0/s3cr3tpath0123456789")
	const want = "llm.base_url: pipeline alerts needs a model, and none is set"

	_, _, err := runCmd(t, "", "config", "check", alertmanagerRecipe)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "llm.standin: true") {
		t.Errorf("config check with no model = %v; want %q, naming llm.standin", err, want)
	}

	dir := t.TempDir()
	c := startChild(t, nil, "run", "-config", alertmanagerRecipe, "-data", filepath.Join(dir, "data"),
		"-listen", "127.0.0.1:0", "-metrics", "off", "-ingress", "127.0.0.1:0")
	exited, err := exitOrStart(t, c, func() bool { return ingressAddrRE.MatchString(c.stdout.String()) })
	if !exited {
		c.stop(t)
		t.Fatalf("run started with no model, the stand-in answering the triage; stdout:\n%s\nstderr:\n%s", c.stdout.String(), c.stderr.String())
	}
	if code := exitCodeOf(err); code != 1 || !strings.Contains(c.stderr.String(), want) {
		t.Errorf("run with no model exited %d; want 1 and %q; stderr:\n%s", code, want, c.stderr.String())
	}

	// Asked for by name, the stand-in serves, and says so.
	t.Setenv("ONCEGATE_LLM_STANDIN", "true")
	out, _, err := runCmd(t, "", "config", "check", alertmanagerRecipe)
	if err != nil || !strings.Contains(out, "the offline stand-in model") {
		t.Errorf("config check with llm.standin = %v; want it valid, saying the stand-in answers:\n%s", err, out)
	}
	// Not beside an endpoint.
	t.Setenv("ONCEGATE_LLM_BASE_URL", "https://api.openai.com/v1")
	if _, _, err := runCmd(t, "", "config", "check", alertmanagerRecipe); err == nil || !strings.Contains(err.Error(), "llm.standin") {
		t.Errorf("config check with llm.standin and llm.base_url = %v; want a refusal", err)
	}
}

// TestRunChecksEverythingFirst: run checks every secret, variable and file
// the configuration needs before it starts anything, and reports them all
// in one error, one line each: the recipe's run with nothing set names the
// model, both effect secrets and the ingress source's token, and starts no
// NATS server, makes no data directory, and says "consumer:" once. A
// webhook source without its secret is one of them unless it is marked
// optional. run once started NATS (eighteen banner lines) and then exited
// on the first missing variable, and started a source without a secret,
// which answered 503.
func TestRunChecksEverythingFirst(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	c := startChild(t, nil, "run", "-config", alertmanagerRecipe, "-data", data,
		"-listen", "127.0.0.1:0", "-metrics", "off", "-ingress", "127.0.0.1:0")
	exited, err := exitOrStart(t, c, func() bool { return ingressAddrRE.MatchString(c.stdout.String()) })
	if !exited {
		c.stop(t)
		t.Fatalf("run started with nothing set; stderr:\n%s", c.stderr.String())
	}
	stderr := c.stderr.String()
	if code := exitCodeOf(err); code != 1 {
		t.Errorf("run exited %d; want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	wants := []string{
		"llm.base_url: pipeline alerts needs a model",
		"pipelines[alerts].effects[pagerduty].routing_key_env: environment variable PAGERDUTY_ROUTING_KEY is not set",
		"pipelines[alerts].effects[slack].url_env: environment variable SLACK_WEBHOOK_URL is not set",
		"ingress.sources[alertmanager]: environment variable ALERTMANAGER_WEBHOOK_TOKEN is not set",
	}
	if len(lines) != 1+len(wants) || !strings.HasPrefix(lines[0], "consumer: ") || !strings.Contains(lines[0], "fix these 4 first") {
		t.Errorf("stderr is %d lines; want a heading and one line per problem (%d):\n%s", len(lines), len(wants), stderr)
	}
	for _, w := range wants {
		n := 0
		for _, l := range lines[1:] {
			if strings.Contains(l, w) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("stderr has %d lines with %q; want 1:\n%s", n, w, stderr)
		}
	}
	for _, not := range []string{"nats-server", "Starting", "consumer: consumer:"} {
		if strings.Contains(stderr, not) {
			t.Errorf("stderr has %q: something started before the check:\n%s", not, stderr)
		}
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the data directory %s: %v; want it not made", data, err)
	}

	// Secret files held to the mode rule are among the problems too, and
	// a source marked optional may start without its secret.
	loose := filepath.Join(dir, "loose-token")
	if err := os.WriteFile(loose, []byte("a-token-0123456789abcdef\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "oncegate.yaml")
	writeFile(t, cfg, `
data_dir: `+data+`
llm: {standin: true}
ingress:
  sources:
    - {name: github, kind: github, subject: triggers.github, secret_env: TEST_UNSET_GITHUB_SECRET, optional: true}
    - {name: hooks, kind: hmac, subject: triggers.hooks, secret_file: `+loose+`}
pipelines:
  - name: github
    subject: triggers.github
    effect: {sink: jetstream, subject: effects.github}
  - name: hooks
    subject: triggers.hooks
    effect: {sink: jetstream, subject: effects.hooks}
`)
	_, _, err = runCmd(t, "", "run", "-config", cfg, "-listen", "127.0.0.1:0", "-metrics", "off", "-ingress", "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "fix this first") || !strings.Contains(err.Error(), "ingress.sources[hooks]") ||
		!strings.Contains(err.Error(), "chmod 600 "+loose) || strings.Contains(err.Error(), "ingress.sources[github]") {
		t.Fatalf("run = %v; want one problem, the hooks source's file open to others (github's secret is optional)", err)
	}
	if err := os.Chmod(loose, 0o600); err != nil {
		t.Fatal(err)
	}
	c = startChild(t, nil, "run", "-config", cfg, "-listen", "127.0.0.1:0", "-metrics", "off", "-ingress", "127.0.0.1:0")
	if exited, err := exitOrStart(t, c, func() bool { return ingressAddrRE.MatchString(c.stdout.String()) }); exited {
		t.Fatalf("run with an optional source's secret unset exited: %v\n%s", err, c.stderr.String())
	}
	if !regexp.MustCompile(`(?m)level=WARN.*ingress.sources\[github\]: environment variable TEST_UNSET_GITHUB_SECRET is not set.*optional`).MatchString(c.stderr.String()) {
		t.Errorf("stderr lacks a warning for the optional source:\n%s", c.stderr.String())
	}
	c.stop(t)
}

// writeFile writes content to path.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRunProxyAlone: examples/proxy.yaml, the proxy alone, no pipeline,
// runs as its header says (its endpoint, keys file and addresses set by
// ONCEGATE_* variables and flags, as a user would point them elsewhere):
// it serves chat completions through the cache to the endpoint, is
// ready, and starts no NATS server (nothing needs one; it once refused
// with "at least one pipeline is required", and a pipeline would have
// bound the embedded server's 127.0.0.1:4222). Its metrics are where
// -metrics says; an embedded server's address must be loopback.
func TestRunProxyAlone(t *testing.T) {
	provider, err := standin.New(standin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	base, stop, err := provider.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop() })
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	const key = "sk-team-a-0123456789abcdefghij"
	writeFile(t, keys, "team-a "+key+"\n")
	const cfg = "../../examples/proxy.yaml"
	env := []string{"ONCEGATE_LLM_BASE_URL=" + base, "ONCEGATE_PROXY_KEYS_FILE=" + keys, "ONCEGATE_PROXY_LISTEN=127.0.0.1:0"}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	if out, _, err := runCmd(t, "", "config", "check", cfg); err != nil {
		t.Fatalf("config check of the proxy alone: %v\n%s", err, out)
	}
	ops := freePort(t)
	c := startChild(t, env, "run", "-config", cfg, "-data", filepath.Join(dir, "data"), "-metrics", fmt.Sprintf("127.0.0.1:%d", ops))
	at := regexp.MustCompile(`OpenAI-compatible proxy at (http://\S+/v1)`)
	if exited, err := exitOrStart(t, c, func() bool { return at.MatchString(c.stdout.String()) }); exited {
		t.Fatalf("run of the proxy alone exited: %v\nstdout:\n%s\nstderr:\n%s", err, c.stdout.String(), c.stderr.String())
	}
	defer c.stop(t)
	url := at.FindStringSubmatch(c.stdout.String())[1]
	waitFor(t, 30*time.Second, "/readyz to answer 200", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", ops))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	req, _ := http.NewRequest(http.MethodPost, url+"/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello."}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"choices"`) {
		t.Errorf("chat completion through the proxy: %d %s", resp.StatusCode, body)
	}
	if out := c.stdout.String() + c.stderr.String(); strings.Contains(out, "embedded NATS") || strings.Contains(out, "nats-server") {
		t.Errorf("the proxy alone started a NATS server:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "nats")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the proxy alone made an embedded NATS store: %v", err)
	}

	// An embedded server listens on loopback only.
	_, _, err = runCmd(t, "", "run", "-data", filepath.Join(dir, "other"), "-listen", "0.0.0.0:4222", "-metrics", "off")
	if err == nil || !strings.Contains(err.Error(), "nats.embedded.listen") || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("run -listen 0.0.0.0:4222 = %v; want a refusal: the embedded server listens on loopback only", err)
	}
}
