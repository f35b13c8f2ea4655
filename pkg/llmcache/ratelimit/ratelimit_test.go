package ratelimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/ratelimit"
)

// model is a stand-in model limited as opts say, served over HTTP, with a
// log of the arrival times of the requests it was sent.
type model struct {
	s       *standin.Server
	url     string
	mu      sync.Mutex
	arrived []time.Time
}

func newModel(t *testing.T, opts standin.Options) *model {
	t.Helper()
	s, err := standin.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	m := &model{s: s}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.arrived = append(m.arrived, time.Now())
		m.mu.Unlock()
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { s.Close(); ts.Close() })
	m.url = ts.URL + "/v1"
	return m
}

func (m *model) times() []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]time.Time(nil), m.arrived...)
}

// client returns a go-openai client whose requests go through rt (nil: the
// network directly).
func (m *model) client(rt http.RoundTripper) *openai.Client {
	cfg := openai.DefaultConfig("test")
	cfg.BaseURL = m.url
	if rt == nil {
		rt = http.DefaultTransport
	}
	cfg.HTTPClient = &http.Client{Transport: rt}
	return openai.NewClientWithConfig(cfg)
}

func ask(ctx context.Context, c *openai.Client, i int) error {
	_, err := c.CreateChatCompletion(ctx, openai.ChatCompletionRequest{
		Model:     "gpt-4o-mini",
		MaxTokens: 8,
		Messages:  []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "request " + strconv.Itoa(i)}},
	})
	return err
}

// storm sends n requests from workers goroutines and returns the errors.
func storm(ctx context.Context, c *openai.Client, n, workers int) []error {
	var next atomic.Int64
	errs := make([]error, n)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				errs[i] = ask(ctx, c, i)
			}
		})
	}
	wg.Wait()
	return errs
}

func failed(errs []error) (int, error) {
	var n int
	var first error
	for _, err := range errs {
		if err != nil {
			n++
			first = cmpOr(first, err)
		}
	}
	return n, first
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// maxInWindow is the most arrivals in any span of d.
func maxInWindow(ts []time.Time, d time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= d {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// TestPacesToTheLimit: a storm through the Transport reaches the endpoint
// at the configured rate — never more than rate×window + burst in any
// window, and no 429 from an endpoint that allows that — while the same
// storm without it is refused.
func TestPacesToTheLimit(t *testing.T) {
	t.Parallel()
	const n = 40
	// The Transport: 1200 a minute, 20/s with a burst of 2. In any second
	// it lets through at most 23; the endpoint allows 30.
	lim, err := ratelimit.New(nil, ratelimit.Options{RequestsPerMinute: 1200})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(t, standin.Options{RequestsPerMinute: 30 * 60, LimitWindow: time.Second})
	start := time.Now()
	errs := storm(context.Background(), m.client(lim), n, 16)
	if k, err := failed(errs); k > 0 {
		t.Fatalf("%d of %d requests failed through the limiter; first: %v", k, n, err)
	}
	st, ss := lim.Stats(), m.s.Stats()
	if ss.OverLimit != 0 || st.Limited != 0 || ss.Completions != n {
		t.Fatalf("endpoint %+v, transport %+v: want %d completions and no 429", ss, st, n)
	}
	arrived := m.times()
	// Let through: at most 20/s × 1s + a burst of 2, +1 for the token
	// that lands at the end of the second; +3 for the jitter of the
	// arrivals (150ms at 20/s), still under the endpoint's 30.
	if got := maxInWindow(arrived, time.Second); got > 26 {
		t.Errorf("%d requests in one second, want at most 26 (20/s + a burst of 2, +1, + jitter)", got)
	}
	// The last of n requests at 20/s after a burst of 2 is let through
	// 1.9s after the first at the earliest; less one token's time (50ms)
	// for the limiter's float arithmetic of tokens (CI once measured
	// 1.8997s). Without the limiter the storm takes milliseconds.
	if took := arrived[len(arrived)-1].Sub(start); took < time.Duration(n-3)*time.Second/20 {
		t.Errorf("%d requests arrived within %v, faster than 20/s after a burst of 2", n, took)
	}
	if st.Waited <= 0 || st.Requests != n || st.Sent != n {
		t.Errorf("transport stats %+v: want %d requests sent once each, and some wait", st, n)
	}

	// The control: the same storm with no limiter meets 429s.
	m2 := newModel(t, standin.Options{RequestsPerMinute: 30 * 60, LimitWindow: time.Second})
	if k, _ := failed(storm(context.Background(), m2.client(nil), n, 16)); k == 0 || m2.s.Stats().OverLimit == 0 {
		t.Fatalf("without the limiter %d requests failed and the endpoint refused %d: the test would not see a limit", k, m2.s.Stats().OverLimit)
	}
}

// TestRetryAfterPausesAndRetries: an endpoint that allows one request a
// second answers a burst with 429 and Retry-After: 1. Every caller gets
// its answer; no request reaches the endpoint within the second a 429
// asked to wait, and the rate was cut.
func TestRetryAfterPausesAndRetries(t *testing.T) {
	t.Parallel()
	lim, err := ratelimit.New(nil, ratelimit.Options{RequestsPerMinute: 600, MaxWait: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(t, standin.Options{RequestsPerMinute: 60, LimitWindow: time.Second})
	errs := storm(context.Background(), m.client(lim), 3, 3)
	if k, err := failed(errs); k > 0 {
		t.Fatalf("%d of 3 callers saw an error: %v", k, err)
	}
	st, ss := lim.Stats(), m.s.Stats()
	if ss.Completions != 3 || ss.OverLimit == 0 || st.Limited != ss.OverLimit || st.Sent != 3+st.Limited {
		t.Fatalf("endpoint %+v, transport %+v: want 3 completions, the 429s retried", ss, st)
	}
	if st.Factor >= 1 {
		t.Errorf("factor %v after a 429, want the rate cut", st.Factor)
	}
	// The three answers are at least a second apart: each 429 paused
	// everyone for the second its Retry-After named.
	var ok []time.Time
	arrived := m.times()
	for _, a := range arrived {
		if len(ok) == 0 || a.Sub(ok[len(ok)-1]) >= time.Second {
			ok = append(ok, a)
		}
	}
	if len(ok) < 3 {
		t.Errorf("arrivals %v: want the requests after each 429 to wait out its Retry-After", arrived)
	}
}

// TestGivesUpWithinBounds: a wait for the budget longer than MaxWait
// returns ErrWait at once; a wait cut short by the caller's context
// returns its error at once; both leave the budget as it was.
func TestGivesUpWithinBounds(t *testing.T) {
	t.Parallel()
	m := newModel(t, standin.Options{})
	// One request a minute: the first passes, the next waits a minute.
	lim, err := ratelimit.New(nil, ratelimit.Options{RequestsPerMinute: 1, MaxWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := m.client(lim)
	if err := ask(context.Background(), c, 0); err != nil {
		t.Fatal(err)
	}
	if err := ask(context.Background(), c, 1); !errors.Is(err, ratelimit.ErrWait) {
		t.Fatalf("a minute's wait with MaxWait 1s: err = %v, want ErrWait", err)
	}

	// With room to wait, the caller's context ends the wait.
	lim2, err := ratelimit.New(nil, ratelimit.Options{RequestsPerMinute: 1, MaxWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c2 := m.client(lim2)
	if err := ask(context.Background(), c2, 2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ask(ctx, c2, 3) }()
	waitFor(t, func() bool { return lim2.Stats().Requests == 2 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait: err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled wait did not return")
	}
	if st := lim2.Stats(); st.GaveUp != 1 || st.Sent != 1 {
		t.Errorf("stats %+v: want one request sent and one given up", st)
	}
	if got := m.s.Stats().Completions; got != 2 {
		t.Errorf("endpoint answered %d, want 2: the waits that gave up sent nothing", got)
	}
}

// TestAdaptsToALowerLimit: configured at four times what the endpoint
// allows, the Transport still gets every answer, and cuts its rate.
func TestAdaptsToALowerLimit(t *testing.T) {
	t.Parallel()
	lim, err := ratelimit.New(nil, ratelimit.Options{RequestsPerMinute: 4800, MaxWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// 20/s, in windows of a second.
	m := newModel(t, standin.Options{RequestsPerMinute: 1200, LimitWindow: time.Second})
	const n = 40
	if k, err := failed(storm(context.Background(), m.client(lim), n, 8)); k > 0 {
		t.Fatalf("%d of %d failed: %v", k, n, err)
	}
	st := lim.Stats()
	if st.Limited == 0 || st.Factor >= 1 {
		t.Fatalf("stats %+v: want 429s met and the rate cut", st)
	}
	if got := m.s.Stats().Completions; got != n {
		t.Fatalf("completions %d, want %d", got, n)
	}
	t.Logf("%d requests, %d 429s (%.0f%% of attempts), factor %v", n, st.Limited, 100*float64(st.Limited)/float64(st.Sent), st.Factor)
}

// TestTokenBudget: with a token budget only, requests are paced by the
// tokens they reserve, and the usage of each answer replaces its
// reservation.
func TestTokenBudget(t *testing.T) {
	t.Parallel()
	// 6000 tokens a minute: 100/s, a burst of 10. Each request reserves
	// its prompt (~12) and max_tokens 8, more than the burst: it waits
	// for a full bucket and owes the rest. The stand-in reports ~20 used.
	lim, err := ratelimit.New(nil, ratelimit.Options{TokensPerMinute: 6000})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(t, standin.Options{})
	const n = 10
	start := time.Now()
	if k, err := failed(storm(context.Background(), m.client(lim), n, 4)); k > 0 {
		t.Fatalf("%d failed: %v", k, err)
	}
	took := time.Since(start)
	ss := m.s.Stats()
	spent := ss.PromptTokens + ss.CompletionTokens
	// What went out beyond the first burst and the last request's debt
	// came at 100 tokens/s at most.
	if min := time.Duration(float64(spent-10-2*30) / 100 * float64(time.Second)); took < min {
		t.Errorf("%d tokens in %v, faster than 100/s after a burst of 10 (want at least %v)", spent, took, min)
	}
	if st := lim.Stats(); st.Waited <= 0 {
		t.Errorf("stats %+v: want the requests to have waited for tokens", st)
	}
}

// TestObserver: the observer hears each request's wait and each 429, with
// the pipeline and step of its llmcache.Call.
func TestObserver(t *testing.T) {
	t.Parallel()
	var o recorder
	lim, err := ratelimit.New(nil, ratelimit.Options{RequestsPerMinute: 6000, Observer: &o})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(t, standin.Options{RequestsPerMinute: 60, LimitWindow: time.Second})
	ctx := llmcache.WithCall(context.Background(), llmcache.Call{Namespace: "alerts", Step: "triage"})
	errs := storm(ctx, m.client(lim), 2, 2)
	if k, err := failed(errs); k > 0 {
		t.Fatal(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.waited["alerts/triage"] != 2 || o.limited["alerts/triage"] == 0 {
		t.Fatalf("observer: waited %v, limited %v; want 2 waits and a 429 for alerts/triage", o.waited, o.limited)
	}
}

type recorder struct {
	mu              sync.Mutex
	waited, limited map[string]int
}

func (r *recorder) Waited(p, s string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waited == nil {
		r.waited = map[string]int{}
	}
	r.waited[p+"/"+s]++
}

func (r *recorder) Limited(p, s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.limited == nil {
		r.limited = map[string]int{}
	}
	r.limited[p+"/"+s]++
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []ratelimit.Options{
		{RequestsPerMinute: -1}, {TokensPerMinute: -5}, {CompletionTokens: -1}, {MaxWait: -time.Second},
	} {
		if _, err := ratelimit.New(nil, o); err == nil {
			t.Errorf("New(%+v) = nil error", o)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
