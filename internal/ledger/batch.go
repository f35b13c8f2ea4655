package ledger

import (
	"context"

	"github.com/oncegate/oncegate/pkg/dedupe"
)

// A Batcher is a Ledger that can claim and commit many keys in one durable
// write: a consumer that fetches triggers in batches pays one sync per
// batch instead of one per trigger. Use [BeginAll] and [CommitAll], which
// fall back to one call per key for a Ledger that is not a Batcher.
type Batcher interface {
	// BeginBatch claims every key of reqs in one write; results are in
	// the order of reqs.
	BeginBatch(ctx context.Context, reqs []BeginRequest) []BeginResult
	// CommitBatch commits every request in one write, and returns each
	// one's error in order.
	CommitBatch(ctx context.Context, reqs []CommitRequest) []error
}

// BeginRequest is one claim of a batch.
type BeginRequest struct {
	Key     dedupe.Key   // the key to claim
	Options BeginOptions // as for Begin
}

// BeginResult is the outcome of one claim of a batch: what Begin would
// have returned.
type BeginResult struct {
	Claim Claim // Begin's claim, if Err is nil
	Err   error // Begin's error
}

// CommitRequest is one commit of a batch.
type CommitRequest struct {
	Key    dedupe.Key // the key to commit
	Token  uint64     // the caller's fencing token
	Result Result     // what the work produced
}

// BeginAll claims every key of reqs, in one write if l is a Batcher. A key
// that appears twice is claimed by the first request; the second sees it
// held. Results are in the order of reqs.
func BeginAll(ctx context.Context, l Ledger, reqs []BeginRequest) []BeginResult {
	if b, ok := l.(Batcher); ok {
		return b.BeginBatch(ctx, reqs)
	}
	out := make([]BeginResult, len(reqs))
	for i, r := range reqs {
		out[i].Claim, out[i].Err = l.Begin(ctx, r.Key, r.Options)
	}
	return out
}

// CommitAll commits every request, in one write if l is a Batcher, and
// returns each one's error in order.
func CommitAll(ctx context.Context, l Ledger, reqs []CommitRequest) []error {
	if b, ok := l.(Batcher); ok {
		return b.CommitBatch(ctx, reqs)
	}
	out := make([]error, len(reqs))
	for i, r := range reqs {
		out[i] = l.Commit(ctx, r.Key, r.Token, r.Result)
	}
	return out
}
