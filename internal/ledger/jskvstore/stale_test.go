package jskvstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgerproto"
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

// TestCommitThatLandedAsAConflict: the cluster soak (seed 997424676) saw a
// Commit answered ErrStaleToken, "committed with token 1; caller has 1",
// for a record its own write had committed: in a leader change the fast
// path's compare-and-set landed and came back refused for its revision, and
// the plain path then read the record it had written. Here the landed write
// is made by hand at the revision the fast path remembers, so the fast
// path's own write is refused just so. That Commit is done, not stale; a
// second Commit call, which writes nothing, is still refused, and so is one
// whose result is not the stored one.
func TestCommitThatLandedAsAConflict(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := New(ctx, js, Options{Bucket: "landed-commit"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	res := ledger.Result{DownstreamID: "INC-1", Response: []byte(`{"ok":true}`)}
	// land claims k and writes by hand, at the revision the claim's
	// remembered write got, the record settle makes of it: what the
	// holder's own write stores when it lands.
	land := func(k dedupe.Key, settle func(cur *ledger.Record, token uint64) (ledger.Record, error)) uint64 {
		t.Helper()
		c, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: "holder", Lease: time.Minute})
		if err != nil || c.Status != ledger.StatusNew {
			t.Fatalf("Begin: %+v, %v", c, err)
		}
		h, ok := l.holds.get(k, c.Lease.Token)
		if !ok {
			t.Fatal("the claim is not remembered: the fast path would not write")
		}
		rec, err := settle(&h.rec, c.Lease.Token)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.kv.Update(ctx, k.String(), ledgerproto.Append(nil, &rec), h.rev); err != nil {
			t.Fatal(err)
		}
		return c.Lease.Token
	}
	commit := func(cur *ledger.Record, token uint64) (ledger.Record, error) {
		return ledgerproto.Committed(&l.opts.Options, cur.Key, cur, token, res, l.opts.Clock.Now())
	}

	k := dedupe.Key{7, 1}
	token := land(k, commit)
	if err := l.Commit(ctx, k, token, res); err != nil {
		t.Errorf("Commit whose write landed and came back refused: %v; want nil", err)
	}
	if err := l.Commit(ctx, k, token, res); !errors.Is(err, ledger.ErrStaleToken) {
		t.Errorf("a second Commit: %v; want ErrStaleToken", err)
	}

	k2 := dedupe.Key{7, 2}
	token = land(k2, commit)
	other := ledger.Result{DownstreamID: "INC-2"}
	if err := l.CommitBatch(ctx, []ledger.CommitRequest{{Key: k2, Token: token, Result: other}})[0]; !errors.Is(err, ledger.ErrStaleToken) {
		t.Errorf("Commit of another result over the landed one: %v; want ErrStaleToken", err)
	}
	if err := l.CommitBatch(ctx, []ledger.CommitRequest{{Key: k2, Token: token, Result: res}})[0]; !errors.Is(err, ledger.ErrStaleToken) {
		t.Errorf("CommitBatch after its holder's claim was forgotten: %v; want ErrStaleToken (it wrote nothing)", err)
	}

	// A Fail, the same way.
	k3 := dedupe.Key{7, 3}
	token = land(k3, func(cur *ledger.Record, token uint64) (ledger.Record, error) {
		return ledgerproto.Failed(&l.opts.Options, cur.Key, cur, token, "permanent_effect: refused", l.opts.Clock.Now())
	})
	if err := l.Fail(ctx, k3, token, "permanent_effect: refused"); err != nil {
		t.Errorf("Fail whose write landed and came back refused: %v; want nil", err)
	}
	if err := l.Fail(ctx, k3, token, "permanent_effect: refused"); !errors.Is(err, ledger.ErrStaleToken) {
		t.Errorf("a second Fail: %v; want ErrStaleToken", err)
	}
}
