package jskvstore

import (
	"context"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// TestBeginConfirmsAStaleFailure: a Begin whose first read comes from a
// replica that has not caught up with a Clear (an operator's redrive)
// finds the failed record the Clear replaced. A failure is not final, so
// it must not answer "failed" on that read: the cluster soak (seed
// 754056642) caught a redriven trigger answered "failed t1" 4 ms after the
// Clear of t1 had returned.
func TestBeginConfirmsAStaleFailure(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := New(ctx, js, Options{Bucket: "stale-failure"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	k := dedupe.Key{1, 2, 3}
	opts := ledger.BeginOptions{Owner: "first", Lease: time.Minute}
	c, err := l.Begin(ctx, k, opts)
	if err != nil || c.Status != ledger.StatusNew {
		t.Fatalf("Begin: %+v, %v", c, err)
	}
	if err := l.Fail(ctx, k, c.Lease.Token, "permanent_effect: refused"); err != nil {
		t.Fatal(err)
	}
	failed, rev, err := l.readAny(ctx, k)
	if err != nil || failed == nil || failed.State != ledger.StateFailed {
		t.Fatalf("read after Fail: %+v, %v", failed, err)
	}
	if err := l.Clear(ctx, k, c.Lease.Token, "redrive"); err != nil {
		t.Fatal(err)
	}
	// A replica behind the leader still has the failed record.
	l.testReadAny = func(context.Context, dedupe.Key) (*ledger.Record, uint64, error) { return failed, rev, nil }
	again, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: "redriven", Lease: time.Minute})
	if err != nil || again.Status != ledger.StatusNew {
		t.Fatalf("Begin after the Clear, on a replica's stale read of the failure: %v (%+v), %v; want new: the Clear made the key new again", again.Status, again, err)
	}
}
