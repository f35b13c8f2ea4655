package combine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCombiner checks that callers arriving while a call is under way are
// served by one call for all of them, each with the results of its own
// requests, and that a caller alone is served at once.
func TestRun(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var calls [][]int
	c := New(func(_ context.Context, qs []int) []int {
		mu.Lock()
		calls = append(calls, append([]int(nil), qs...))
		first := len(calls) == 1
		mu.Unlock()
		if first {
			<-release // the others queue meanwhile
		}
		return negated(qs)
	})
	ctx := context.Background()

	const callers = 20
	var wg sync.WaitGroup
	errs := make(chan string, callers+1)
	check := func(qs []int) {
		rs := c.Run(ctx, qs)
		if len(rs) != len(qs) {
			errs <- "wrong number of results"
			return
		}
		for i := range qs {
			if rs[i] != -qs[i] {
				errs <- "a result of another caller's request"
			}
		}
	}
	wg.Go(func() { check([]int{0}) })
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(calls) == 1 })
	for i := 1; i <= callers; i++ {
		wg.Go(func() { check([]int{2 * i, 2*i + 1}) })
	}
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.queue) == callers })
	close(release)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if len(calls) != 2 || len(calls[1]) != 2*callers {
		t.Errorf("calls %v; want the first alone, then one call for the %d callers that queued", calls, callers)
	}

	// Alone, a caller makes its own call at once.
	if rs := c.Run(ctx, []int{7}); len(rs) != 1 || rs[0] != -7 || len(calls) != 3 {
		t.Errorf("alone: results %v after %d calls; want [-7] from a third call", rs, len(calls))
	}
}

// negated is what the tests' calls answer: each request negated.
func negated(qs []int) []int {
	rs := make([]int, len(qs))
	for i, q := range qs {
		rs[i] = -q
	}
	return rs
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out after 10s waiting for the condition")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCallersComeBack checks that callers a round releases, and that come
// back at once with their next requests, are served together by the next
// round: under a steady load the callers do not split into two halves
// taking turns, which made twice the calls (each a sync, in the Badger
// ledger) for the same work.
func TestCallersComeBack(t *testing.T) {
	var calls atomic.Int64
	c := New(func(_ context.Context, qs []int) []int {
		calls.Add(1)
		time.Sleep(time.Millisecond) // a sync
		return make([]int, len(qs))
	})
	const callers, each = 8, 50
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				c.Run(context.Background(), []int{1})
			}
		})
	}
	wg.Wait()
	// Two halves taking turns make two calls per request of each caller;
	// one round for all of them makes one. Allow for the rounds a busy
	// machine splits.
	if n := calls.Load(); n > each*3/2 {
		t.Errorf("%d calls for %d callers making %d requests each; want at most %d (about %d: one round for all of them per request)", n, callers, each, each*3/2, each)
	}
}

// TestOverlap checks that with Overlap, callers that queue behind a round
// under way wait for it while they are fewer than the spill, and that the
// caller that makes them spill starts a round of its own with them at once,
// up to the rounds allowed; then the others queue again.
func TestOverlap(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var calls [][]int
	c := New(func(_ context.Context, qs []int) []int {
		mu.Lock()
		calls = append(calls, append([]int(nil), qs...))
		mu.Unlock()
		<-release
		return negated(qs)
	}).Overlap(2, 4)
	ctx := context.Background()
	ncalls := func() int { mu.Lock(); defer mu.Unlock(); return len(calls) }
	queued := func() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.queue) }

	var wg sync.WaitGroup
	bad := make(chan string, 16)
	run := func(q int) {
		wg.Go(func() {
			if rs := c.Run(ctx, []int{q}); len(rs) != 1 || rs[0] != -q {
				bad <- "a wrong result"
			}
		})
	}
	run(0)
	waitFor(t, func() bool { return ncalls() == 1 })
	for q := 1; q <= 3; q++ { // fewer than the spill: they queue
		run(q)
	}
	waitFor(t, func() bool { return queued() == 3 })
	if n := ncalls(); n != 1 {
		t.Fatalf("%d calls with 3 queued below a spill of 4; want 1", n)
	}
	run(4) // the fourth spills: a second round, at once, with the three
	waitFor(t, func() bool { return ncalls() == 2 })
	if q := queued(); q != 0 {
		t.Errorf("%d queued after the spill; want 0", q)
	}
	for q := 5; q <= 9; q++ { // two rounds under way, the most allowed: they queue
		run(q)
	}
	waitFor(t, func() bool { return queued() == 5 })
	if n := ncalls(); n != 2 {
		t.Errorf("%d calls with two rounds under way at most; want 2", n)
	}
	close(release)
	wg.Wait()
	close(bad)
	for b := range bad {
		t.Error(b)
	}
	mu.Lock()
	defer mu.Unlock()
	// The two rounds under way, ending, each hand the queue on: the five
	// queued behind them are served by one round or two.
	rest := 0
	for _, call := range calls[min(2, len(calls)):] {
		rest += len(call)
	}
	if len(calls) < 3 || len(calls) > 4 || len(calls[1]) != 4 || rest != 5 {
		t.Errorf("calls %v; want [0], then the four that spilled, then one or two rounds for the five queued behind them", calls)
	}
}
