package history

import (
	"context"
	"errors"
	"iter"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// ErrOutage is returned by every write of an Outage ledger while an outage
// is on.
var ErrOutage = errors.New("history: the ledger refuses writes (simulated outage)")

// Outage is a ledger.Ledger that refuses every write (Begin, Extend,
// Note, Commit, Fail, and the batches) with ErrOutage while an outage is on,
// without reaching the ledger it wraps; reads (Get, Pending) still work, as
// on a store whose disk is full. NewOutage returns an *OutageBatcher when the
// wrapped ledger is a ledger.Batcher.
//
// An Outage is safe for concurrent use by multiple goroutines.
type Outage struct {
	l     ledger.Ledger
	now   func() time.Time
	until atomic.Int64 // unix ns; the outage is on before it
}

// OutageBatcher is an Outage of a ledger that is a ledger.Batcher.
type OutageBatcher struct {
	*Outage
	b ledger.Batcher
}

var (
	_ ledger.Ledger  = (*Outage)(nil)
	_ ledger.Batcher = (*OutageBatcher)(nil)
)

// NewOutage returns l behind an outage switch, with no outage on, and the
// switch: start(d) makes the ledger refuse writes for d from then. now reads
// the clock; nil means time.Now. The ledger is an *OutageBatcher if l is a
// ledger.Batcher, else an *Outage.
func NewOutage(l ledger.Ledger, now func() time.Time) (_ ledger.Ledger, start func(d time.Duration)) {
	if now == nil {
		now = time.Now
	}
	o := &Outage{l: l, now: now}
	if b, ok := l.(ledger.Batcher); ok {
		return &OutageBatcher{Outage: o, b: b}, o.Start
	}
	return o, o.Start
}

// Start makes the ledger refuse writes for d from now.
func (o *Outage) Start(d time.Duration) { o.until.Store(o.now().Add(d).UnixNano()) }

func (o *Outage) on() bool { return o.now().UnixNano() < o.until.Load() }

// Begin implements ledger.Ledger.
func (o *Outage) Begin(ctx context.Context, key dedupe.Key, opts ledger.BeginOptions) (ledger.Claim, error) {
	if o.on() {
		return ledger.Claim{}, ErrOutage
	}
	return o.l.Begin(ctx, key, opts)
}

// Extend implements ledger.Ledger.
func (o *Outage) Extend(ctx context.Context, key dedupe.Key, token uint64, d time.Duration) (ledger.Lease, error) {
	if o.on() {
		return ledger.Lease{}, ErrOutage
	}
	return o.l.Extend(ctx, key, token, d)
}

// Note implements ledger.Ledger.
func (o *Outage) Note(ctx context.Context, key dedupe.Key, token uint64, note []byte, d time.Duration) (ledger.Lease, error) {
	if o.on() {
		return ledger.Lease{}, ErrOutage
	}
	return o.l.Note(ctx, key, token, note, d)
}

// Commit implements ledger.Ledger.
func (o *Outage) Commit(ctx context.Context, key dedupe.Key, token uint64, result ledger.Result) error {
	if o.on() {
		return ErrOutage
	}
	return o.l.Commit(ctx, key, token, result)
}

// Fail implements ledger.Ledger.
func (o *Outage) Fail(ctx context.Context, key dedupe.Key, token uint64, reason string) error {
	if o.on() {
		return ErrOutage
	}
	return o.l.Fail(ctx, key, token, reason)
}

// Clear implements ledger.Ledger.
func (o *Outage) Clear(ctx context.Context, key dedupe.Key, token uint64, note string) error {
	if o.on() {
		return ErrOutage
	}
	return o.l.Clear(ctx, key, token, note)
}

// Get implements ledger.Ledger.
func (o *Outage) Get(ctx context.Context, key dedupe.Key) (ledger.Record, error) {
	return o.l.Get(ctx, key)
}

// Pending implements ledger.Ledger.
func (o *Outage) Pending(ctx context.Context) iter.Seq2[ledger.Record, error] {
	return o.l.Pending(ctx)
}

// Close implements ledger.Ledger.
func (o *Outage) Close() error { return o.l.Close() }

// BeginBatch implements ledger.Batcher.
func (o *OutageBatcher) BeginBatch(ctx context.Context, reqs []ledger.BeginRequest) []ledger.BeginResult {
	if o.on() {
		out := make([]ledger.BeginResult, len(reqs))
		for i := range out {
			out[i].Err = ErrOutage
		}
		return out
	}
	return o.b.BeginBatch(ctx, reqs)
}

// CommitBatch implements ledger.Batcher.
func (o *OutageBatcher) CommitBatch(ctx context.Context, reqs []ledger.CommitRequest) []error {
	if o.on() {
		out := make([]error, len(reqs))
		for i := range out {
			out[i] = ErrOutage
		}
		return out
	}
	return o.b.CommitBatch(ctx, reqs)
}
