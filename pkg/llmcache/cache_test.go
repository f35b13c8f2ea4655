package llmcache_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/badgerstore"
	"github.com/oncegate/oncegate/pkg/llmcache/llmtest"
)

// model is a stand-in model served over loopback HTTP.
type model struct {
	*standin.Server
	URL string // base URL for go-openai, ".../v1"
}

func startModel(t *testing.T, opts standin.Options) *model {
	t.Helper()
	s, err := standin.New(opts)
	if err != nil {
		t.Fatalf("standin.New: %v", err)
	}
	url, stop, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("standin Start: %v", err)
	}
	t.Cleanup(func() { stop() })
	return &model{s, url}
}

func openCache(t *testing.T, dir string, opts llmcache.Options) *llmcache.Cache {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	c, err := badgerstore.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// client returns a real go-openai client for baseURL whose HTTP client goes
// through c, on a transport of its own whose idle connections are closed
// at cleanup.
func client(t *testing.T, c *llmcache.Cache, baseURL, apiKey string) *openai.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cfg := openai.DefaultConfig(apiKey)
	cfg.BaseURL = baseURL
	cfg.HTTPClient = c.HTTPClient(&http.Client{Transport: tr})
	return openai.NewClientWithConfig(cfg)
}

func triage(prompt string) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: "You triage alerts. Answer with a severity and one line."},
			{Role: openai.ChatMessageRoleUser, Content: prompt},
		},
		Temperature: 0.2,
	}
}

func completions(m *model) int64 { return m.Stats().Completions }

// postRaw sends body to the chat completions endpoint through c and
// returns the status, the cache header and the body bytes.
func postRaw(t *testing.T, ctx context.Context, c *llmcache.Cache, baseURL string, body string) (int, string, []byte) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := c.HTTPClient(&http.Client{Transport: tr})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, resp.Header.Get(llmcache.HeaderCache), b
}

func TestRetryReusesAnswer(t *testing.T) {
	m := startModel(t, standin.Options{})
	c := openCache(t, "", llmcache.Options{})
	oc := client(t, c, m.URL, "sk-test")
	ctx := llmcache.WithCall(context.Background(), llmcache.Call{Namespace: "tenant-a", Step: "triage"})

	first, err := oc.CreateChatCompletion(ctx, triage("Disk /var 93% full on db-2"))
	if err != nil {
		t.Fatalf("first call: %v", err)
	}
	if got := first.Header().Get(llmcache.HeaderCache); got != "miss" {
		t.Errorf("first call: %s = %q; want miss", llmcache.HeaderCache, got)
	}
	for i := range 3 {
		again, err := oc.CreateChatCompletion(ctx, triage("Disk /var 93% full on db-2"))
		if err != nil {
			t.Fatalf("retry %d: %v", i, err)
		}
		if got := again.Header().Get(llmcache.HeaderCache); got != "hit" {
			t.Errorf("retry %d: %s = %q; want hit", i, llmcache.HeaderCache, got)
		}
		a, b := first, again
		a.SetHeader(nil)
		b.SetHeader(nil)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("retry %d answered %+v; want %+v", i, b, a)
		}
	}
	if n := completions(m); n != 1 {
		t.Errorf("upstream calls = %d; want 1", n)
	}

	// Byte for byte, through a plain HTTP client on the same cache.
	body := `{"model":"m","messages":[{"role":"user","content":"raw bytes"}]}`
	_, how1, b1 := postRaw(t, ctx, c, m.URL, body)
	_, how2, b2 := postRaw(t, ctx, c, m.URL, " {\"messages\":[{\"content\":\"raw bytes\",\"role\":\"user\"}], \"model\":\"m\"}\n")
	if how1 != "miss" || how2 != "hit" || !bytes.Equal(b1, b2) {
		t.Errorf("raw retry spelled differently: %s then %s, bodies equal %v; want miss, hit, true", how1, how2, bytes.Equal(b1, b2))
	}
	if n := completions(m); n != 2 {
		t.Errorf("upstream calls = %d; want 2", n)
	}

	st := llmhook.Stats(c)
	if len(st) != 1 || st[0].Namespace != "tenant-a" || st[0].Step != "triage" || st[0].Hits != 4 || st[0].Misses != 2 || st[0].Stored != 2 {
		t.Errorf("Stats = %+v; want one step tenant-a/triage with 4 hits, 2 misses, 2 stored", st)
	}
}

func TestConcurrentMissesCollapse(t *testing.T) {
	m := startModel(t, standin.Options{Latency: 300 * time.Millisecond})
	c := openCache(t, "", llmcache.Options{})
	oc := client(t, c, m.URL, "sk-test")
	ctx := llmcache.WithCall(context.Background(), llmcache.Call{Namespace: "ns", Step: "s"})

	const n = 100
	answers := make([]openai.ChatCompletionResponse, n)
	errs := make([]error, n)
	var start, wg sync.WaitGroup
	start.Add(1)
	for i := range n {
		wg.Go(func() {
			start.Wait()
			answers[i], errs[i] = oc.CreateChatCompletion(ctx, triage("CPU 99% on web-7"))
		})
	}
	start.Done()
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		answers[i].SetHeader(nil)
		if !reflect.DeepEqual(answers[i], answers[0]) {
			t.Errorf("caller %d got %+v; caller 0 got %+v", i, answers[i], answers[0])
		}
	}
	if got := completions(m); got != 1 {
		t.Errorf("upstream calls for %d identical concurrent requests = %d; want 1", n, got)
	}
	s := llmhook.Stats(c)[0]
	if s.Misses != 1 || s.Shared+s.Hits != n-1 {
		t.Errorf("Stats = %+v; want 1 miss and %d shared or hits", s, n-1)
	}
	if s.SavedCompletionTokens == 0 {
		t.Errorf("SavedCompletionTokens = 0 after %d shared answers", s.Shared)
	}
}

// TestCanceledCallerDoesNotCancelFill: the caller that started the upstream
// call gives up; the other caller still gets the answer, the model answered
// once, and the answer was stored.
func TestCanceledCallerDoesNotCancelFill(t *testing.T) {
	m := startModel(t, standin.Options{Latency: 400 * time.Millisecond})
	c := openCache(t, "", llmcache.Options{})
	oc := client(t, c, m.URL, "sk-test")
	req := triage("Queue depth 10k on billing")

	leaderCtx, cancel := context.WithCancel(context.Background())
	leaderErr := make(chan error, 1)
	go func() {
		_, err := oc.CreateChatCompletion(leaderCtx, req)
		leaderErr <- err
	}()
	waitFor(t, time.Second, "the leader's call in flight", func() bool { return m.Stats().Requests == 1 })
	follower := make(chan error, 1)
	go func() {
		_, err := oc.CreateChatCompletion(context.Background(), req)
		follower <- err
	}()
	waitFor(t, time.Second, "the follower to join", func() bool {
		st := llmhook.Stats(c)
		return len(st) == 1 && st[0].Shared == 1
	})
	cancel()
	if err := <-leaderErr; !errors.Is(err, context.Canceled) {
		t.Errorf("canceled leader: error %v; want context.Canceled", err)
	}
	if err := <-follower; err != nil {
		t.Fatalf("follower: %v", err)
	}
	st := m.Stats()
	if st.Completions != 1 || st.Canceled != 0 {
		t.Errorf("model stats %+v; want 1 completion and 0 canceled", st)
	}
	if _, err := oc.CreateChatCompletion(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if got := completions(m); got != 1 {
		t.Errorf("upstream calls after a third request = %d; want 1 (stored)", got)
	}
}

// abortAfter serves h but cuts the connection once n bytes of the body are
// written: the model's answer is cut off mid-stream.
func abortAfter(h http.Handler, n int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&cutWriter{ResponseWriter: w, left: n}, r)
	})
}

type cutWriter struct {
	http.ResponseWriter
	left int
}

func (w *cutWriter) Write(p []byte) (int, error) {
	if len(p) >= w.left {
		w.ResponseWriter.Write(p[:w.left])
		w.ResponseWriter.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	w.left -= len(p)
	return w.ResponseWriter.Write(p)
}

func (w *cutWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// TestIncompleteAnswersAreNotStored: after each kind of failed or partial
// answer, the same request goes to a healthy model, which must be called.
func TestIncompleteAnswersAreNotStored(t *testing.T) {
	good := startModel(t, standin.Options{})
	failing := startModel(t, standin.Options{ErrorRate: 1})
	limited := startModel(t, standin.Options{RateLimitRate: 1})
	cutSrv, err := standin.New(standin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cut := httptest.NewServer(abortAfter(cutSrv, 300))
	t.Cleanup(cut.Close)
	c := openCache(t, "", llmcache.Options{})

	stream := func(oc *openai.Client, req openai.ChatCompletionRequest) error {
		req.Stream = true
		s, err := oc.CreateChatCompletionStream(context.Background(), req)
		if err != nil {
			return err
		}
		defer s.Close()
		for {
			if _, err := s.Recv(); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
	}
	plain := func(oc *openai.Client, req openai.ChatCompletionRequest) error {
		_, err := oc.CreateChatCompletion(context.Background(), req)
		return err
	}
	for i, tt := range []struct {
		name    string
		url     string
		req     openai.ChatCompletionRequest
		send    func(*openai.Client, openai.ChatCompletionRequest) error
		wantErr bool
	}{
		{"server error", failing.URL, triage("a"), plain, true},
		{"rate limited", limited.URL, triage("b"), plain, true},
		{"truncated at max_tokens", good.URL, func() openai.ChatCompletionRequest { r := triage("c"); r.MaxTokens = 3; return r }(), plain, false},
		{"truncated stream", good.URL, func() openai.ChatCompletionRequest { r := triage("d"); r.MaxTokens = 3; return r }(), stream, false},
		{"stream cut off", cut.URL + "/v1", triage("e"), stream, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.send(client(t, c, tt.url, "sk-test"), tt.req)
			if (err != nil) != tt.wantErr {
				t.Fatalf("first call: error %v; want error %v", err, tt.wantErr)
			}
			before := completions(good)
			_ = tt.send(client(t, c, good.URL, "sk-test"), tt.req)
			if got := completions(good) - before; got != 1 {
				t.Errorf("the same request after a %s: %d upstream calls; want 1 (nothing stored)", tt.name, got)
			}
			_ = i
		})
	}
	var notStored int64
	for _, s := range llmhook.Stats(c) {
		notStored += s.NotStored
	}
	if notStored < 5 {
		t.Errorf("NotStored = %d; want at least 5", notStored)
	}
}

// TestCutStreamCountsWhatArrived: a stream cut off after part of its
// answer, reporting no usage, is counted as its prompt and the text that
// arrived (the provider bills both), not as its prompt alone.
func TestCutStreamCountsWhatArrived(t *testing.T) {
	srv, err := standin.New(standin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cut := httptest.NewServer(abortAfter(srv, 1500))
	t.Cleanup(cut.Close)
	c := openCache(t, "", llmcache.Options{})
	req := triage("Queue depth on orders-eu at 40k and rising")
	req.Stream = true
	s, err := client(t, c, cut.URL+"/v1", "sk-test").CreateChatCompletionStream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for {
		r, err := s.Recv()
		if err != nil {
			break
		}
		for _, ch := range r.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	s.Close()
	if text.Len() == 0 {
		t.Fatal("no text arrived before the cut: cut later")
	}
	st := llmhook.Stats(c)
	if len(st) != 1 || st[0].NotStored != 1 {
		t.Fatalf("stats %+v; want one step with one answer not stored", st)
	}
	if st[0].CompletionTokens == 0 {
		t.Errorf("CompletionTokens = 0 after %d bytes of text arrived (%q); want them counted", text.Len(), text.String())
	}
}

func TestNamespacesAreSeparate(t *testing.T) {
	m := startModel(t, standin.Options{})
	c := openCache(t, "", llmcache.Options{})
	oc := client(t, c, m.URL, "sk-test")
	req := triage("Login failures spike on sso")
	call := func(ns string) string {
		t.Helper()
		r, err := oc.CreateChatCompletion(llmcache.WithCall(context.Background(), llmcache.Call{Namespace: ns}), req)
		if err != nil {
			t.Fatalf("namespace %q: %v", ns, err)
		}
		return r.Header().Get(llmcache.HeaderCache)
	}
	for _, step := range []struct{ ns, want string }{
		{"tenant-a", "miss"}, {"tenant-b", "miss"}, {"tenant-a", "hit"}, {"tenant-b", "hit"}, {"", "miss"}, {"default", "hit"},
	} {
		if got := call(step.ns); got != step.want {
			t.Errorf("namespace %q: %s; want %s", step.ns, got, step.want)
		}
	}
	if got := completions(m); got != 3 {
		t.Errorf("upstream calls = %d; want 3 (one per namespace)", got)
	}
}

func readStream(t *testing.T, oc *openai.Client, ctx context.Context, req openai.ChatCompletionRequest) ([]openai.ChatCompletionStreamResponse, string) {
	t.Helper()
	s, err := oc.CreateChatCompletionStream(ctx, req)
	if err != nil {
		t.Fatalf("CreateChatCompletionStream: %v", err)
	}
	defer s.Close()
	var out []openai.ChatCompletionStreamResponse
	for {
		r, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out, s.Header().Get(llmcache.HeaderCache)
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		out = append(out, r)
	}
}

func TestStreamReplay(t *testing.T) {
	m := startModel(t, standin.Options{})
	c := openCache(t, "", llmcache.Options{})
	oc := client(t, c, m.URL, "sk-test")
	ctx := context.Background()
	for _, usage := range []bool{false, true} {
		t.Run(fmt.Sprintf("include_usage=%v", usage), func(t *testing.T) {
			req := triage(fmt.Sprintf("Certificate expires in 3 days (usage %v)", usage))
			req.Stream = true
			if usage {
				req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
			}
			before := completions(m)
			orig, how1 := readStream(t, oc, ctx, req)
			replay, how2 := readStream(t, oc, ctx, req)
			if how1 != "miss" || how2 != "hit" {
				t.Errorf("cache header: %q then %q; want miss then hit", how1, how2)
			}
			if len(orig) < 3 || !reflect.DeepEqual(orig, replay) {
				t.Errorf("replayed stream differs:\n got %+v\nwant %+v", replay, orig)
			}
			if got := completions(m) - before; got != 1 {
				t.Errorf("upstream calls = %d; want 1", got)
			}
			// A plain request for the same prompt is a different entry.
			req.Stream, req.StreamOptions = false, nil
			r, err := oc.CreateChatCompletion(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Header().Get(llmcache.HeaderCache); got != "miss" {
				t.Errorf("plain request after a streamed one: %s; want miss", got)
			}
		})
	}
	// Byte for byte.
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"stream bytes"}]}`
	_, how1, b1 := postRaw(t, ctx, c, m.URL, body)
	_, how2, b2 := postRaw(t, ctx, c, m.URL, body)
	if how1 != "miss" || how2 != "hit" || !bytes.Equal(b1, b2) || !bytes.HasSuffix(b1, []byte("data: [DONE]\n\n")) {
		t.Errorf("raw stream: %s then %s, equal %v, body %q", how1, how2, bytes.Equal(b1, b2), b1)
	}
}

// TestBudgetStopsRetryStorm retries a step whose answer is always cut at
// max_tokens (so never stored) 50 times; the budget stops the spending.
func TestBudgetStopsRetryStorm(t *testing.T) {
	m := startModel(t, standin.Options{})
	dir := t.TempDir()
	const budget = 400
	c, err := badgerstore.Open(dir, llmcache.Options{Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	oc := client(t, c, m.URL, "sk-test")
	intent := "5d41402abc4b2a76b9719d911017c592"
	ctx := llmcache.WithCall(context.Background(), llmcache.Call{Namespace: "ops", Step: "triage", Intent: intent})
	req := triage("Payment provider returns 502 for every charge")
	req.MaxTokens = 8

	var ok, denied int
	for range 50 {
		_, err := oc.CreateChatCompletion(ctx, req)
		var be *llmcache.BudgetError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &be) && errors.Is(err, llmcache.ErrBudgetExceeded):
			denied++
			if be.Budget != budget || be.Unit != intent {
				t.Errorf("BudgetError %+v; want budget %d for %s", be, budget, intent)
			}
		default:
			t.Fatalf("call: %v", err)
		}
	}
	st := m.Stats()
	spent := st.PromptTokens + st.CompletionTokens
	t.Logf("50 retries: %d answered (truncated, not stored), %d refused; the model billed %d tokens of a %d budget", ok, denied, spent, budget)
	if ok < 2 || denied == 0 || ok+denied != 50 {
		t.Errorf("%d answered, %d refused; want a few answered and the rest refused", ok, denied)
	}
	if spent > budget {
		t.Errorf("tokens spent %d > budget %d", spent, budget)
	}
	if got, err := llmhook.Spent(c, "ops", intent); err != nil || got != spent {
		t.Errorf("Spent = %d, %v; want %d (the API's usage)", got, err, spent)
	}
	if s := llmhook.Stats(c)[0]; s.BudgetDenied != int64(denied) || s.TokensSpent() != spent {
		t.Errorf("Stats %+v; want BudgetDenied %d and %d tokens spent", s, denied, spent)
	}

	// The spending outlives the process: a reopened cache still refuses.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := openCache(t, dir, llmcache.Options{Budget: budget})
	if _, err := client(t, c2, m.URL, "sk-test").CreateChatCompletion(ctx, req); !errors.Is(err, llmcache.ErrBudgetExceeded) {
		t.Errorf("after reopening: error %v; want ErrBudgetExceeded", err)
	}
	// Another intent has its own budget.
	other := llmcache.WithCall(context.Background(), llmcache.Call{Namespace: "ops", Intent: "7d793037a0760186574b0282f2f435e7"})
	if _, err := client(t, c2, m.URL, "sk-test").CreateChatCompletion(other, req); err != nil {
		t.Errorf("another intent: %v", err)
	}
}

// TestIntentFromDo: a call made for work that a ledger's Do runs draws
// from the budget of Do's intent without naming it (before, its unit was
// the cache key, and every reworded retry of the work had a budget of its
// own).
func TestIntentFromDo(t *testing.T) {
	m := startModel(t, standin.Options{})
	c := openCache(t, "", llmcache.Options{Budget: 10_000})
	ledger, err := badgerledger.Open("", badgerledger.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()
	in := dedupe.Intent{Key: dedupe.Key{0x42}}
	oc := client(t, c, m.URL, "sk-test")
	ctx := llmcache.WithCall(context.Background(), llmcache.Call{Namespace: "ops", Step: "triage"})
	_, _, err = ledger.Do(ctx, in, func(ctx context.Context) (dedupe.Result, error) {
		_, err := oc.CreateChatCompletion(ctx, triage("Queue depth 40k on orders"))
		return dedupe.Result{}, err
	}, dedupe.DoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := m.Stats()
	if got, err := llmhook.Spent(c, "ops", in.Key.String()); err != nil || got == 0 || got != st.PromptTokens+st.CompletionTokens {
		t.Errorf("Spent(ops, Do's intent) = %d, %v; want the call's %d tokens", got, err, st.PromptTokens+st.CompletionTokens)
	}
}

// TestSpendLimit: calls that draw from a spend limit go to the model while
// they fit it; past it, a miss is refused with a *SpendLimitError naming
// the limit and when it resets (never sent), a hit is still answered, and
// another account is not touched; the next period starts from nothing.
func TestSpendLimit(t *testing.T) {
	m := startModel(t, standin.Options{})
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	// $0.01 a token, so that a call of some 30 tokens costs some $0.30.
	prices := llmcache.Prices{"*": {Prompt: 10_000, Completion: 10_000}}
	c := openCache(t, "", llmcache.Options{Prices: prices, Clock: clock})
	oc := client(t, c, m.URL, "sk-test")
	alice := llmcache.SpendLimit{Name: "client:alice", Max: 5, Period: 24 * time.Hour}
	team := llmcache.SpendLimit{Name: "team:ops", Max: 100, Period: 30 * 24 * time.Hour}
	ctx := llmcache.WithCall(context.Background(), llmcache.Call{Namespace: "proxy", Limits: []llmcache.SpendLimit{alice, team}})
	ask := func(ctx context.Context, i int) error {
		req := triage(fmt.Sprintf("Alert %d: queue depth high", i))
		req.MaxTokens = 100 // enough for the whole answer, which is then stored
		_, err := oc.CreateChatCompletion(ctx, req)
		return err
	}
	var sent int
	var refused *llmcache.SpendLimitError
	for i := range 40 {
		err := ask(ctx, i)
		if err == nil {
			sent++
			continue
		}
		if !errors.As(err, &refused) || !errors.Is(err, llmcache.ErrSpendLimit) {
			t.Fatalf("call %d: %v; want a *SpendLimitError", i, err)
		}
		break
	}
	st := m.Stats()
	cost := float64(st.PromptTokens+st.CompletionTokens) / 100
	if refused == nil || refused.Limit != alice || !refused.Reset.Equal(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("after %d calls: refused %+v; want alice's limit, resetting at midnight UTC", sent, refused)
	}
	if st.Completions != int64(sent) || cost > alice.Max || refused.Spent+refused.Need <= alice.Max {
		t.Errorf("the model answered %d of %d calls sent, costing $%.2f; refused %+v; want every call sent answered, within $%.2f, and the refused one past it", st.Completions, sent, cost, refused, alice.Max)
	}
	for _, l := range []llmcache.SpendLimit{alice, team} {
		if got, _, err := c.Spending(l); err != nil || math.Abs(got-cost) > 1e-6 {
			t.Errorf("Spending(%s) = %v, %v; want $%.2f", l.Name, got, err, cost)
		}
	}
	if err := ask(ctx, 0); err != nil {
		t.Errorf("a hit past the limit: %v; want the stored answer", err)
	}
	bob := llmcache.WithCall(context.Background(), llmcache.Call{Namespace: "proxy", Limits: []llmcache.SpendLimit{{Name: "client:bob", Max: 5, Period: 24 * time.Hour}, team}})
	if err := ask(bob, 100); err != nil {
		t.Errorf("another client: %v", err)
	}
	mu.Lock()
	now = now.Add(24 * time.Hour)
	mu.Unlock()
	if err := ask(ctx, 101); err != nil {
		t.Errorf("the next day: %v; want alice's limit reset", err)
	}
	if s := llmhook.Stats(c)[0]; s.BudgetDenied != 1 {
		t.Errorf("BudgetDenied = %d; want the 1 call refused", s.BudgetDenied)
	}
}

func TestModes(t *testing.T) {
	m := startModel(t, standin.Options{})
	c := openCache(t, "", llmcache.Options{})
	oc := client(t, c, m.URL, "sk-test")
	req := triage("Backup job failed on nas-1")
	send := func(mode llmcache.Mode) string {
		t.Helper()
		r, err := oc.CreateChatCompletion(llmcache.WithCall(context.Background(), llmcache.Call{Mode: mode}), req)
		if err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		return r.Header().Get(llmcache.HeaderCache)
	}
	for i, step := range []struct {
		mode     llmcache.Mode
		want     string
		upstream int64
	}{
		{llmcache.ModeNoStore, "miss", 1},  // not stored
		{llmcache.ModeBypass, "bypass", 2}, // not stored either
		{llmcache.ModeDefault, "miss", 3},  // stored
		{llmcache.ModeNoStore, "hit", 3},   // reads
		{llmcache.ModeBypass, "bypass", 4}, // does not read
		{llmcache.ModeRefresh, "miss", 5},  // does not read, stores
		{llmcache.ModeDefault, "hit", 5},
	} {
		if got := send(step.mode); got != step.want {
			t.Errorf("step %d (%v): %s; want %s", i, step.mode, got, step.want)
		}
		if got := completions(m); got != step.upstream {
			t.Errorf("step %d (%v): %d upstream calls; want %d", i, step.mode, got, step.upstream)
		}
	}
}

func TestTokenAccounting(t *testing.T) {
	m := startModel(t, standin.Options{})
	prices := llmcache.Prices{"gpt-4o-mini": {Prompt: 0.15, Completion: 0.60}}
	c := openCache(t, "", llmcache.Options{Prices: prices})
	oc := client(t, c, m.URL, "sk-test")
	ctx := llmcache.WithCall(context.Background(), llmcache.Call{Namespace: "ops", Step: "triage"})
	req := triage("Memory leak suspected in api-gateway")
	r, err := oc.CreateChatCompletion(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := oc.CreateChatCompletion(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	s := llmhook.Stats(c)[0]
	u := struct{ PromptTokens, CompletionTokens int64 }{int64(r.Usage.PromptTokens), int64(r.Usage.CompletionTokens)}
	if s.PromptTokens != u.PromptTokens || s.CompletionTokens != u.CompletionTokens {
		t.Errorf("spent %d+%d tokens; want the API's usage %d+%d", s.PromptTokens, s.CompletionTokens, u.PromptTokens, u.CompletionTokens)
	}
	if s.SavedPromptTokens != 4*u.PromptTokens || s.SavedCompletionTokens != 4*u.CompletionTokens {
		t.Errorf("saved %d+%d tokens; want 4 × %d+%d", s.SavedPromptTokens, s.SavedCompletionTokens, u.PromptTokens, u.CompletionTokens)
	}
	p := prices["gpt-4o-mini"]
	if want := 4 * ((float64(u.PromptTokens)*p.Prompt + float64(u.CompletionTokens)*p.Completion) / 1e6); !near(s.CostSaved, want) || !near(s.CostSpent, want/4) {
		t.Errorf("cost spent %g, saved %g; want %g and %g", s.CostSpent, s.CostSaved, want/4, want)
	}
	// No budget and an answer with usage: the tokenizer had nothing to do.
	if s.EstimatedPromptTokens != 0 {
		t.Errorf("EstimatedPromptTokens = %d without a budget; want 0 (no estimate made)", s.EstimatedPromptTokens)
	}
	// Under a budget, the prompt is counted before the call.
	cb := openCache(t, "", llmcache.Options{Prices: prices, Budget: 1 << 20})
	if _, err := client(t, cb, m.URL, "sk-test").CreateChatCompletion(ctx, req); err != nil {
		t.Fatal(err)
	}
	if e := llmhook.Stats(cb)[0].EstimatedPromptTokens; e <= 0 || e > 2*u.PromptTokens {
		t.Errorf("EstimatedPromptTokens = %d under a budget; want the tokenizer's estimate of a %d-token prompt", e, u.PromptTokens)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestExpiry(t *testing.T) {
	m := startModel(t, standin.Options{})
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	c := openCache(t, "", llmcache.Options{TTL: time.Hour, Clock: func() time.Time { return time.Unix(0, now.Load()) }})
	oc := client(t, c, m.URL, "sk-test")
	req := triage("Replica lag 40s on pg-3")
	send := func(call llmcache.Call) string {
		t.Helper()
		r, err := oc.CreateChatCompletion(llmcache.WithCall(context.Background(), call), req)
		if err != nil {
			t.Fatal(err)
		}
		return r.Header().Get(llmcache.HeaderCache)
	}
	got := []string{send(llmcache.Call{})}
	now.Add(int64(59 * time.Minute))
	got = append(got, send(llmcache.Call{}))
	now.Add(int64(2 * time.Minute))
	got = append(got, send(llmcache.Call{TTL: 10 * time.Minute}))
	now.Add(int64(11 * time.Minute))
	got = append(got, send(llmcache.Call{}))
	if want := []string{"miss", "hit", "miss", "miss"}; !reflect.DeepEqual(got, want) {
		t.Errorf("across the TTL: %v; want %v", got, want)
	}
}

// TestAPIKeyNeverStored sends requests of every kind with a canary API key,
// then looks for the key in the cache's files, its logs and the errors.
func TestAPIKeyNeverStored(t *testing.T) {
	const canary = "sk-oncegate-canary-7f3a9c1e5b2d4f6a8c0e"
	good := startModel(t, standin.Options{})
	bad := startModel(t, standin.Options{ErrorRate: 1})
	dir := t.TempDir()
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&logs, &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := badgerstore.Open(dir, llmcache.Options{Logger: logger, Budget: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	var errs []string
	for i, url := range []string{good.URL, good.URL, bad.URL} {
		oc := client(t, c, url, canary)
		req := triage(fmt.Sprintf("request %d", i/2)) // a miss, a hit, a failure
		if _, err := oc.CreateChatCompletion(llmcache.WithCall(context.Background(), llmcache.Call{Intent: "k" + fmt.Sprint(i)}), req); err != nil {
			errs = append(errs, err.Error())
		}
		req.Stream = true
		if s, err := oc.CreateChatCompletionStream(context.Background(), req); err != nil {
			errs = append(errs, err.Error())
		} else {
			for {
				if _, err := s.Recv(); err != nil {
					break
				}
			}
			s.Close()
		}
	}
	if len(errs) == 0 {
		t.Fatal("no errors from the failing model; the test does not cover error paths")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	var files, answers int
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("API key found in %s", path)
		}
		if bytes.Contains(b, []byte(standin.Label)) {
			answers++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("no files in the cache directory")
	}
	if answers == 0 {
		t.Error("no file holds an answer: the grep would not have seen the key either")
	}
	logMu.Lock()
	defer logMu.Unlock()
	if logs.Len() == 0 {
		t.Error("no logs; the grep of the logs proves nothing")
	}
	if strings.Contains(logs.String(), canary) {
		t.Errorf("API key in the logs: %s", logs.String())
	}
	for _, e := range errs {
		if strings.Contains(e, canary) {
			t.Errorf("API key in an error: %s", e)
		}
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestOtherEndpointsPassThrough(t *testing.T) {
	m := startModel(t, standin.Options{})
	c := openCache(t, "", llmcache.Options{})
	oc := client(t, c, m.URL, "sk-test")
	for range 2 {
		if _, err := oc.ListModels(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Stats().Models; got != 2 {
		t.Errorf("model listings upstream = %d; want 2 (never cached)", got)
	}
	if st := llmhook.Stats(c); len(st) != 0 {
		t.Errorf("Stats after model listings = %+v; want none", st)
	}
}

func TestCloseCancelsFills(t *testing.T) {
	m := startModel(t, standin.Options{TimeoutRate: 1})
	c, err := badgerstore.Open(t.TempDir(), llmcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	oc := client(t, c, m.URL, "sk-test")
	done := make(chan error, 1)
	go func() {
		_, err := oc.CreateChatCompletion(context.Background(), triage("hangs"))
		done <- err
	}()
	waitFor(t, 2*time.Second, "the call to hang", func() bool { return m.Stats().Timeouts == 1 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("call through a closed cache succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the call in flight")
	}
	if _, err := oc.CreateChatCompletion(context.Background(), triage("after close")); !errors.Is(err, llmcache.ErrClosed) {
		t.Errorf("call after Close: %v; want ErrClosed", err)
	}
}

func TestInvalidRequestIsRefused(t *testing.T) {
	m := startModel(t, standin.Options{})
	c := openCache(t, "", llmcache.Options{})
	oc := client(t, c, m.URL, "sk-test")
	req := triage("x")
	seed := 1<<53 + 1
	req.Seed = &seed
	if _, err := oc.CreateChatCompletion(context.Background(), req); !errors.Is(err, llmcache.ErrInvalidRequest) {
		t.Errorf("seed 2^53+1: %v; want ErrInvalidRequest", err)
	}
	if got := m.Stats().Requests; got != 0 {
		t.Errorf("upstream requests = %d; want 0", got)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestEndpointChangesKey: the same request sent to another base URL is
// asked again, not answered with the first endpoint's answer; a configured
// Endpoint name keeps answers across a change of URL.
func TestEndpointChangesKey(t *testing.T) {
	standIn, real := startModel(t, standin.Options{}), startModel(t, standin.Options{})
	req := triage("Error rate 4% on checkout")
	ask := func(c *llmcache.Cache, m *model) string {
		t.Helper()
		r, err := client(t, c, m.URL, "sk-test").CreateChatCompletion(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return r.Header().Get(llmcache.HeaderCache)
	}
	c := openCache(t, "", llmcache.Options{})
	if got := []string{ask(c, standIn), ask(c, real), ask(c, standIn)}; !reflect.DeepEqual(got, []string{"miss", "miss", "hit"}) {
		t.Errorf("stand-in, then another base URL, then the stand-in: %v; want miss, miss, hit", got)
	}
	named := openCache(t, "", llmcache.Options{Endpoint: "triage"})
	if got := []string{ask(named, standIn), ask(named, real)}; !reflect.DeepEqual(got, []string{"miss", "hit"}) {
		t.Errorf("one Endpoint name over two URLs: %v; want miss, hit", got)
	}
}

// TestExampleCounters: the counters of Example's three attempts, which
// Example printed until issue 38 moved them to internal/llmhook: one model
// call, its 46 tokens spent, and twice 46 saved by the two hits.
func TestExampleCounters(t *testing.T) {
	model, err := llmtest.NewServer(llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	cache := openCache(t, "", llmcache.Options{Prices: llmcache.Prices{"gpt-4o-mini": {Prompt: 0.15, Completion: 0.60}}})
	cfg := openai.DefaultConfig("sk-...")
	cfg.BaseURL = model.URL
	cfg.HTTPClient = cache.HTTPClient(nil)
	client := openai.NewClientWithConfig(cfg)
	ctx := llmcache.WithCall(context.Background(), llmcache.Call{Namespace: "acme/alerts", Step: "triage"})
	req := openai.ChatCompletionRequest{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "Triage: disk /var 93% full on db-2."}},
	}
	for range 3 {
		if _, err := client.CreateChatCompletion(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	s := llmhook.Stats(cache)[0]
	if n := model.Stats().Completions; n != 1 || s.TokensSpent() != 46 || s.TokensSaved() != 92 {
		t.Errorf("model calls %d, tokens spent %d, saved %d; want 1, 46, 92", n, s.TokensSpent(), s.TokensSaved())
	}
}
