package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/internal/standin"
)

// proxyConfig runs the proxy in front of the stand-in model at %s, with
// the ledger and the cache on the NATS deployment both processes join.
const proxyConfig = `
data_dir: %s
metrics: {listen: ""}
ledger: {store: kv}
llm:
  base_url: %s
  api_key_env: PROVIDER_KEY
  prices: {"*": {prompt_per_mtok: 10000, completion_per_mtok: 10000}}   # a cent a token
proxy:
  keys_file: %s
  clients:
    carol: {max_budget: 2, budget_duration: 1d}
pipelines:
  - name: hooks
    subject: triggers.hooks
    key: {fields: [/hook]}
    effect: {sink: jetstream, subject: effects.hooks}
`

// proxyNodeScript drives two proxies with the openai npm package: a
// plain call retried on the other proxy with the same Idempotency-Key; a
// streamed call, parsed; one streamed call sent to both proxies at once,
// read raw, then retried; a client past its spend limit; a wrong key; a
// model the provider refuses the proxy's key; the model listing. It prints
// what it saw as JSON.
const proxyNodeScript = `
import OpenAI from 'openai';

const [urlA, urlB] = process.argv.slice(2);
const key = process.env.ALICE_KEY;
const A = new OpenAI({ apiKey: key, baseURL: urlA, maxRetries: 0 });
const B = new OpenAI({ apiKey: key, baseURL: urlB, maxRetries: 0 });
const model = 'gpt-4o-mini';
const ask = (q, extra = {}) => ({ model, messages: [{ role: 'user', content: q }], ...extra });
const step = (id) => ({ headers: { 'Idempotency-Key': 'agent-run-7/' + id } });
const out = {};

const p1 = await A.chat.completions.create(ask('Plan step 1 of the failover'), step('step-1')).withResponse();
const p2 = await B.chat.completions.create(ask('Plan step 1 of the failover'), step('step-1')).withResponse();
const plain = (r) => ({ id: r.data.id, content: r.data.choices[0].message.content, tokens: r.data.usage.total_tokens, cache: r.response.headers.get('x-oncegate-cache') });
out.plain = [plain(p1), plain(p2)];

const stream = await A.chat.completions.create(ask('Plan step 2 of the failover', { stream: true, stream_options: { include_usage: true } }), step('step-2'));
let text = '', tokens = 0;
for await (const chunk of stream) {
  if (chunk.choices[0]) text += chunk.choices[0].delta.content ?? '';
  if (chunk.usage) tokens = chunk.usage.total_tokens;
}
out.stream = { text, tokens };

const req3 = ask('Plan step 3 of the failover', { stream: true });
const [ra, rb] = await Promise.all([
  A.chat.completions.create(req3, step('step-3')).asResponse(),
  B.chat.completions.create(req3, step('step-3')).asResponse(),
]);
const [ta, tb] = await Promise.all([ra.text(), rb.text()]);
const rr = await B.chat.completions.create(req3, step('step-3')).asResponse();
const tr = await rr.text();
out.together = {
  equal: ta === tb, retryEqual: tr === ta, bytes: ta.length, done: ta.endsWith('data: [DONE]\n\n'),
  caches: [ra.headers.get('x-oncegate-cache'), rb.headers.get('x-oncegate-cache'), rr.headers.get('x-oncegate-cache')],
};

const C = new OpenAI({ apiKey: process.env.CAROL_KEY, baseURL: urlA, maxRetries: 2 });
out.carol = { answered: 0 };
try {
  for (let i = 0; i < 50; i++) {
    await C.chat.completions.create(ask('Alert ' + i + ': queue depth high', { max_tokens: 100 }));
    out.carol.answered++;
  }
} catch (e) {
  out.carol.error = { name: e.constructor.name, status: e.status, type: e.type, message: e.message };
}

try {
  await new OpenAI({ apiKey: 'sk-not-a-proxy-key-0123456789', baseURL: urlA, maxRetries: 0 }).models.list();
} catch (e) {
  out.auth = { name: e.constructor.name, status: e.status };
}

try {
  await new OpenAI({ apiKey: key, baseURL: urlA, maxRetries: 2 }).chat.completions.create(ask('Plan step 4', { model: 'gpt-4o-restricted' }));
  out.upstreamAuth = { answered: true };
} catch (e) {
  out.upstreamAuth = { name: e.constructor.name, apiError: e instanceof OpenAI.APIError, status: e.status, code: e.code, message: e.message };
}

out.models = (await A.models.list()).data.map((m) => m.id);
console.log(JSON.stringify(out));
`

// npmOpenAI starts installing the openai npm package in a directory of its
// own, and returns the directory and a function that waits for the
// install; it skips the test where Node or npm is not installed.
func npmOpenAI(t *testing.T) (dir string, wait func()) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the proxy's test with the openai npm package needs Node.js and npm", tool)
		}
	}
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"oncegate-proxy-test","private":true,"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error", "openai@6")
	cmd.Dir = dir
	done := make(chan error, 1)
	var out []byte
	go func() {
		var err error
		out, err = cmd.CombinedOutput()
		done <- err
	}()
	t.Cleanup(func() { cancel(); <-done; done <- nil })
	return dir, func() {
		t.Helper()
		err := <-done
		done <- err
		if err != nil {
			t.Fatalf("npm install openai@6 (the npm registry must be reachable): %v\n%s", err, out)
		}
	}
}

// TestProxyWithOpenAINpm: two consumer processes serve the proxy on one
// NATS deployment (the KV ledger and cache) in front of one model; the
// official openai npm package, unchanged, talks to them: a retried call
// with the same Idempotency-Key on the other proxy gets the first answer
// and pays nothing; a stream parses; one streamed call sent to both
// proxies at once is answered by one model call, the same bytes from
// both, and its retry is a hit; a client past its spend limit gets the
// package's RateLimitError naming the limit, without retries, the call
// never sent; a wrong key an AuthenticationError; a call the provider
// refuses the proxy's own key (403) an APIError 502, not an
// AuthenticationError or PermissionDeniedError blaming the client's key,
// and not retried; the model listing passes through.
func TestProxyWithOpenAINpm(t *testing.T) {
	nodeDir, installed := npmOpenAI(t) // while the binary builds and the proxies start
	consumerBinary(t)
	if err := os.WriteFile(filepath.Join(nodeDir, "proxy.mjs"), []byte(proxyNodeScript), 0o644); err != nil {
		t.Fatal(err)
	}
	model, err := standin.New(standin.Options{Latency: 300 * time.Millisecond, Models: []string{"gpt-4o-mini", "gpt-4o"}})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	// The provider: the stand-in, but for gpt-4o-restricted, which it
	// refuses the proxy's key as OpenAI refuses a project a model.
	var refused atomic.Int64
	provider := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			var q struct{ Model string }
			json.Unmarshal(b, &q)
			if q.Model == "gpt-4o-restricted" {
				refused.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				io.WriteString(w, "{\"error\":{\"message\":\"Project `proj_T7kQ2mZp9wXa` does not have access to model `gpt-4o-restricted`\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"model_not_found\"}}")
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		model.ServeHTTP(w, r)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go provider.Serve(ln)
	defer provider.Close()
	modelURL := "http://" + ln.Addr().String() + "/v1"
	srv := natstest.RunServer(t)

	dir := t.TempDir()
	const aliceKey, carolKey = "sk-oncegate-alice-0123456789abcdef", "sk-oncegate-carol-0123456789abcdef"
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte("alice "+aliceKey+"\ncarol "+carolKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var urls []string
	for i := range 2 {
		cfg := filepath.Join(dir, fmt.Sprintf("proxy-%d.yaml", i))
		data := filepath.Join(dir, fmt.Sprintf("data-%d", i))
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(proxyConfig, data, modelURL, keys)), 0o644); err != nil {
			t.Fatal(err)
		}
		c := startChild(t, []string{"PROVIDER_KEY=sk-provider"}, "run", "-config", cfg, "-nats-url", srv.ClientURL(), "-proxy", "127.0.0.1:0")
		at := regexp.MustCompile(`OpenAI-compatible proxy at (http://\S+/v1)`)
		var url string
		waitFor(t, 30*time.Second, "the proxy to listen", func() bool {
			if m := at.FindStringSubmatch(c.stdout.String()); m != nil {
				url = m[1]
			}
			return url != ""
		})
		urls = append(urls, url)
		defer c.stop(t)
	}

	installed()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := exec.CommandContext(ctx, "node", "proxy.mjs", urls[0], urls[1])
	node.Dir = nodeDir
	node.Env = append(os.Environ(), "ALICE_KEY="+aliceKey, "CAROL_KEY="+carolKey)
	out, err := node.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("node proxy.mjs: %v\n%s\n%s", err, out, stderr)
	}
	var got struct {
		Plain []struct {
			ID, Content, Cache string
			Tokens             int
		}
		Stream struct {
			Text   string
			Tokens int
		}
		Together struct {
			Equal, RetryEqual, Done bool
			Bytes                   int
			Caches                  []string
		}
		Carol struct {
			Answered int
			Error    struct {
				Name, Type, Message string
				Status              int
			}
		}
		Auth struct {
			Name   string
			Status int
		}
		UpstreamAuth struct {
			Name, Code, Message string
			APIError, Answered  bool
			Status              int
		}
		Models []string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node printed %s: %v", out, err)
	}
	t.Logf("the openai npm package saw: %s", out)

	if p := got.Plain; len(p) != 2 || p[0].Cache != "miss" || p[1].Cache != "hit" || p[0].ID != p[1].ID || p[0].Content != p[1].Content || p[0].Tokens == 0 {
		t.Errorf("plain call and its retry on the other proxy: %+v; want a miss, then a hit with the same answer", p)
	}
	if !strings.HasPrefix(got.Stream.Text, standin.Label) || got.Stream.Tokens == 0 {
		t.Errorf("stream: %+v; want the answer and its usage", got.Stream)
	}
	tg := got.Together
	if !tg.Equal || !tg.RetryEqual || !tg.Done || tg.Bytes == 0 || len(tg.Caches) != 3 || tg.Caches[2] != "hit" ||
		!(tg.Caches[0] == "miss" && tg.Caches[1] == "shared" || tg.Caches[0] == "shared" && tg.Caches[1] == "miss") {
		t.Errorf("one streamed call on both proxies, then retried: %+v; want the same bytes everywhere, a miss and a shared, then a hit", tg)
	}
	ce := got.Carol.Error
	if got.Carol.Answered == 0 || ce.Name != "RateLimitError" || ce.Status != 429 || ce.Type != "spend_limit_exceeded" ||
		!strings.Contains(ce.Message, `client key "carol" may spend $2.00 per 1d`) {
		t.Errorf("carol: %+v; want a few answers, then a RateLimitError naming her limit", got.Carol)
	}
	if got.Auth.Name != "AuthenticationError" || got.Auth.Status != 401 {
		t.Errorf("a wrong key: %+v; want an AuthenticationError", got.Auth)
	}
	if ua := got.UpstreamAuth; !ua.APIError || ua.Status != 502 || ua.Code != "upstream_auth_failed" || ua.Name == "AuthenticationError" ||
		ua.Name == "PermissionDeniedError" || strings.Contains(ua.Message, "proj_") || refused.Load() != 1 {
		t.Errorf("a call the provider refuses the proxy's key: %+v, sent %d times; want one APIError 502 upstream_auth_failed, not retried, without the provider's text", ua, refused.Load())
	}
	if strings.Join(got.Models, ",") != "gpt-4o-mini,gpt-4o" {
		t.Errorf("models %q; want the model's own listing", got.Models)
	}
	// One model call each for steps 1, 2 and 3 (3 on both proxies at
	// once, and retried), and one per answer carol got: the call her limit
	// refused, and its retries, were never sent.
	if n, want := model.Stats().Completions, int64(3+got.Carol.Answered); n != want {
		t.Errorf("the model answered %d calls; want %d", n, want)
	}
}
