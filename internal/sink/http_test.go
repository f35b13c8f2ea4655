package sink_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/sink"
)

// secret is the Authorization value of the tests; no error may show it.
const secret = "Bearer sk_live_s3cr3t"

// deadline bounds every wait of a test for another goroutine.
const deadline = 10 * time.Second

// newHTTPSink builds an HTTP sink for url that records its backoff waits
// instead of sleeping, unless realWait; it is closed by t.Cleanup.
func newHTTPSink(t *testing.T, opts sink.HTTPOptions, realWait bool) (*sink.HTTP, *[]time.Duration) {
	t.Helper()
	s, err := sink.NewHTTP(opts)
	if err != nil {
		t.Fatalf("NewHTTP: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	waits := new([]time.Duration)
	if !realWait {
		var mu sync.Mutex
		sink.SetWait(s, func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			*waits = append(*waits, d)
			return ctx.Err()
		})
	}
	return s, waits
}

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts
}

// provider is a payment provider that honours Idempotency-Key: it performs
// the first request of a key, answers 409 to the same key while that is in
// flight, replays the stored answer afterwards with Idempotent-Replayed,
// and refuses the key with another body (422).
type provider struct {
	hold     chan struct{} // if not nil, the first payment waits for it to close
	started  chan struct{} // closed when the first payment starts
	conflict chan struct{} // closed at the first 409

	mu        sync.Mutex
	payments  map[string]*payment
	performed int
	headers   []http.Header
}

type payment struct {
	body   []byte
	done   bool
	answer []byte
}

func newProvider() *provider {
	return &provider{
		started:  make(chan struct{}),
		conflict: make(chan struct{}),
		payments: map[string]*payment{},
	}
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	p.headers = append(p.headers, r.Header.Clone())
	if r.Header.Get("Authorization") != secret {
		p.mu.Unlock()
		http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
		return
	}
	pay := p.payments[key]
	switch {
	case pay == nil:
		pay = &payment{body: body}
		p.payments[key] = pay
		p.performed++
		n := p.performed
		p.mu.Unlock()
		if n == 1 {
			close(p.started)
			if p.hold != nil {
				<-p.hold
			}
		}
		p.mu.Lock()
		pay.answer = fmt.Appendf(nil, `{"id":"pay_%d"}`, n)
		pay.done = true
		p.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		w.Write(pay.answer)
	case !bytes.Equal(pay.body, body):
		p.mu.Unlock()
		http.Error(w, `{"error":"key reused with other parameters"}`, http.StatusUnprocessableEntity)
	case !pay.done:
		p.mu.Unlock()
		select {
		case <-p.conflict:
		default:
			close(p.conflict)
		}
		http.Error(w, `{"error":"request in progress"}`, http.StatusConflict)
	default:
		answer := pay.answer
		p.mu.Unlock()
		w.Header().Set(sink.ReplayHeader, "true")
		w.WriteHeader(http.StatusCreated)
		w.Write(answer)
	}
}

func (p *provider) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.performed
}

func TestHTTPIdempotentProvider(t *testing.T) {
	p := newProvider()
	ts := newServer(t, p)
	s, _ := newHTTPSink(t, sink.HTTPOptions{URL: ts.URL + "/v1/payments", Header: map[string]string{"Authorization": secret}}, false)
	ctx := t.Context()
	e := sink.Effect{Key: key1, Pipeline: "billing", Step: "charge", Body: []byte(`{"amount":1000}`), Header: map[string]string{"Authorization": "forged", "X-Trace": "t1"}}

	for i, wantDup := range []bool{false, true} {
		res, err := s.Deliver(ctx, e)
		if err != nil {
			t.Fatalf("Deliver #%d: %v", i+1, err)
		}
		if want := (sink.Result{Status: 201, Duplicate: wantDup, Body: []byte(`{"id":"pay_1"}`), Attempts: 1}); !equalResult(res, want) {
			t.Errorf("Deliver #%d = %+v; want %+v", i+1, res, want)
		}
	}
	if n := p.count(); n != 1 {
		t.Errorf("provider performed %d payments; want 1", n)
	}
	h := p.headers[0]
	for name, want := range map[string]string{
		"Idempotency-Key":   key1,
		"Content-Type":      "application/json",
		"Authorization":     secret,
		sink.PipelineHeader: "billing",
		sink.StepHeader:     "charge",
		"X-Trace":           "t1",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("request header %s = %q; want %q", name, got, want)
		}
	}

	// The same key for other work is refused, without retries.
	e.Body = []byte(`{"amount":2000}`)
	res, err := s.Deliver(ctx, e)
	checkClass(t, "Deliver(other body)", err, "permanent")
	if res.Status != http.StatusUnprocessableEntity || res.Attempts != 1 {
		t.Errorf("Deliver(other body) = %+v; want Status 422 after 1 attempt", res)
	}
}

func TestHTTPConflictWhileInFlight(t *testing.T) {
	p := newProvider()
	p.hold = make(chan struct{})
	ts := newServer(t, p)
	s, _ := newHTTPSink(t, sink.HTTPOptions{
		URL:        ts.URL,
		Header:     map[string]string{"Authorization": secret},
		Attempts:   100,
		Backoff:    time.Millisecond,
		MaxBackoff: 10 * time.Millisecond,
	}, true)
	e := sink.Effect{Key: key1, Body: []byte(`{"amount":1000}`)}

	type outcome struct {
		res sink.Result
		err error
	}
	first, second := make(chan outcome, 1), make(chan outcome, 1)
	deliver := func(c chan<- outcome) {
		res, err := s.Deliver(t.Context(), e)
		c <- outcome{res, err}
	}
	go deliver(first)
	waitClosed(t, p.started, "the first payment to start")
	go deliver(second)
	waitClosed(t, p.conflict, "a 409 for the second delivery")
	close(p.hold)

	a, b := receive(t, first), receive(t, second)
	if a.err != nil || a.res.Duplicate || a.res.Status != 201 {
		t.Errorf("first Deliver = %+v, %v; want 201, not a duplicate", a.res, a.err)
	}
	if b.err != nil || !b.res.Duplicate || b.res.Status != 201 || b.res.Attempts < 2 {
		t.Errorf("second Deliver = %+v, %v; want a 201 replay after 2 or more attempts", b.res, b.err)
	}
	if n := p.count(); n != 1 {
		t.Errorf("provider performed %d payments; want 1", n)
	}
}

// step is one scripted answer.
type step struct {
	status     int
	retryAfter string
	body       string
	header     map[string]string
}

// script answers requests with its steps in turn, repeating the last.
type script struct {
	steps []step
	mu    sync.Mutex
	calls int
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	st := s.steps[min(s.calls, len(s.steps)-1)]
	s.calls++
	s.mu.Unlock()
	if st.retryAfter != "" {
		w.Header().Set("Retry-After", st.retryAfter)
	}
	for k, v := range st.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(st.status)
	io.WriteString(w, st.body)
}

func (s *script) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func TestHTTPStatuses(t *testing.T) {
	const backoff = 100 * time.Millisecond
	date := time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)
	inRange := func(lo, hi time.Duration) func(time.Duration) bool {
		return func(d time.Duration) bool { return lo <= d && d <= hi }
	}
	exactly := func(want time.Duration) func(time.Duration) bool { return inRange(want, want) }

	for _, tt := range []struct {
		name      string
		steps     []step
		want      string // class of the error
		wantRes   sink.Result
		wantCalls int
		wantWaits []func(time.Duration) bool
	}{
		{
			name:      "200",
			steps:     []step{{status: 200, body: "ok"}},
			want:      "ok",
			wantRes:   sink.Result{Status: 200, Body: []byte("ok"), Attempts: 1},
			wantCalls: 1,
		},
		{
			name:      "503 twice then 200",
			steps:     []step{{status: 503}, {status: 503}, {status: 200, body: "ok"}},
			want:      "ok",
			wantRes:   sink.Result{Status: 200, Body: []byte("ok"), Attempts: 3},
			wantCalls: 3,
			wantWaits: []func(time.Duration) bool{inRange(backoff/2, backoff), inRange(backoff, 2*backoff)},
		},
		{
			name:      "429 with Retry-After seconds",
			steps:     []step{{status: 429, retryAfter: "2"}, {status: 204}},
			want:      "ok",
			wantRes:   sink.Result{Status: 204, Body: []byte{}, Attempts: 2},
			wantCalls: 2,
			wantWaits: []func(time.Duration) bool{exactly(2 * time.Second)},
		},
		{
			name:      "503 with Retry-After date",
			steps:     []step{{status: 503, retryAfter: date}, {status: 200}},
			want:      "ok",
			wantRes:   sink.Result{Status: 200, Body: []byte{}, Attempts: 2},
			wantCalls: 2,
			wantWaits: []func(time.Duration) bool{inRange(time.Second, 3*time.Second)},
		},
		{
			name:      "Retry-After capped at MaxBackoff",
			steps:     []step{{status: 429, retryAfter: "3600"}, {status: 200}},
			want:      "ok",
			wantRes:   sink.Result{Status: 200, Body: []byte{}, Attempts: 2},
			wantCalls: 2,
			wantWaits: []func(time.Duration) bool{exactly(10 * time.Second)},
		},
		{
			name:      "408, 409 and 425 are retried",
			steps:     []step{{status: 408}, {status: 409}, {status: 425}, {status: 200}},
			want:      "ok",
			wantRes:   sink.Result{Status: 200, Body: []byte{}, Attempts: 4},
			wantCalls: 4,
			wantWaits: []func(time.Duration) bool{inRange(0, 10*time.Second), inRange(0, 10*time.Second), inRange(0, 10*time.Second)},
		},
		{
			name:      "replayed",
			steps:     []step{{status: 200, body: "ok", header: map[string]string{sink.ReplayHeader: "true"}}},
			want:      "ok",
			wantRes:   sink.Result{Status: 200, Duplicate: true, Body: []byte("ok"), Attempts: 1},
			wantCalls: 1,
		},
		{
			name:      "body truncated",
			steps:     []step{{status: 200, body: strings.Repeat("x", 100)}},
			want:      "ok",
			wantRes:   sink.Result{Status: 200, Body: []byte(strings.Repeat("x", 32)), Attempts: 1},
			wantCalls: 1,
		},
		{
			name:      "400 is permanent at once",
			steps:     []step{{status: 400, body: `{"error":"bad amount"}`}},
			want:      "permanent",
			wantRes:   sink.Result{Status: 400, Body: []byte(`{"error":"bad amount"}`), Attempts: 1},
			wantCalls: 1,
		},
		{
			name:      "404 is permanent at once",
			steps:     []step{{status: 404}},
			want:      "permanent",
			wantRes:   sink.Result{Status: 404, Body: []byte{}, Attempts: 1},
			wantCalls: 1,
		},
		{
			name:      "redirect is not followed",
			steps:     []step{{status: 307, header: map[string]string{"Location": "/elsewhere"}}},
			want:      "permanent",
			wantRes:   sink.Result{Status: 307, Body: []byte{}, Attempts: 1},
			wantCalls: 1,
		},
		{
			name:      "500 until Attempts are spent",
			steps:     []step{{status: 500, body: "down"}},
			want:      "retryable",
			wantRes:   sink.Result{Status: 500, Body: []byte("down"), Attempts: 4},
			wantCalls: 4,
			wantWaits: []func(time.Duration) bool{inRange(backoff/2, backoff), inRange(backoff, 2*backoff), inRange(2*backoff, 4*backoff)},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sc := &script{steps: tt.steps}
			ts := newServer(t, sc)
			s, waits := newHTTPSink(t, sink.HTTPOptions{
				URL:              ts.URL,
				Attempts:         4,
				Backoff:          backoff,
				MaxResponseBytes: 32,
			}, false)
			res, err := s.Deliver(t.Context(), sink.Effect{Key: key1, Body: []byte(`{}`)})
			checkClass(t, "Deliver", err, tt.want)
			if !equalResult(res, tt.wantRes) {
				t.Errorf("Deliver = %+v; want %+v", res, tt.wantRes)
			}
			var serr *sink.Error
			if errors.As(err, &serr) && serr.Status != tt.wantRes.Status {
				t.Errorf("Error.Status = %d; want %d", serr.Status, tt.wantRes.Status)
			}
			if n := sc.count(); n != tt.wantCalls {
				t.Errorf("server got %d requests; want %d", n, tt.wantCalls)
			}
			if len(*waits) != len(tt.wantWaits) {
				t.Fatalf("waits = %v; want %d of them", *waits, len(tt.wantWaits))
			}
			for i, ok := range tt.wantWaits {
				if !ok((*waits)[i]) {
					t.Errorf("wait #%d = %v; out of range", i+1, (*waits)[i])
				}
			}
		})
	}
}

func TestHTTPCancelDuringBackoff(t *testing.T) {
	first := make(chan struct{})
	var once sync.Once
	ts := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(first) })
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	s, _ := newHTTPSink(t, sink.HTTPOptions{URL: ts.URL, Backoff: time.Minute, MaxBackoff: time.Minute}, true)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := s.Deliver(ctx, sink.Effect{Key: key1})
		done <- err
	}()
	waitClosed(t, first, "the first request")
	cancel()
	select {
	case err := <-done:
		checkClass(t, "Deliver", err, "retryable")
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Deliver error %v does not wrap context.Canceled", err)
		}
	case <-time.After(deadline):
		t.Fatalf("Deliver still waiting %v after its context was cancelled", deadline)
	}
}

func TestHTTPGivesUpBeforeDeadline(t *testing.T) {
	sc := &script{steps: []step{{status: 429, retryAfter: "5"}}}
	ts := newServer(t, sc)
	s, waits := newHTTPSink(t, sink.HTTPOptions{URL: ts.URL}, false)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	res, err := s.Deliver(ctx, sink.Effect{Key: key1})
	checkClass(t, "Deliver", err, "retryable")
	if res.Attempts != 1 || len(*waits) != 0 {
		t.Errorf("Deliver made %d attempts and waits %v; want 1 attempt and no wait past the deadline", res.Attempts, *waits)
	}
}

func TestHTTPAttemptTimeout(t *testing.T) {
	ts := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // hang until the client gives up
	}))
	s, _ := newHTTPSink(t, sink.HTTPOptions{URL: ts.URL, Timeout: 50 * time.Millisecond, Attempts: 2}, false)
	res, err := s.Deliver(t.Context(), sink.Effect{Key: key1})
	checkClass(t, "Deliver", err, "retryable")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Deliver error %v does not wrap context.DeadlineExceeded", err)
	}
	if res.Attempts != 2 || res.Status != 0 {
		t.Errorf("Deliver = %+v; want 2 attempts and no status", res)
	}
}

func TestHTTPErrorsHideSecrets(t *testing.T) {
	// The handler echoes the request's headers, as a careless server might.
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, "%v", r.Header)
	})
	flaky := &script{steps: []step{{status: 500, body: secret}}}
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	const path = "/services/T0/B0/pathsecret7Kq2xZ9mW4vT?token=querysecret"

	for _, tt := range []struct {
		name   string
		url    string
		effect sink.Effect
		want   string
	}{
		{"401", newServer(t, echo).URL + path, sink.Effect{Key: key1}, "permanent"},
		{"500 forever", newServer(t, flaky).URL + path, sink.Effect{Key: key1}, "retryable"},
		{"connection refused", gone.URL + path, sink.Effect{Key: key1}, "retryable"},
		{"bad effect header", gone.URL + path, sink.Effect{Key: key1, Header: map[string]string{"X-Signature": secret + "\r\n"}}, "permanent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newHTTPSink(t, sink.HTTPOptions{URL: tt.url, Header: map[string]string{"Authorization": secret}, Attempts: 2}, false)
			_, err := s.Deliver(t.Context(), tt.effect)
			checkClass(t, "Deliver", err, tt.want)
			for _, word := range []string{secret, "sk_live", "pathsecret", "querysecret"} {
				if strings.Contains(err.Error(), word) {
					t.Errorf("error %q shows %q", err, word)
				}
			}
			// The path stays, but for its token: the error says which
			// endpoint refused.
			if tt.name != "bad effect header" && !strings.Contains(err.Error(), "/services/T0/B0/REDACTED") {
				t.Errorf("error %q does not name the path", err)
			}
		})
	}
}

func TestNewHTTPOptions(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts sink.HTTPOptions
		want string
	}{
		{"defaults", sink.HTTPOptions{URL: "https://api.example.com/v1/payments"}, "ok"},
		{"PUT", sink.HTTPOptions{URL: "http://127.0.0.1:8080/x", Method: http.MethodPut}, "ok"},
		{"no URL", sink.HTTPOptions{}, "permanent"},
		{"relative URL", sink.HTTPOptions{URL: "/v1/payments"}, "permanent"},
		{"ftp", sink.HTTPOptions{URL: "ftp://example.com/"}, "permanent"},
		{"credentials in URL", sink.HTTPOptions{URL: "https://user:pw-secret@example.com/"}, "permanent"},
		{"GET", sink.HTTPOptions{URL: "https://example.com/", Method: http.MethodGet}, "permanent"},
		{"negative Attempts", sink.HTTPOptions{URL: "https://example.com/", Attempts: -1}, "permanent"},
		{"negative Timeout", sink.HTTPOptions{URL: "https://example.com/", Timeout: -time.Second}, "permanent"},
		{"Backoff over MaxBackoff", sink.HTTPOptions{URL: "https://example.com/", Backoff: time.Minute}, "permanent"},
		{"bad header name", sink.HTTPOptions{URL: "https://example.com/", Header: map[string]string{"Bad Name": "v"}}, "permanent"},
		{"header value with CRLF", sink.HTTPOptions{URL: "https://example.com/", Header: map[string]string{"Authorization": secret + "\r\nX: y"}}, "permanent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := sink.NewHTTP(tt.opts)
			checkClass(t, "NewHTTP", err, tt.want)
			if err == nil {
				s.Close()
				return
			}
			for _, word := range []string{"pw-secret", "sk_live"} {
				if strings.Contains(err.Error(), word) {
					t.Errorf("error %q shows %q", err, word)
				}
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-3", 0},
		{"7", 7 * time.Second},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"99999999999999", 24 * time.Hour},
	} {
		if got := sink.ParseRetryAfter(tt.in, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %v; want %v", tt.in, got, tt.want)
		}
	}
}

func equalResult(a, b sink.Result) bool {
	return a.Status == b.Status && a.Duplicate == b.Duplicate && a.Attempts == b.Attempts && bytes.Equal(a.Body, b.Body)
}

// waitClosed fails t if c is not closed within deadline.
func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(deadline):
		t.Fatalf("no %s after %v", what, deadline)
	}
}

// receive fails t if nothing comes on c within deadline.
func receive[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(deadline):
		t.Fatalf("nothing received after %v", deadline)
		panic("unreachable")
	}
}
