package sink_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/receiver"
	"github.com/oncegate/oncegate/internal/sink"
)

const pdKey = "R0123456789abcdef0123456789abcde"

// pagerDuty serves a PagerDuty receiver and returns a rate-limited
// pagerduty sink for it (rate nil: no limit).
func pagerDuty(t *testing.T, rate sink.RateLimit) (*receiver.PagerDuty, *sink.HTTP) {
	t.Helper()
	pd := receiver.NewPagerDuty(pdKey)
	srv := httptest.NewServer(pd)
	t.Cleanup(srv.Close)
	s, err := sink.NewHTTP(sink.HTTPOptions{
		URL: srv.URL + "/v2/enqueue", BodyFields: map[string]string{"routing_key": pdKey},
		RateLimit: rate, Coalesce: sink.CoalescePagerDuty,
		Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return pd, s
}

func trigger(dedup string) []byte {
	return fmt.Appendf(nil, `{"event_action":"trigger","dedup_key":%q,"payload":{"summary":"s","source":"db","severity":"critical"}}`, dedup)
}

func effectKey(i int) string { return fmt.Sprintf("%032x", i+1) }

// TestRateLimitWithinQuota: a storm of events to a receiver with a quota
// (PagerDuty's, scaled down in time) through a sink with the same rate
// limit: every event is accepted, none refused with a 429; without the
// limit, the receiver refuses some.
func TestRateLimitWithinQuota(t *testing.T) {
	const n, quota, per = 30, 10, 400 * time.Millisecond
	for _, tt := range []struct {
		name      string
		rate      sink.RateLimit
		throttled bool
	}{
		{"limited", sink.RateLimit{Requests: quota, Per: per}, false},
		{"unlimited", sink.RateLimit{}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pd, s := pagerDuty(t, tt.rate)
			pd.Limit(quota, per)
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					_, errs[i] = s.Deliver(context.Background(), sink.Effect{Key: effectKey(i), Body: trigger(fmt.Sprint("storm-", i))})
				})
			}
			wg.Wait()
			if tt.throttled {
				if pd.Throttled() == 0 {
					t.Errorf("without a rate limit, the receiver refused no request; the test's quota does not bind")
				}
				return
			}
			for i, err := range errs {
				if err != nil {
					t.Errorf("Deliver %d: %v", i, err)
				}
			}
			if st := pd.Stats(); st.Triggers != n || st.Throttled != 0 {
				t.Errorf("PagerDuty %+v; want %d triggers, none refused for the quota", st, n)
			}
		})
	}
}

// TestRateLimitHonoursRetryAfter: a 429 with Retry-After pauses the
// sink's requests until then, and the request is sent again without
// spending an attempt.
func TestRateLimitHonoursRetryAfter(t *testing.T) {
	pd, s := pagerDuty(t, sink.RateLimit{Requests: 100, Per: time.Second})
	pd.Fail(1, http.StatusTooManyRequests, time.Second)
	t0 := time.Now()
	res, err := s.Deliver(context.Background(), sink.Effect{Key: effectKey(0), Body: trigger("ra")})
	if err != nil {
		t.Fatal(err)
	}
	events := pd.Events()
	if len(events) != 1 || res.Attempts != 1 {
		t.Fatalf("%d events, %d attempts; want the event accepted on the one attempt the 429 did not spend", len(events), res.Attempts)
	}
	if waited := events[0].At.Sub(t0); waited < time.Second {
		t.Errorf("the event was sent again %v after the 429; want after its Retry-After (1s)", waited)
	}
}

// TestRateLimitCoalesces: trigger events of one dedup_key waiting for
// room in the quota collapse into one request, as PagerDuty would collapse
// them into one alert; each Deliver reports it done (a duplicate); an
// event of another action with the key is not collapsed.
func TestRateLimitCoalesces(t *testing.T) {
	pd, s := pagerDuty(t, sink.RateLimit{Requests: 1, Per: time.Hour})
	release := make(chan struct{})
	sink.SetLimitSleep(s, func(ctx context.Context, d time.Duration) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	ctx := context.Background()
	if _, err := s.Deliver(ctx, sink.Effect{Key: effectKey(0), Body: trigger("first")}); err != nil {
		t.Fatal(err) // the quota's first request goes at once
	}
	const n = 4
	var wg sync.WaitGroup
	results := make([]sink.Result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			results[i], errs[i] = s.Deliver(ctx, sink.Effect{Key: effectKey(i + 1), Body: trigger("same")})
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for sink.Joined(s, "same") != n-1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests joined the one waiting; want %d", sink.Joined(s, "same"), n-1)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	dups := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Deliver %d: %v", i, errs[i])
		}
		if results[i].Duplicate {
			dups++
		}
	}
	if st := pd.Stats(); st.Triggers != 2 || dups != n-1 {
		t.Errorf("PagerDuty %+v, %d duplicates; want 2 triggers (the first, and one for the %d waiting with one dedup_key), %d duplicates", st, dups, n, n-1)
	}
	if got := sink.CoalescePagerDuty([]byte(`{"event_action":"resolve","dedup_key":"same"}`)); got != "" {
		t.Errorf("CoalescePagerDuty(resolve) = %q; want \"\" (only triggers collapse)", got)
	}
}

// TestFenceAfterTheWait: a delivery that waits for room in the quota calls
// its fence once the room comes, right before it sends: a fence that says
// the caller's hold ran out meanwhile (a lease, a process paused while it
// waited) stops it with ErrFenced and nothing reaches the receiver; a
// fence that holds lets it go.
func TestFenceAfterTheWait(t *testing.T) {
	pd, s := pagerDuty(t, sink.RateLimit{Requests: 1, Per: 300 * time.Millisecond})
	ctx := context.Background()
	start := time.Now() // before the first request takes the quota's room
	if _, err := s.Deliver(ctx, sink.Effect{Key: effectKey(0), Body: trigger("a")}); err != nil {
		t.Fatal(err)
	}
	// The quota is used: the next delivery waits for room, which comes
	// no sooner than 300ms after the first request. Its fence records
	// when it was asked, and refuses.
	var asked time.Duration
	calls := 0
	_, err := s.Deliver(ctx, sink.Effect{Key: effectKey(1), Body: trigger("b"), Fence: func() error {
		calls++
		asked = time.Since(start)
		return fmt.Errorf("the lease ran out")
	}})
	if !errors.Is(err, sink.ErrFenced) || errors.Is(err, sink.ErrPermanent) {
		t.Fatalf("Deliver with a refusing fence = %v; want ErrFenced, retryable", err)
	}
	if calls != 1 || asked < 300*time.Millisecond {
		t.Errorf("fence called %d times, %v after the first request; want once, after the wait for room (300ms)", calls, asked)
	}
	if got := len(pd.Events()); got != 1 {
		t.Errorf("%d events at the receiver; want 1: a fenced delivery sends nothing", got)
	}
	// A fence that holds: sent.
	if _, err := s.Deliver(ctx, sink.Effect{Key: effectKey(2), Body: trigger("c"), Fence: func() error { return nil }}); err != nil {
		t.Fatal(err)
	}
	if got := len(pd.Events()); got != 2 {
		t.Errorf("%d events at the receiver; want 2", got)
	}
}
