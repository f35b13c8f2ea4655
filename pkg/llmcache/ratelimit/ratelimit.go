package ratelimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/pkg/llmcache"
)

// ErrWait is wrapped by the error a request returns when its wait for the
// endpoint's budget would end past [Options.MaxWait] or its context's
// deadline.
var ErrWait = errors.New("ratelimit: the wait for the model endpoint's rate limit would exceed the time allowed")

// Defaults of [Options].
const (
	DefaultCompletionTokens = 256
	DefaultMaxWait          = 30 * time.Second
)

// Adaptation to 429s: see the package documentation.
const (
	minFactor    = 1.0 / 8
	recoverStep  = 1.0 / 8
	recoverEvery = 10 * time.Second
	backoffFirst = 500 * time.Millisecond
	backoffMax   = 30 * time.Second
)

// maxUsageBytes bounds the answer kept to read its usage from; the
// reservation stands for a larger one.
const maxUsageBytes = 4 << 20

// Options configures a [Transport]. The zero value paces nothing and only
// handles 429s.
type Options struct {
	// RequestsPerMinute is the endpoint's request budget; 0 (the default)
	// sets none.
	RequestsPerMinute float64
	// TokensPerMinute is the endpoint's token budget, prompt and
	// completion together; 0 (the default) sets none.
	TokensPerMinute float64
	// CompletionTokens is the completion a request that sets no max_tokens
	// reserves from TokensPerMinute until its usage is known. The default
	// is 256.
	CompletionTokens int64
	// MaxWait bounds the time one request waits, for the budgets, 429
	// pauses and retries together; its context bounds it too. The default
	// is 30s.
	MaxWait time.Duration
	// Observer, if set, is told of each request's wait and of each 429.
	Observer Observer
}

// Observer receives the Transport's events; it must be safe for concurrent
// use. Pipeline and step come from the request's llmcache.Call (empty
// without one).
type Observer interface {
	// Waited records the time a request spent waiting for capacity (budget
	// and pauses; not the endpoint's own answers), once per request, when
	// it is sent for the last time or gives up. It may be 0.
	Waited(pipeline, step string, d time.Duration)
	// Limited records a 429 answered by the endpoint.
	Limited(pipeline, step string)
}

// Stats are a Transport's totals since it was created.
type Stats struct {
	Requests int64         // requests that came in
	Sent     int64         // attempts sent to the endpoint, retries included
	Limited  int64         // 429s answered by the endpoint
	GaveUp   int64         // requests returned without an answer other than 429: ErrWait, a context's end
	Waited   time.Duration // time requests spent waiting for capacity, summed
	MaxWait  time.Duration // the longest wait of one request
	// Factor is the share of the configured rates in force now: 1, or less
	// after a 429.
	Factor float64
}

// Transport is an http.RoundTripper that paces the requests to one model
// endpoint; create it with [New]. It is safe for concurrent use.
type Transport struct {
	next http.RoundTripper
	opts Options

	req, tok *rate.Limiter // nil when that budget is not set

	mu          sync.Mutex
	pausedUntil time.Time
	cutUntil    time.Time // no second cut before this: one per pause
	lastChange  time.Time // of factor
	factor      float64
	streak      int   // 429s in a row, for the backoff without Retry-After
	credit      int64 // tokens reserved and not spent, given back to the next requests
	maxWait     time.Duration
	// cut is closed, and replaced, when a 429 cuts the rates: requests
	// waiting on turns taken at the old rates take new ones.
	cut chan struct{}

	requests, sent, limited, gaveUp, waited atomic.Int64
}

// New returns a Transport that sends through next (http.DefaultTransport if
// nil) within the budgets of o.
func New(next http.RoundTripper, o Options) (*Transport, error) {
	switch {
	case o.RequestsPerMinute < 0 || math.IsNaN(o.RequestsPerMinute) || math.IsInf(o.RequestsPerMinute, 0):
		return nil, fmt.Errorf("ratelimit: RequestsPerMinute must be 0 or positive, got %v", o.RequestsPerMinute)
	case o.TokensPerMinute < 0 || math.IsNaN(o.TokensPerMinute) || math.IsInf(o.TokensPerMinute, 0):
		return nil, fmt.Errorf("ratelimit: TokensPerMinute must be 0 or positive, got %v", o.TokensPerMinute)
	case o.CompletionTokens < 0:
		return nil, fmt.Errorf("ratelimit: CompletionTokens must not be negative, got %d", o.CompletionTokens)
	case o.MaxWait < 0:
		return nil, fmt.Errorf("ratelimit: MaxWait must not be negative, got %v", o.MaxWait)
	}
	if next == nil {
		next = http.DefaultTransport
	}
	if o.CompletionTokens == 0 {
		o.CompletionTokens = DefaultCompletionTokens
	}
	if o.MaxWait == 0 {
		o.MaxWait = DefaultMaxWait
	}
	t := &Transport{next: next, opts: o, factor: 1, cut: make(chan struct{})}
	if o.RequestsPerMinute > 0 {
		t.req = rate.NewLimiter(perSecond(o.RequestsPerMinute), burst(o.RequestsPerMinute))
	}
	if o.TokensPerMinute > 0 {
		t.tok = rate.NewLimiter(perSecond(o.TokensPerMinute), burst(o.TokensPerMinute))
	}
	return t, nil
}

func perSecond(perMinute float64) rate.Limit { return rate.Limit(perMinute / 60) }

// burst is a tenth of a second's worth of a per-minute budget, at least
// 1: providers that count a minute's limit over shorter spans (a second's
// share in each second) then see at most a tenth more than the rate in any
// second.
func burst(perMinute float64) int { return max(1, int(perMinute/600)) }

// Stats returns the totals so far.
func (t *Transport) Stats() Stats {
	t.mu.Lock()
	f, mw := t.factor, t.maxWait
	t.mu.Unlock()
	return Stats{
		Requests: t.requests.Load(), Sent: t.sent.Load(), Limited: t.limited.Load(), GaveUp: t.gaveUp.Load(),
		Waited: time.Duration(t.waited.Load()), MaxWait: mw, Factor: f,
	}
}

// CloseIdleConnections closes the idle connections of the transport below,
// if it has that method.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip implements http.RoundTripper: it waits for the budgets and any
// pause, sends req, and on a 429 pauses the endpoint and sends req again,
// within the bounds of the package documentation.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.requests.Add(1)
	ctx := req.Context()
	start := time.Now()
	deadline := start.Add(t.opts.MaxWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	call, _ := llmcache.CallFrom(ctx)

	body, err := readBody(req)
	if err != nil {
		return nil, fmt.Errorf("ratelimit: read request body: %w", err)
	}
	var need int64
	if t.tok != nil {
		need = t.estimate(body)
	}

	var waited, upstream time.Duration
	finish := func(gaveUp bool) {
		waited = max(time.Since(start)-upstream, 0)
		t.waited.Add(int64(waited))
		t.mu.Lock()
		t.maxWait = max(t.maxWait, waited)
		t.mu.Unlock()
		if gaveUp {
			t.gaveUp.Add(1)
		}
		if o := t.opts.Observer; o != nil {
			o.Waited(call.Namespace, call.Step, waited)
		}
	}

	for {
		if err := t.admit(ctx, deadline, need); err != nil {
			finish(true)
			return nil, err
		}
		up := req.Clone(ctx)
		if body != nil {
			up.Body = io.NopCloser(bytes.NewReader(body))
			up.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
			up.ContentLength = int64(len(body))
		}
		t.sent.Add(1)
		sentAt := time.Now()
		resp, err := t.next.RoundTrip(up)
		if err != nil {
			upstream += time.Since(sentAt)
			finish(false)
			return nil, err
		}
		if resp.StatusCode != http.StatusTooManyRequests {
			upstream += time.Since(sentAt)
			t.succeeded()
			finish(false)
			if t.tok != nil {
				resp.Body = &usageBody{ReadCloser: resp.Body, t: t, reserved: need,
					stream: isStream(resp.Header.Get("Content-Type"))}
			}
			return resp, nil
		}
		// A 429: keep its body, in case it is the answer returned.
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		upstream += time.Since(sentAt)
		t.limited.Add(1)
		if o := t.opts.Observer; o != nil {
			o.Limited(call.Namespace, call.Step)
		}
		until := t.throttled(resp.Header)
		if until.After(deadline) || ctx.Err() != nil {
			finish(false)
			return resp, nil
		}
		// The reservation was spent on an answer that cost nothing; the
		// retry takes a new one, which the emptied buckets make wait.
	}
}

// admit waits until no pause is in force and the budgets have room for one
// request of need tokens, or returns an error without waiting if that would
// be past deadline, or when ctx ends.
func (t *Transport) admit(ctx context.Context, deadline time.Time, need int64) error {
	for {
		t.mu.Lock()
		until, cut := t.pausedUntil, t.cut
		t.mu.Unlock()
		now := time.Now()
		if until.After(now) {
			if until.After(deadline) {
				return fmt.Errorf("%w: the endpoint answered 429 and is paused for %v", ErrWait, until.Sub(now).Round(time.Millisecond))
			}
			if _, err := sleep(ctx, until.Sub(now), nil); err != nil {
				return err
			}
			continue
		}
		var rr, tr *rate.Reservation
		var delay time.Duration
		if t.req != nil {
			rr = t.req.ReserveN(now, 1)
			delay = rr.DelayFrom(now)
		}
		var owe int64
		if t.tok != nil {
			n := t.useCredit(need)
			b := int64(t.tok.Burst())
			take := min(n, b)
			owe = n - take
			if take > 0 {
				tr = t.tok.ReserveN(now, int(take))
				delay = max(delay, tr.DelayFrom(now))
			}
		}
		cancel := func() {
			if rr != nil {
				rr.CancelAt(time.Now())
			}
			if tr != nil {
				tr.CancelAt(time.Now())
			}
		}
		if (rr != nil && !rr.OK()) || (tr != nil && !tr.OK()) {
			cancel() // the burst was cut between reading it and reserving
			continue
		}
		if now.Add(delay).After(deadline) {
			cancel()
			return fmt.Errorf("%w: %v for the budget, %v allowed", ErrWait, delay.Round(time.Millisecond), deadline.Sub(now).Round(time.Millisecond))
		}
		if cutNow, err := sleep(ctx, delay, cut); err != nil || cutNow {
			// A turn taken at rates a 429 has since cut is given back,
			// and a new one taken once the pause is over.
			cancel()
			if err != nil {
				return err
			}
			continue
		}
		t.mu.Lock()
		paused := t.pausedUntil.After(time.Now())
		t.mu.Unlock()
		if paused { // a 429 came while this request waited: wait for the pause
			continue
		}
		t.debit(owe)
		return nil
	}
}

// sleep waits d, or until ctx ends (its error), or until cut is closed
// (true).
func sleep(ctx context.Context, d time.Duration, cut <-chan struct{}) (bool, error) {
	if d <= 0 {
		return false, ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return false, nil
	case <-cut:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// estimate returns the tokens a request reserves: its prompt and its
// completion cap, or the default completion allowance.
func (t *Transport) estimate(body []byte) int64 {
	e, err := llmhook.EstimateRequest(body)
	if err != nil { // not a chat completion: a rough count of its text
		return int64(len(body)+3) / 4
	}
	if e.MaxCompletion == 0 {
		e.MaxCompletion = t.opts.CompletionTokens
	}
	return e.Prompt + e.MaxCompletion
}

// useCredit returns need less the tokens given back by earlier requests,
// which it uses up.
func (t *Transport) useCredit(need int64) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	use := min(t.credit, need)
	t.credit -= use
	return need - use
}

// debit takes n tokens from the token budget now, leaving it owing: the
// requests after wait for them.
func (t *Transport) debit(n int64) {
	if t.tok == nil {
		return
	}
	now := time.Now()
	b := int64(t.tok.Burst())
	for n > 0 {
		k := min(n, b)
		t.tok.ReserveN(now, int(k))
		n -= k
	}
}

// refund gives back n tokens reserved and not spent, as far as the bucket
// has room for them.
func (t *Transport) refund(n int64) {
	if t.tok == nil || n <= 0 {
		return
	}
	room := float64(t.tok.Burst()) - max(t.tok.Tokens(), 0)
	t.mu.Lock()
	t.credit = min(t.credit+n, int64(room))
	t.credit = max(t.credit, 0)
	t.mu.Unlock()
}

// settle replaces a reservation of reserved tokens by the used ones.
func (t *Transport) settle(reserved, used int64) {
	switch {
	case used > reserved:
		t.debit(used - reserved)
	case used < reserved:
		t.refund(reserved - used)
	}
}

// throttled records a 429 with header h: it pauses the endpoint until the
// time h asks for (or a backoff), and cuts the rates once per pause. It
// returns the end of the pause.
func (t *Transport) throttled(h http.Header) time.Time {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.streak++
	d, ok := retryAfter(h, now)
	if !ok {
		d = backoff(t.streak)
	}
	until := now.Add(d)
	if until.After(t.pausedUntil) {
		t.pausedUntil = until
	}
	if !now.Before(t.cutUntil) {
		t.factor = max(t.factor/2, minFactor)
		t.lastChange = now
		t.cutUntil = t.pausedUntil
		t.apply(now)
		t.drain(now)
		close(t.cut)
		t.cut = make(chan struct{})
	}
	return t.pausedUntil
}

// succeeded records an answer other than 429, and lets the rates recover.
func (t *Transport) succeeded() {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.streak = 0
	if t.factor < 1 && now.Sub(t.lastChange) >= recoverEvery {
		t.factor = min(1, t.factor+recoverStep)
		t.lastChange = now
		t.apply(now)
	}
}

// apply sets the limiters to factor of the configured rates. t.mu is held.
func (t *Transport) apply(now time.Time) {
	if t.req != nil {
		r := t.opts.RequestsPerMinute * t.factor
		t.req.SetLimitAt(now, perSecond(r))
		t.req.SetBurstAt(now, burst(r))
	}
	if t.tok != nil {
		r := t.opts.TokensPerMinute * t.factor
		t.tok.SetLimitAt(now, perSecond(r))
		t.tok.SetBurstAt(now, burst(r))
	}
}

// drain empties the buckets, so that the requests after a pause are paced
// from nothing rather than let through in a burst. t.mu is held.
func (t *Transport) drain(now time.Time) {
	for _, l := range []*rate.Limiter{t.req, t.tok} {
		if l == nil {
			continue
		}
		if n := int(l.TokensAt(now)); n > 0 {
			l.ReserveN(now, n)
		}
	}
	t.credit = 0
}

// backoff is the pause after the n-th 429 in a row without Retry-After:
// 500ms doubling up to 30s, with jitter over its upper half.
func backoff(n int) time.Duration {
	d := backoffFirst << min(n-1, 6)
	d = min(d, backoffMax)
	return d/2 + rand.N(d/2+1)
}

// maxRetryAfter is the longest pause a 429 is believed to ask for; a
// longer one is taken for a broken header, and the backoff applies.
const maxRetryAfter = 24 * time.Hour

// retryAfter reads the pause a 429 asks for: retry-after-ms, or
// Retry-After in seconds or as an HTTP date, at most maxRetryAfter.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms <= float64(maxRetryAfter/time.Millisecond) {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 || time.Duration(s) > maxRetryAfter/time.Second {
			return 0, false
		}
		return time.Duration(s) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil && at.Sub(now) <= maxRetryAfter {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}

// readBody reads req's body whole, to send it again on a retry.
func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer req.Body.Close()
	return io.ReadAll(req.Body)
}

func isStream(contentType string) bool {
	return len(contentType) >= 17 && contentType[:17] == "text/event-stream"
}
