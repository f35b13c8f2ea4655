// Package combine merges calls that callers make at the same time into one.
//
// A caller that finds no call under way makes its own at once; callers that
// arrive meanwhile queue, and when the call ends, the first of them makes
// one call for the whole queue and hands each caller its results. A store
// that writes a batch in one transaction and one fsync (the Badger ledger)
// so writes one batch per round for any number of concurrent callers, and a
// caller alone pays nothing for it.
//
// Under a steady load the callers a call releases come back with their next
// requests at once (a claim's caller commits, a commit's caller claims the
// next key). A round that started the moment the last one ended would go
// without them, and the callers would split into two halves taking turns:
// twice the calls, each for half of them. So the caller that leads a round
// first waits, briefly, for as many callers as the last round served: at
// most a quarter of the last call's duration (gatherMax at most), and not
// at all when the last round served one caller. A round that waits in vain
// expects no more than it got, so a load that falls off costs one short
// wait, not one per round.
package combine

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// A Combiner merges concurrent calls of its function. Its zero value is not
// usable: make one with New.
type Combiner[Q, R any] struct {
	do func(ctx context.Context, qs []Q) []R

	maxRounds, spill int // see Overlap; 1 and 0 by default

	mu     sync.Mutex
	rounds int // rounds under way
	queue  []*op[Q, R]
	expect int           // the callers the last round served, and those queued at its end
	took   time.Duration // how long the last call took
}

// gatherMax bounds a leader's wait for the callers of the last round.
const gatherMax = 100 * time.Microsecond

// New returns a Combiner of do, which must return one result per request,
// in the order of the requests. do is called with the context of the
// caller that leads the round.
func New[Q, R any](do func(ctx context.Context, qs []Q) []R) *Combiner[Q, R] {
	return &Combiner[Q, R]{do: do, maxRounds: 1}
}

// Overlap lets up to maxRounds rounds be under way at once, for a store whose
// writes of one round do not wait for another's (a stream's publishes):
// while a round is under way, a caller that finds spill callers queued (itself
// included) does not wait for it to end, but leads a new round at once with
// them. A load whose queue stays under spill is served as without Overlap,
// one round at a time; the rounds under way grow with the load. Overlap must
// be called before the first Run.
func (c *Combiner[Q, R]) Overlap(maxRounds, spill int) *Combiner[Q, R] {
	c.maxRounds, c.spill = max(maxRounds, 1), max(spill, 1)
	return c
}

// op is one caller's part of a combined call.
type op[Q, R any] struct {
	qs   []Q
	rs   []R
	done chan struct{} // closed when rs is set, or when the caller leads
	lead bool          // the caller makes the next call
}

// Run returns what do returns for qs, made in one call with the requests of
// whatever other callers queue meanwhile.
func (c *Combiner[Q, R]) Run(ctx context.Context, qs []Q) []R {
	o := &op[Q, R]{qs: qs}
	c.mu.Lock()
	switch {
	case c.rounds == 0:
		c.rounds = 1
		c.gather()
	case c.rounds < c.maxRounds && len(c.queue)+1 >= c.spill:
		c.rounds++ // a round of its own at once, with those queued
	default:
		o.done = make(chan struct{})
		c.queue = append(c.queue, o)
		c.mu.Unlock()
		<-o.done
		if !o.lead {
			return o.rs
		}
		c.mu.Lock()
		c.gather()
	}
	batch := append([]*op[Q, R]{o}, c.queue...)
	c.queue = nil
	c.expect = len(batch)
	c.mu.Unlock()
	start := time.Now()
	c.call(ctx, batch)
	took := time.Since(start)
	c.mu.Lock()
	c.expect += len(c.queue)
	c.took = took
	if len(c.queue) == 0 {
		c.rounds--
		c.mu.Unlock()
		return o.rs
	}
	next := c.queue[0]
	c.queue = c.queue[1:]
	c.mu.Unlock()
	next.lead = true
	close(next.done)
	return o.rs
}

// gather waits, with c.mu held, until the round has as many callers as the
// last one left it to expect (c.expect, the leader included), or for a
// quarter of the last call's duration (at most gatherMax), whichever comes
// first. It yields while it waits, so that the callers it waits for run.
func (c *Combiner[Q, R]) gather() {
	if c.expect <= 1 || len(c.queue)+1 >= c.expect {
		return
	}
	deadline := time.Now().Add(min(c.took/4, gatherMax))
	for len(c.queue)+1 < c.expect && time.Now().Before(deadline) {
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
	}
}

// call makes one call for batch, whose first op is the leader's, and hands
// out the results.
func (c *Combiner[Q, R]) call(ctx context.Context, batch []*op[Q, R]) {
	lead := batch[0]
	if len(batch) == 1 {
		lead.rs = c.do(ctx, lead.qs)
		return
	}
	n := 0
	for _, o := range batch {
		n += len(o.qs)
	}
	qs := make([]Q, 0, n)
	for _, o := range batch {
		qs = append(qs, o.qs...)
	}
	rs := c.do(ctx, qs)
	for _, o := range batch {
		o.rs, rs = rs[:len(o.qs):len(o.qs)], rs[len(o.qs):]
		if o != lead {
			close(o.done)
		}
	}
}
