package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/goleak"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/internal/ops"
	"github.com/oncegate/oncegate/internal/proxy"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/badgerstore"
	"github.com/oncegate/oncegate/pkg/llmcache/jsstore"
)

// TestMain fails the package's tests if they leave goroutines behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/dgraph-io/badger/v4.(*DB).monitorCache"),
		goleak.IgnoreTopFunction("github.com/dgraph-io/ristretto/v2/z.(*AllocatorPool).freeupAllocators"),
	)
}

// Client keys of the tests' keys file.
const (
	aliceKey = "sk-proxy-alice-0123456789abcdef"
	bobKey   = "sk-proxy-bob-0123456789abcdef00"
)

// prices is $0.01 a token, so that spend limits are reached in a few
// calls.
var prices = map[string]config.Price{"*": {PromptPerMTok: 10_000, CompletionPerMTok: 10_000}}

// cachePrices are prices as the cache takes them.
func cachePrices(ps map[string]config.Price) llmcache.Prices {
	out := llmcache.Prices{}
	for m, p := range ps {
		out[m] = llmcache.Price{Prompt: p.PromptPerMTok, Completion: p.CompletionPerMTok}
	}
	return out
}

// model starts a stand-in model; it returns the server and its base URL.
func model(t *testing.T, opts standin.Options) (*standin.Server, string) {
	t.Helper()
	s, err := standin.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	url, stop, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop() })
	return s, url
}

func keysFile(t testing.TB) *proxy.Keys {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte("# client key\nalice "+aliceKey+"\nbob   "+bobKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := proxy.LoadKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// badgerCache opens a Badger cache with the tests' prices, closed at the
// test's end.
func badgerCache(t testing.TB) *llmcache.Cache {
	t.Helper()
	return badgerCacheWith(t, llmcache.Options{Prices: cachePrices(prices)})
}

// badgerCacheWith opens a Badger cache with opts, closed at the test's
// end.
func badgerCacheWith(t testing.TB, opts llmcache.Options) *llmcache.Cache {
	t.Helper()
	c, err := badgerstore.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// start serves a proxy with cfg in front of the model at modelURL,
// through cache, at the tests' prices; it returns its base URL
// (".../v1") and its metrics.
func start(t *testing.T, cfg config.Proxy, cache *llmcache.Cache, modelURL string) (string, *ops.Metrics) {
	t.Helper()
	return startWith(t, proxy.Options{Config: &cfg, Cache: cache, BaseURL: modelURL, Prices: prices})
}

// startWith serves a proxy with opts, filling in the tests' keys, an
// HTTP transport, the provider key "sk-provider" and metrics where opts
// leaves them unset; it returns its base URL (".../v1") and its metrics.
func startWith(t *testing.T, opts proxy.Options) (string, *ops.Metrics) {
	t.Helper()
	cfg := *opts.Config
	cfg.Listen = "127.0.0.1:0"
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = config.DefaultProxyMaxBody
	}
	opts.Config = &cfg
	keys := keysFile(t)
	cache := opts.Cache
	m := ops.NewMetrics(ops.MetricsOptions{LLMStats: func() []llmhook.StepStats { return llmhook.Stats(cache) }})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	opts.Keys, opts.Metrics = keys, m
	if opts.Upstream == nil {
		opts.Upstream = tr
	}
	if opts.APIKey == "" {
		opts.APIKey = "sk-provider"
	}
	srv, err := proxy.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	m.AddProxy(keys.Clients(), srv.Spend)
	addr, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return "http://" + addr + "/v1", m
}

// client is a go-openai client of the proxy at url with key.
func client(t *testing.T, url, key string) *openai.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cfg := openai.DefaultConfig(key)
	cfg.BaseURL = url
	cfg.HTTPClient = &http.Client{Transport: tr}
	return openai.NewClientWithConfig(cfg)
}

func question(q string) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: q}},
	}
}

// post sends a raw chat completion to the proxy and returns the status,
// the cache header and the body's bytes.
func post(t *testing.T, url, key, body string, header ...string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] != "" {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get(llmcache.HeaderCache), b
}

// TestChat: a go-openai client through the proxy, plain and streamed: the
// first call is a miss, its retry a hit with the same bytes, and a stream
// replays as the same events.
func TestChat(t *testing.T) {
	m, murl := model(t, standin.Options{})
	url, _ := start(t, config.Proxy{}, badgerCache(t), murl)
	oc := client(t, url, aliceKey)
	ctx := context.Background()
	var contents []string
	for i, want := range []string{"miss", "hit"} {
		resp, err := oc.CreateChatCompletion(ctx, question("Triage: disk /var 93% full on db-2."))
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got := resp.Header().Get(llmcache.HeaderCache); got != want || resp.Usage.TotalTokens == 0 {
			t.Errorf("call %d: %s %q, usage %+v; want %s with usage", i, llmcache.HeaderCache, got, resp.Usage, want)
		}
		contents = append(contents, resp.Choices[0].Message.Content)
	}
	if contents[0] != contents[1] || !strings.HasPrefix(contents[0], standin.Label) {
		t.Errorf("answers %q; want one stand-in answer twice", contents)
	}
	// Streamed, with go-openai's stream reader.
	req := question("Triage: 5xx rate 12% on api-1.")
	req.Stream = true
	req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	var texts []string
	for i := range 2 {
		st, err := oc.CreateChatCompletionStream(ctx, req)
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		var b strings.Builder
		var usage *openai.Usage
		for {
			chunk, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
			if len(chunk.Choices) > 0 {
				b.WriteString(chunk.Choices[0].Delta.Content)
			}
			if chunk.Usage != nil {
				usage = chunk.Usage
			}
		}
		st.Close()
		if usage == nil || usage.TotalTokens == 0 {
			t.Errorf("stream %d: no usage", i)
		}
		texts = append(texts, b.String())
	}
	if texts[0] != texts[1] || !strings.HasPrefix(texts[0], standin.Label) {
		t.Errorf("streamed answers %q; want one answer twice", texts)
	}
	// Byte for byte, raw.
	body := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Backup failed on nas-1"}]}`
	_, how1, b1 := post(t, url, aliceKey, body)
	_, how2, b2 := post(t, url, aliceKey, body)
	if how1 != "miss" || how2 != "hit" || !bytes.Equal(b1, b2) || !bytes.HasSuffix(b1, []byte("data: [DONE]\n\n")) {
		t.Errorf("raw stream: %s then %s, equal %v: %q", how1, how2, bytes.Equal(b1, b2), b1)
	}
	if got := m.Stats().Completions; got != 3 {
		t.Errorf("the model answered %d calls; want 3", got)
	}
}

// TestIntentHeaders: an Idempotency-Key (or X-Oncegate-Intent) keys the
// answer by the intent: the same request under another intent asks again,
// and a retry of the intent gets its first answer, even from another
// client's view of the same string (clients' intents are their own).
func TestIntentHeaders(t *testing.T) {
	m, murl := model(t, standin.Options{})
	url, _ := start(t, config.Proxy{SharedAnswers: true}, badgerCache(t), murl)
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Summarize incident 7"}]}`
	for _, tt := range []struct {
		name, key, header, value, want string
	}{
		{"no intent", aliceKey, "", "", "miss"},
		{"no intent, again", aliceKey, "", "", "hit"},
		{"bob, no intent: answers are shared", bobKey, "", "", "hit"},
		{"step 1", aliceKey, "Idempotency-Key", `"step-1"`, "miss"},
		{"step 1 retried", aliceKey, "Idempotency-Key", "step-1", "hit"},
		{"step 1 as X-Oncegate-Intent", aliceKey, proxy.HeaderIntent, "step-1", "hit"},
		{"step 2", aliceKey, "Idempotency-Key", "step-2", "miss"},
		{"bob's step 1", bobKey, "Idempotency-Key", "step-1", "miss"},
		{"a trigger's intent key", aliceKey, proxy.HeaderIntent, "2a8401ed2706ff7283551574eeccbfb9", "miss"},
		{"the trigger's retry", aliceKey, proxy.HeaderIntent, "2a8401ed2706ff7283551574eeccbfb9", "hit"},
	} {
		st, how, b := post(t, url, tt.key, body, tt.header, tt.value)
		if st != http.StatusOK || how != tt.want {
			t.Errorf("%s: %d %s %s; want 200 %s", tt.name, st, how, b, tt.want)
		}
	}
	if got := m.Stats().Completions; got != 5 {
		t.Errorf("the model answered %d calls; want 5", got)
	}
	if st, _, b := post(t, url, aliceKey, body, "Idempotency-Key", strings.Repeat("k", 256)); st != http.StatusBadRequest || !bytes.Contains(b, []byte("invalid_intent")) {
		t.Errorf("a key of 256 bytes: %d %s; want 400 invalid_intent", st, b)
	}
}

// TestAuthAndModels: a request without a client key, or with an unknown
// one, is refused 401 in the OpenAI error format and never reaches the
// provider; the model listing goes to the provider with the provider's
// key, never the client's.
func TestAuthAndModels(t *testing.T) {
	var mu sync.Mutex
	var seen []string // Authorization headers the provider got
	m, err := standin.New(standin.Options{Models: []string{"gpt-4o-mini", "gpt-4o"}})
	if err != nil {
		t.Fatal(err)
	}
	provider := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		m.ServeHTTP(w, r)
	})}
	ln, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	go provider.Serve(ln)
	defer provider.Close()
	url, _ := start(t, config.Proxy{}, badgerCache(t), "http://"+ln.Addr().String()+"/v1")

	for _, key := range []string{"", "sk-wrong-0123456789abcdefghij"} {
		_, err := client(t, url, key).CreateChatCompletion(context.Background(), question("hello"))
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != http.StatusUnauthorized || apiErr.Code != "invalid_api_key" {
			t.Errorf("key %q: %v; want 401 invalid_api_key", key, err)
		}
	}
	list, err := client(t, url, aliceKey).ListModels(context.Background())
	if err != nil || len(list.Models) != 2 || list.Models[1].ID != "gpt-4o" {
		t.Errorf("ListModels = %+v, %v; want the provider's two models", list, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "Bearer sk-provider" {
		t.Errorf("the provider saw Authorization %q; want the provider's key on the one listing", seen)
	}
}

// TestSpendLimit: a client key past its spend limit is refused 429, in
// the OpenAI error format, with a message that names the limit, and the
// call is not sent; its answers from the cache are still served, and
// another client is not touched.
func TestSpendLimit(t *testing.T) {
	m, murl := model(t, standin.Options{})
	url, metrics := start(t, config.Proxy{MaxBudget: 5, BudgetDuration: config.Period(24 * time.Hour)}, badgerCache(t), murl)
	oc := client(t, url, aliceKey)
	ctx := context.Background()
	var refused *openai.APIError
	var sent int
	for i := range 20 {
		req := question(fmt.Sprintf("Alert %d: queue depth high", i))
		req.MaxTokens = 100
		_, err := oc.CreateChatCompletion(ctx, req)
		if err == nil {
			sent++
			continue
		}
		if !errors.As(err, &refused) {
			t.Fatalf("call %d: %v", i, err)
		}
		break
	}
	if refused == nil || refused.HTTPStatusCode != http.StatusTooManyRequests || refused.Type != "spend_limit_exceeded" ||
		!strings.Contains(refused.Message, `client key "alice" may spend $5.00 per 1d`) {
		t.Fatalf("after %d calls: %+v; want a 429 naming alice's limit", sent, refused)
	}
	if got := m.Stats().Completions; got != int64(sent) || sent == 0 {
		t.Errorf("the model answered %d calls of %d sent; want each sent one, and some", got, sent)
	}
	req := question("Alert 0: queue depth high")
	req.MaxTokens = 100
	if resp, err := oc.CreateChatCompletion(ctx, req); err != nil || resp.Header().Get(llmcache.HeaderCache) != "hit" {
		t.Errorf("a hit past the limit: %v; want the stored answer", err)
	}
	bobs := question("Alert 0")
	bobs.MaxTokens = 100 // bob has the same limit: a call without max_tokens would be refused (TestSpendLimitWithoutMaxTokens)
	if _, err := client(t, url, bobKey).CreateChatCompletion(ctx, bobs); err != nil {
		t.Errorf("bob: %v", err)
	}
	got := gather(t, metrics)
	if got[`oncegate_proxy_requests_total{client="alice",outcome="spend_limited"}`] != 1 ||
		got[`oncegate_proxy_spend_limit_usd{client="alice"}`] != 5 || got[`oncegate_proxy_spend_usd{client="alice"}`] <= 0 ||
		got[`oncegate_proxy_cost_usd_total{client="alice"}`] <= 0 || got[`oncegate_proxy_tokens_total{client="bob",kind="prompt"}`] <= 0 {
		t.Errorf("metrics %v; want alice's refusal, spending and cost, bob's tokens", got)
	}
}

// TestIntentBudget: the calls of one intent stop at proxy.budget_tokens.
func TestIntentBudget(t *testing.T) {
	_, murl := model(t, standin.Options{})
	url, _ := start(t, config.Proxy{BudgetTokens: 100}, badgerCache(t), murl)
	var last []byte
	var status int
	for i := range 10 {
		body := fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":20,"messages":[{"role":"user","content":"attempt %d of step 9"}]}`, i)
		status, _, last = post(t, url, aliceKey, body, "Idempotency-Key", "step-9")
		if status != http.StatusOK {
			break
		}
	}
	if status != http.StatusTooManyRequests || !bytes.Contains(last, []byte("intent_budget_exceeded")) {
		t.Errorf("%d %s; want the intent's budget to refuse a call", status, last)
	}
}

// TestTwoProxiesOneNATS: two proxies, each with its own cache on the same
// JetStream KV buckets (two replicas), get the same streamed call at
// once: the model is called once between them, and both answers are the
// same bytes; a retry on either is a hit.
func TestTwoProxiesOneNATS(t *testing.T) {
	m, murl := model(t, standin.Options{Latency: 300 * time.Millisecond})
	s := natstest.RunServer(t)
	var urls []string
	for range 2 {
		_, js := natstest.Connect(t, s)
		st, err := jsstore.New(context.Background(), js, jsstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := llmcache.NewStore(st, llmcache.Options{Prices: cachePrices(prices)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		u, _ := start(t, config.Proxy{}, c, murl)
		urls = append(urls, u)
	}
	body := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Plan the failover of db-2"}]}`
	type answer struct {
		how string
		b   []byte
	}
	got := make([]answer, 2)
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() {
			st, how, b := post(t, u, aliceKey, body, "Idempotency-Key", "failover-1")
			if st != http.StatusOK {
				t.Errorf("proxy %d: %d %s", i, st, b)
			}
			got[i] = answer{how, b}
		})
	}
	wg.Wait()
	if n := m.Stats().Completions; n != 1 {
		t.Errorf("the model answered %d calls; want 1 between the two proxies", n)
	}
	if !bytes.Equal(got[0].b, got[1].b) || got[0].how == got[1].how {
		t.Errorf("answers %s (%d bytes) and %s (%d bytes); want the same bytes, one a miss and one shared", got[0].how, len(got[0].b), got[1].how, len(got[1].b))
	}
	for i, u := range urls {
		if _, how, b := post(t, u, aliceKey, body, "Idempotency-Key", "failover-1"); how != "hit" || !bytes.Equal(b, got[0].b) {
			t.Errorf("retry on proxy %d: %s; want a hit with the same bytes", i, how)
		}
	}
}

// gather returns the metrics as "name{labels}" → value.
func gather(t *testing.T, m *ops.Metrics) map[string]float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "oncegate_proxy_") {
			continue
		}
		for _, mt := range f.GetMetric() {
			var labels []string
			for _, l := range mt.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			out[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = value(mt)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
