package sink

import (
	"context"
	"errors"
	"sync"
	"time"
)

// RateLimit holds an [HTTP] sink's requests within its receiver's quota:
// PagerDuty's Events API takes about 120 events a minute per routing key,
// a Slack incoming webhook about one message a second, and each drops
// what comes past that with a 429. The zero value sets no limit.
type RateLimit struct {
	// Requests is how many requests the receiver takes in each Per. 0 (the
	// default) sets no limit.
	Requests int

	// Per is the quota's window. The default is a minute.
	Per time.Duration

	// MaxWait bounds how long one request waits for room, 429 pauses
	// included; past it Deliver fails with a retryable error and the
	// effect is retried later. The default is no bound: the request waits
	// as long as its context lets it.
	MaxWait time.Duration
}

// limiter keeps requests within the quota as the receiver counts it: at
// most Requests in any window of Per (a sliding window, with a little to
// spare), so a burst up to the quota goes at once and the rest follow as
// the window moves; and it pauses every request after a 429 until its
// Retry-After.
type limiter struct {
	n       int
	window  time.Duration
	maxWait time.Duration

	mu    sync.Mutex
	sent  []time.Time // the last n requests' turns, oldest first
	pause time.Time   // no request before this: a 429's Retry-After

	// coalescing: the requests waiting for room, by coalesce key.
	waiting map[string]*queued

	sleep func(ctx context.Context, d time.Duration) error
	now   func() time.Time
}

// queued is a request waiting for room, which others with its coalesce key
// join.
type queued struct {
	done   chan struct{}
	res    Result
	err    error
	joined int // requests that joined it (under the limiter's lock)
}

// margin widens the window a little — a fiftieth, and at least 100ms —
// so that the time between a request's turn and its arrival, which varies
// (scheduling, the network), does not bring one more than the quota into
// a window at the receiver.
func margin(per time.Duration) time.Duration { return max(per/50, 100*time.Millisecond) }

func newLimiter(r RateLimit) *limiter {
	if r.Requests <= 0 {
		return nil
	}
	per := r.Per
	if per <= 0 {
		per = time.Minute
	}
	return &limiter{
		n:       r.Requests,
		window:  per + margin(per),
		maxWait: r.MaxWait,
		waiting: map[string]*queued{},
		sleep:   wait,
		now:     time.Now,
	}
}

var errLimitWait = errors.New("waited past the rate limit's max_wait for room in the receiver's quota")

// reserve waits for the request's turn. It returns an error only when ctx
// is done or the wait would pass MaxWait (from started).
func (l *limiter) reserve(ctx context.Context, started time.Time) error {
	now := l.now()
	l.mu.Lock()
	at := now
	later := func(t time.Time) {
		if t.After(at) {
			at = t
		}
	}
	later(l.pause)
	if len(l.sent) > 0 {
		later(l.sent[len(l.sent)-1]) // turns never go backwards
	}
	if len(l.sent) == l.n {
		later(l.sent[0].Add(l.window))
	}
	if l.maxWait > 0 && at.Sub(started) > l.maxWait {
		l.mu.Unlock()
		return errLimitWait
	}
	if deadline, ok := ctx.Deadline(); ok && deadline.Before(at) {
		l.mu.Unlock()
		return context.DeadlineExceeded
	}
	if len(l.sent) == l.n {
		l.sent = append(l.sent[:0], l.sent[1:]...)
	}
	l.sent = append(l.sent, at)
	l.mu.Unlock()
	if d := at.Sub(now); d > 0 {
		return l.sleep(ctx, d)
	}
	return nil
}

// throttled pauses every request until d from now: the receiver answered
// 429 with that Retry-After (or, without one, a second).
func (l *limiter) throttled(d time.Duration) {
	if d <= 0 {
		d = time.Second
	}
	l.mu.Lock()
	until := l.now().Add(d)
	if until.After(l.pause) {
		l.pause = until
	}
	l.mu.Unlock()
}

// join returns the request waiting with key, or registers q as the one
// (and returns nil). An empty key never coalesces.
func (l *limiter) join(key string, q *queued) *queued {
	if key == "" {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w, ok := l.waiting[key]; ok {
		w.joined++
		return w
	}
	l.waiting[key] = q
	return nil
}

// leave ends key's wait: the request goes out now, and later ones with
// its key are sent on their own.
func (l *limiter) leave(key string, q *queued) {
	if key == "" {
		return
	}
	l.mu.Lock()
	if l.waiting[key] == q {
		delete(l.waiting, key)
	}
	l.mu.Unlock()
}
