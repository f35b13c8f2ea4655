package sink

import (
	"context"
	"testing"
	"time"
)

// FuzzRateLimit drives an effect's rate limit with any sequence of
// requests, pauses between them and 429s (Retry-After of any length), on
// a clock of its own, and checks what a user relies on when the receiver
// drops what comes past its quota: no window of Per ever holds more than
// Requests requests, no request goes out before a Retry-After it was told
// to wait out has passed, and each request goes out in its turn (none
// waits while the quota has room and no Retry-After holds it).
func FuzzRateLimit(f *testing.F) {
	f.Add(uint8(3), uint16(1000), []byte{0, 0, 0, 0, 0, 0, 1, 5, 0, 0, 2, 3, 0})
	f.Add(uint8(1), uint16(50), []byte{0, 0, 2, 200, 0, 1, 10, 0, 0})
	f.Add(uint8(120), uint16(60000), []byte{0, 0, 0, 0, 2, 30, 0, 0, 0, 1, 255, 0})
	f.Fuzz(func(t *testing.T, requests uint8, perMs uint16, ops []byte) {
		if requests == 0 || perMs == 0 || len(ops) > 512 {
			return
		}
		per := time.Duration(perMs) * time.Millisecond
		l := newLimiter(RateLimit{Requests: int(requests), Per: per})
		clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		l.now = func() time.Time { return clock }
		l.sleep = func(_ context.Context, d time.Duration) error {
			if d < 0 {
				t.Fatalf("asked to sleep %v", d)
			}
			clock = clock.Add(d) // the request waits its turn
			return nil
		}
		var sent []time.Time
		var notBefore time.Time // the latest Retry-After told
		for i := 0; i < len(ops); i++ {
			switch ops[i] % 3 {
			case 0: // a request, at the clock's time
				asked := clock
				if err := l.reserve(context.Background(), asked); err != nil {
					t.Fatalf("reserve: %v", err)
				}
				if clock.Before(notBefore) {
					t.Fatalf("a request went at %v, before the Retry-After's end %v", clock, notBefore)
				}
				// In its turn: it waited only for the quota's window or a
				// Retry-After.
				if clock.After(asked) {
					due := notBefore
					if n := len(sent); n > 0 && sent[n-1].After(due) {
						due = sent[n-1]
					}
					if n := len(sent); n >= int(requests) {
						if w := sent[n-int(requests)].Add(l.window); w.After(due) {
							due = w
						}
					}
					if clock.After(due) {
						t.Fatalf("a request asked at %v waited until %v; its turn was %v", asked, clock, due)
					}
				}
				sent = append(sent, clock)
			case 1: // time passes
				if i+1 < len(ops) {
					i++
					clock = clock.Add(time.Duration(ops[i]) * per / 64)
				}
			case 2: // the receiver answers 429 with a Retry-After
				if i+1 < len(ops) {
					i++
					d := time.Duration(ops[i]) * 10 * time.Millisecond
					l.throttled(d)
					if d <= 0 {
						d = time.Second
					}
					if end := clock.Add(d); end.After(notBefore) {
						notBefore = end
					}
				}
			}
		}
		for i := int(requests); i < len(sent); i++ {
			if got := sent[i].Sub(sent[i-int(requests)]); got < per {
				t.Fatalf("requests %d and %d went %v apart: %d requests in a window of %v, past the quota of %d", i-int(requests), i, got, int(requests)+1, per, requests)
			}
		}
	})
}
