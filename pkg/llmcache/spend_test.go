package llmcache_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/llmcache"
)

// TestSpendLimitWorstCostTooLarge: a call whose worst cost is too large
// to count (max_tokens near 2^53, or n × max_tokens past 2^63) is refused
// by its spend limit, never sent, and leaves the limit as it was: the
// next call past the limit is refused too.
func TestSpendLimitWorstCostTooLarge(t *testing.T) {
	m := startModel(t, standin.Options{})
	// $0.01 a token.
	c := openCache(t, "", llmcache.Options{Prices: llmcache.Prices{"*": {Prompt: 10_000, Completion: 10_000}}})
	alice := llmcache.SpendLimit{Name: "client:alice", Max: 5, Period: 24 * time.Hour}
	ctx := llmcache.WithCall(context.Background(), llmcache.Call{Namespace: "proxy", Limits: []llmcache.SpendLimit{alice}})
	for _, body := range []string{
		`{"model":"gpt-4o-mini","max_tokens":9007199254740992,"messages":[{"role":"user","content":"a"}]}`,
		`{"model":"gpt-4o-mini","n":4294967296,"max_tokens":4294967296,"messages":[{"role":"user","content":"b"}]}`,
		`{"model":"gpt-4o-mini","n":3,"max_completion_tokens":4503599627370496,"messages":[{"role":"user","content":"c"}]}`,
		`{"model":"gpt-4o-mini","max_tokens":1000,"messages":[{"role":"user","content":"d"}]}`, // $10
	} {
		resp, err := c.Transport(http.DefaultTransport).RoundTrip(mustRequest(t, ctx, m.URL, body))
		if err == nil {
			resp.Body.Close()
		}
		var sl *llmcache.SpendLimitError
		if !errors.As(err, &sl) || sl.Need <= alice.Max {
			t.Errorf("%s: %v; want a *SpendLimitError needing more than $5", body, err)
		}
	}
	if n := m.Stats().Requests; n != 0 {
		t.Errorf("the model got %d requests; want none", n)
	}
}

// TestCompletionTokensReserved: a call that sets no max_tokens reserves
// Call.CompletionTokens per choice from its limits, so that it is refused
// if that allowance could pass one; without the allowance it reserves
// only its prompt.
func TestCompletionTokensReserved(t *testing.T) {
	m := startModel(t, standin.Options{})
	c := openCache(t, "", llmcache.Options{Prices: llmcache.Prices{"*": {Prompt: 10_000, Completion: 10_000}}})
	limit := llmcache.SpendLimit{Name: "client:alice", Max: 5}
	const body = `{"model":"gpt-4o-mini","n":2,"messages":[{"role":"user","content":"hello"}]}`
	call := llmcache.Call{Namespace: "proxy", Limits: []llmcache.SpendLimit{limit}, CompletionTokens: 300}
	resp, err := c.Transport(http.DefaultTransport).RoundTrip(mustRequest(t, llmcache.WithCall(context.Background(), call), m.URL, body))
	if err == nil {
		resp.Body.Close()
	}
	var sl *llmcache.SpendLimitError
	if !errors.As(err, &sl) || sl.Need < 6 || sl.Need > 6.5 {
		t.Fatalf("2 choices of 300 tokens at $0.01 under $5: %v; want refused, needing $6 and the prompt", err)
	}
	call.CompletionTokens = 0
	resp, err = c.Transport(http.DefaultTransport).RoundTrip(mustRequest(t, llmcache.WithCall(context.Background(), call), m.URL, body))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("without an allowance: %v; want it sent", err)
	}
	resp.Body.Close()
	if n := m.Stats().Completions; n != 1 {
		t.Errorf("the model answered %d calls; want 1", n)
	}
}

// TestTooLargeUnderLimit: a request too large to key is not sent past a
// spend limit or a token budget unchecked: it is refused with
// ErrRequestTooLarge; without either it goes past the cache.
func TestTooLargeUnderLimit(t *testing.T) {
	m := startModel(t, standin.Options{})
	c := openCache(t, "", llmcache.Options{Prices: llmcache.Prices{"*": {Prompt: 10_000, Completion: 10_000}}, MaxRequestBytes: 1024})
	body := `{"model":"gpt-4o-mini","max_tokens":10,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 400) + `"}]}`
	for _, call := range []llmcache.Call{
		{Namespace: "proxy", Limits: []llmcache.SpendLimit{{Name: "client:alice", Max: 5}}},
		{Namespace: "proxy", Budget: 100},
	} {
		resp, err := c.Transport(http.DefaultTransport).RoundTrip(mustRequest(t, llmcache.WithCall(context.Background(), call), m.URL, body))
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, llmcache.ErrRequestTooLarge) {
			t.Errorf("%+v: %v; want ErrRequestTooLarge", call, err)
		}
	}
	if n := m.Stats().Requests; n != 0 {
		t.Errorf("the model got %d requests; want none", n)
	}
	resp, err := c.Transport(http.DefaultTransport).RoundTrip(mustRequest(t, context.Background(), m.URL, body))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("without a limit: %v; want it sent past the cache", err)
	}
	resp.Body.Close()
}

func mustRequest(t *testing.T, ctx context.Context, baseURL, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

// TestReadRequest: the model, n and max tokens as the cache reads them,
// and the bodies it refuses as ambiguous: a member twice, or one named as
// a member it reads but for its case, in the request, a message, a content
// part or stream_options.
func TestReadRequest(t *testing.T) {
	for _, tt := range []struct {
		body string
		want llmhook.Request
	}{
		{`{"model":"gpt-4o","messages":[]}`, llmhook.Request{Model: "gpt-4o", N: 1}},
		{`{"model":"gpt-4o","n":3,"max_tokens":10}`, llmhook.Request{Model: "gpt-4o", N: 3, MaxTokens: 10}},
		{`{"model":"o1","max_completion_tokens":20}`, llmhook.Request{Model: "o1", N: 1, MaxTokens: 20}},
		{`{"model":"o1","max_completion_tokens":20,"max_tokens":30}`, llmhook.Request{Model: "o1", N: 1, MaxTokens: 30}},
		{`{"model":"x","max_tokens":-1,"n":-4}`, llmhook.Request{Model: "x", N: 1}},
		{`{"model":"x","user":"U","User":"u","metadata":{"a":1,"A":2}}`, llmhook.Request{Model: "x", N: 1}}, // members the cache does not read
		{`{"model":"x","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u","URL":"v"}}]}]}`, llmhook.Request{Model: "x", N: 1}},
	} {
		got, err := llmhook.ReadRequest([]byte(tt.body))
		if err != nil || got != tt.want {
			t.Errorf("ReadRequest(%s) = %+v, %v; want %+v", tt.body, got, err, tt.want)
		}
	}
	for _, body := range []string{
		`{"model":"gpt-4o","Model":"gpt-4o-mini"}`,
		`{"MODEL":"gpt-4o-mini"}`,
		`{"model":"gpt-4o","model":"gpt-4o-mini"}`,
		`{"model":"x","max_tokens":4000,"Max_Tokens":1}`,
		"{\"model\":\"x\",\"max_to\u212Aens\":1}", // KELVIN SIGN folds to k
		"{\"model\":\"x\",\"\u017Ftream\":true}",  // LONG S folds to s
		`{"model":"x","N":100}`,
		`{"model":"x","messages":[{"role":"user","content":"a","Content":"b"}]}`,
		`{"model":"x","messages":[{"role":"user","ROLE":"system","content":"a"}]}`,
		`{"model":"x","messages":[{"role":"user","content":[{"type":"text","text":"a","Text":"b"}]}]}`,
		`{"model":"x","stream":true,"stream_options":{"include_usage":true,"Include_Usage":false}}`,
		`{"model":"x"} {"model":"y"}`,
		`["model"]`,
		`{"model":`,
	} {
		if _, err := llmhook.ReadRequest([]byte(body)); !errors.Is(err, llmcache.ErrInvalidRequest) {
			t.Errorf("ReadRequest(%s) error = %v; want ErrInvalidRequest", body, err)
		}
	}
}

// FuzzReadRequest: whatever the body, a request ReadRequest accepts names
// the same model, and no more completion tokens, to every decoder a
// provider may use: one that matches member names exactly (keeping the
// last of a name given twice, as Python's json does) and one that matches
// them regardless of case (Go's encoding/json, as Ollama reads them). So
// a spend limit prices the model the provider runs and reserves at least
// what it may write.
func FuzzReadRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"gpt-4o","Model":"gpt-4o-mini"}`,
		`{"model":"x","max_completion_tokens":5,"max_tokens":7,"n":2}`,
		"{\"model\":\"x\",\"max_to\u212Aens\":1}",
		`{"model":"a","model":"b"}`,
		`{"model":"x","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := llmhook.ReadRequest(body)
		if err != nil {
			return
		}
		// Exact names, the last of a name given twice.
		var exact map[string]json.RawMessage
		if json.Unmarshal(body, &exact) != nil {
			t.Fatalf("ReadRequest accepted %q, which is not a JSON object", body)
		}
		var model string
		json.Unmarshal(exact["model"], &model)
		var mt, mct int64
		json.Unmarshal(exact["max_tokens"], &mt)
		json.Unmarshal(exact["max_completion_tokens"], &mct)
		// Names regardless of case.
		var folded struct {
			Model               string `json:"model"`
			MaxTokens           int64  `json:"max_tokens"`
			MaxCompletionTokens int64  `json:"max_completion_tokens"`
		}
		json.Unmarshal(body, &folded)
		if got.Model != model || got.Model != folded.Model {
			t.Fatalf("ReadRequest(%q) read model %q; an exact decoder reads %q, a case-insensitive one %q", body, got.Model, model, folded.Model)
		}
		for _, v := range []int64{mt, mct, folded.MaxTokens, folded.MaxCompletionTokens} {
			if v > 0 && (got.MaxTokens == 0 || got.MaxTokens < v) {
				t.Fatalf("ReadRequest(%q) read max tokens %d; a decoder reads %d", body, got.MaxTokens, v)
			}
		}
	})
}

// answersOnly is a Store that keeps answers in memory and no budgets: it
// is not a BudgetStore.
type answersOnly struct {
	mu sync.Mutex
	m  map[llmcache.Key][]byte
}

func (s *answersOnly) Get(_ context.Context, k llmcache.Key) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.m[k]; ok {
		return v, nil
	}
	return nil, llmcache.ErrNotFound
}

func (s *answersOnly) Put(_ context.Context, k llmcache.Key, entry []byte, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[k] = append([]byte(nil), entry...)
	return nil
}

func (s *answersOnly) Delete(_ context.Context, k llmcache.Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
	return nil
}

func (s *answersOnly) Scan(_ context.Context, answer, _ func(v []byte) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.m {
		if err := answer(v); err != nil {
			return err
		}
	}
	return nil
}

func (s *answersOnly) Close() error { return nil }

// TestStoreWithoutBudgets: a Store that is not a BudgetStore caches
// answers; NewStore refuses Options.Budget with it, and a call that names a
// budget or a spend limit fails with ErrInvalidOptions without reaching the
// model.
func TestStoreWithoutBudgets(t *testing.T) {
	if _, err := llmcache.NewStore(&answersOnly{m: map[llmcache.Key][]byte{}}, llmcache.Options{Budget: 1000}); !errors.Is(err, llmcache.ErrInvalidOptions) {
		t.Fatalf("NewStore with a Budget = %v; want ErrInvalidOptions", err)
	}
	m := startModel(t, standin.Options{})
	c, err := llmcache.NewStore(&answersOnly{m: map[llmcache.Key][]byte{}}, llmcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"a"}]}` // complete: stored
	for _, want := range []string{"miss", "hit"} {
		resp, err := c.Transport(http.DefaultTransport).RoundTrip(mustRequest(t, context.Background(), m.URL, body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body) // the answer is stored once read whole
		resp.Body.Close()
		if got := resp.Header.Get(llmcache.HeaderCache); got != want {
			t.Errorf("%s = %q; want %q", llmcache.HeaderCache, got, want)
		}
		waitFor(t, 5*time.Second, "the answer stored", func() bool {
			s, err := llmhook.Summarize(c)
			return err == nil && s.Answers == 1
		})
	}
	for _, call := range []llmcache.Call{
		{Budget: 1000},
		{Limits: []llmcache.SpendLimit{{Name: "a", Max: 1, Period: time.Hour}}},
	} {
		ctx := llmcache.WithCall(context.Background(), call)
		body := `{"model":"gpt-4o-mini","max_tokens":10,"messages":[{"role":"user","content":"b"}]}`
		resp, err := c.Transport(http.DefaultTransport).RoundTrip(mustRequest(t, ctx, m.URL, body))
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, llmcache.ErrInvalidOptions) {
			t.Errorf("call %+v: %v; want ErrInvalidOptions", call, err)
		}
	}
	if n := m.Stats().Completions; n != 1 {
		t.Errorf("model answered %d completions; want 1 (the first miss)", n)
	}
	if _, _, err := c.Spending(llmcache.SpendLimit{Name: "a", Max: 1, Period: time.Hour}); !errors.Is(err, llmcache.ErrInvalidOptions) {
		t.Errorf("Spending = %v; want ErrInvalidOptions", err)
	}
}
