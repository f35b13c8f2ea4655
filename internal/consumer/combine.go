package consumer

import (
	"context"
	"sync"

	"github.com/oncegate/oncegate/internal/ledger"
)

// A combiner merges the calls its callers make at the same time into one:
// a caller that finds no call under way makes its own at once; callers that
// arrive meanwhile queue, and when it ends, the first of them makes one
// call for the whole queue and hands each caller its results. So workers
// that each take one trigger at a time (a model step's) claim and commit in
// one ledger write per round, as a batched gate's single worker does,
// without waiting for one another's model calls.
type combiner[Q, R any] struct {
	do func(ctx context.Context, qs []Q) []R

	mu    sync.Mutex
	busy  bool
	queue []*combined[Q, R]
}

// combined is one caller's part of a combined call.
type combined[Q, R any] struct {
	qs    []Q
	rs    []R
	done  chan struct{} // closed when rs is set, or when the caller leads
	lead  bool          // the caller makes the call for batch
	batch []*combined[Q, R]
}

// run returns what do returns for qs, made in one call with whatever other
// callers queue meanwhile.
func (c *combiner[Q, R]) run(ctx context.Context, qs []Q) []R {
	op := &combined[Q, R]{qs: qs}
	c.mu.Lock()
	if c.busy {
		op.done = make(chan struct{})
		c.queue = append(c.queue, op)
		c.mu.Unlock()
		<-op.done
		if !op.lead {
			return op.rs
		}
	} else {
		c.busy = true
		c.mu.Unlock()
		op.batch = []*combined[Q, R]{op}
	}
	c.call(ctx, op)
	c.mu.Lock()
	next := c.queue
	c.queue = nil
	c.busy = len(next) > 0
	c.mu.Unlock()
	if len(next) > 0 {
		next[0].lead, next[0].batch = true, next
		close(next[0].done)
	}
	return op.rs
}

// call makes one call for the batch lead leads, and hands out the results.
func (c *combiner[Q, R]) call(ctx context.Context, lead *combined[Q, R]) {
	if len(lead.batch) == 1 {
		lead.rs = c.do(ctx, lead.qs)
		return
	}
	n := 0
	for _, op := range lead.batch {
		n += len(op.qs)
	}
	qs := make([]Q, 0, n)
	for _, op := range lead.batch {
		qs = append(qs, op.qs...)
	}
	rs := c.do(ctx, qs)
	for _, op := range lead.batch {
		op.rs, rs = rs[:len(op.qs):len(op.qs)], rs[len(op.qs):]
		if op != lead {
			close(op.done)
		}
	}
}

// ledgerCalls are a gate's claims and commits: made as they come, or
// combined across its workers.
type ledgerCalls struct {
	begin  *combiner[ledger.BeginRequest, ledger.BeginResult]
	commit *combiner[ledger.CommitRequest, error]
}

// combine makes the gate's claims and commits combined across its workers,
// where the ledger writes a batch at once; a ledger that does not (one
// write per key, whoever asks) gains nothing from it.
func (g *gate) combine() {
	if _, ok := g.ledger.(ledger.Batcher); !ok {
		return
	}
	l := g.ledger
	g.calls.begin = &combiner[ledger.BeginRequest, ledger.BeginResult]{
		do: func(ctx context.Context, qs []ledger.BeginRequest) []ledger.BeginResult {
			return ledger.BeginAll(ctx, l, qs)
		},
	}
	g.calls.commit = &combiner[ledger.CommitRequest, error]{
		do: func(ctx context.Context, qs []ledger.CommitRequest) []error { return ledger.CommitAll(ctx, l, qs) },
	}
}

// beginAll claims the keys of reqs.
func (g *gate) beginAll(ctx context.Context, reqs []ledger.BeginRequest) []ledger.BeginResult {
	if g.calls.begin != nil {
		return g.calls.begin.run(ctx, reqs)
	}
	return ledger.BeginAll(ctx, g.ledger, reqs)
}

// commitAll commits reqs.
func (g *gate) commitAll(ctx context.Context, reqs []ledger.CommitRequest) []error {
	if g.calls.commit != nil {
		return g.calls.commit.run(ctx, reqs)
	}
	return ledger.CommitAll(ctx, g.ledger, reqs)
}
