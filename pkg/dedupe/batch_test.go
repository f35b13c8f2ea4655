package dedupe_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oncegate/oncegate/pkg/dedupe"
)

// TestBatchMatchesOneByOne runs the same claims and commits through the
// Badger ledger's batch path and through one call per key on a second
// ledger, and compares every outcome.
func TestBatchMatchesOneByOne(t *testing.T) {
	ctx := context.Background()
	batched := openTestLedger(t)
	single := openTestLedger(t)
	key := func(i byte) dedupe.Key { return dedupe.Key{i, 0xba} }
	opts := func(owner string) dedupe.BeginOptions {
		return dedupe.BeginOptions{Owner: owner, Lease: time.Minute}
	}
	// Key 1 committed before, key 2 held before; keys 3 and 4 new, key 3 twice in the batch.
	for _, l := range []dedupe.Ledger{batched, single} {
		c, err := l.Begin(ctx, key(1), opts("early"))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Commit(ctx, key(1), c.Lease.Token, dedupe.Result{DownstreamID: "done"}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Begin(ctx, key(2), opts("holder")); err != nil {
			t.Fatal(err)
		}
	}
	reqs := []dedupe.BeginRequest{
		{key(1), opts("a")}, {key(2), opts("b")}, {key(3), opts("c")}, {key(3), opts("d")}, {key(4), opts("e")},
		{key(5), dedupe.BeginOptions{Owner: "bad"}}, // no lease: an error for this request only
	}
	got := batched.BeginBatch(ctx, reqs)
	want := dedupe.BeginAll(ctx, dedupe.Ledger(struct{ dedupe.Ledger }{single}), reqs) // hide the Batcher
	for i := range reqs {
		if got[i].Claim.Status != want[i].Claim.Status || (got[i].Err == nil) != (want[i].Err == nil) {
			t.Errorf("request %d: batch %v (%v); one by one %v (%v)", i, got[i].Claim.Status, got[i].Err, want[i].Claim.Status, want[i].Err)
		}
	}
	if got[2].Claim.Status != dedupe.StatusNew || got[3].Claim.Status != dedupe.StatusHeld || got[3].Claim.Record.Owner != "c" {
		t.Errorf("a key twice in one batch: %v then %v (owner %q); want new, then held by the first", got[2].Claim.Status, got[3].Claim.Status, got[3].Claim.Record.Owner)
	}
	commits := []dedupe.CommitRequest{
		{key(3), got[2].Claim.Lease.Token, dedupe.Result{DownstreamID: "three"}},
		{key(4), got[4].Claim.Lease.Token + 1, dedupe.Result{}}, // a stale token
		{key(4), got[4].Claim.Lease.Token, dedupe.Result{DownstreamID: "four"}},
	}
	errs := batched.CommitBatch(ctx, commits)
	if errs[0] != nil || !errors.Is(errs[1], dedupe.ErrStaleToken) || errs[2] != nil {
		t.Errorf("CommitBatch errors %v; want nil, ErrStaleToken, nil", errs)
	}
	for _, k := range []dedupe.Key{key(3), key(4)} {
		if rec, err := batched.Get(ctx, k); err != nil || rec.State != dedupe.StateCommitted {
			t.Errorf("after CommitBatch, %v: %v %v", k, rec.State, err)
		}
	}
}

func openTestLedger(t *testing.T) *dedupe.BadgerLedger {
	t.Helper()
	db, err := dedupe.OpenBadger(t.TempDir(), dedupe.OpenBadgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := dedupe.NewBadgerLedger(db, dedupe.BadgerLedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		db.Close()
	})
	return l
}
