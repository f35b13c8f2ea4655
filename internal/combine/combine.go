// Package combine merges calls that callers make at the same time into one.
//
// A caller that finds no call under way makes its own at once; callers that
// arrive meanwhile queue, and when the call ends, the first of them makes
// one call for the whole queue and hands each caller its results. A store
// that writes a batch in one transaction and one fsync (the Badger ledger)
// so writes one batch per round for any number of concurrent callers, and a
// caller alone pays nothing for it.
package combine

import (
	"context"
	"sync"
)

// A Combiner merges concurrent calls of its function. Its zero value is not
// usable: make one with New.
type Combiner[Q, R any] struct {
	do func(ctx context.Context, qs []Q) []R

	mu    sync.Mutex
	busy  bool
	queue []*op[Q, R]
}

// New returns a Combiner of do, which must return one result per request,
// in the order of the requests. do is called with the context of the
// caller that leads the round.
func New[Q, R any](do func(ctx context.Context, qs []Q) []R) *Combiner[Q, R] {
	return &Combiner[Q, R]{do: do}
}

// op is one caller's part of a combined call.
type op[Q, R any] struct {
	qs    []Q
	rs    []R
	done  chan struct{} // closed when rs is set, or when the caller leads
	lead  bool          // the caller makes the call for batch
	batch []*op[Q, R]
}

// Run returns what do returns for qs, made in one call with the requests of
// whatever other callers queue meanwhile.
func (c *Combiner[Q, R]) Run(ctx context.Context, qs []Q) []R {
	o := &op[Q, R]{qs: qs}
	c.mu.Lock()
	if c.busy {
		o.done = make(chan struct{})
		c.queue = append(c.queue, o)
		c.mu.Unlock()
		<-o.done
		if !o.lead {
			return o.rs
		}
	} else {
		c.busy = true
		c.mu.Unlock()
		o.batch = []*op[Q, R]{o}
	}
	c.call(ctx, o)
	c.mu.Lock()
	next := c.queue
	c.queue = nil
	c.busy = len(next) > 0
	c.mu.Unlock()
	if len(next) > 0 {
		next[0].lead, next[0].batch = true, next
		close(next[0].done)
	}
	return o.rs
}

// call makes one call for the batch lead leads, and hands out the results.
func (c *Combiner[Q, R]) call(ctx context.Context, lead *op[Q, R]) {
	if len(lead.batch) == 1 {
		lead.rs = c.do(ctx, lead.qs)
		return
	}
	n := 0
	for _, o := range lead.batch {
		n += len(o.qs)
	}
	qs := make([]Q, 0, n)
	for _, o := range lead.batch {
		qs = append(qs, o.qs...)
	}
	rs := c.do(ctx, qs)
	for _, o := range lead.batch {
		o.rs, rs = rs[:len(o.qs):len(o.qs)], rs[len(o.qs):]
		if o != lead {
			close(o.done)
		}
	}
}
