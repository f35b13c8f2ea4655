package badgerstore

import (
	"context"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// TestRememberedClaimIsLocked stages the interleaving the key locks exist
// for: a batch commit has taken a claim from memory, and a takeover of the
// same key arrives before the commit is written. The takeover must wait
// for the commit and then find the key committed; were it let through, it
// would take over a claim whose commit then goes through all the same.
// The takeover is a volatile claim: volatile claims have rounds of their
// own, so it is the key's lock, not the commit's round, that holds it.
func TestRememberedClaimIsLocked(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	clock.Set(time.Unix(1e9, 0))
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := New(db, Options{Options: ledger.Options{Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	k := dedupe.Key{7, 7}
	a := l.BeginBatch(ctx, []ledger.BeginRequest{{Key: k, Options: ledger.BeginOptions{Owner: "a", Lease: time.Second}}})[0]
	if a.Err != nil || a.Claim.Status != ledger.StatusNew {
		t.Fatalf("claim: %v, %v", a.Claim.Status, a.Err)
	}
	clock.Advance(2 * time.Second) // a's lease runs out: a takeover may come

	type begun struct {
		c   ledger.Claim
		err error
	}
	takeover := make(chan begun, 1)
	blocked := make(chan struct{})
	l.st.testBlocked = func(got dedupe.Key) {
		if got == k {
			close(blocked)
		}
	}
	l.testRemembered = func(dedupe.Key) {
		l.testRemembered = nil
		go func() {
			c, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: "b", Lease: time.Second, Volatile: true})
			takeover <- begun{c, err}
		}()
		select {
		case <-blocked: // the takeover waits for this commit
		case b := <-takeover:
			t.Errorf("the takeover got %v (%v) while the commit held the key", b.c.Status, b.err)
			takeover <- b
		case <-time.After(10 * time.Second):
			t.Error("after 10s the takeover neither waited for the key nor ended")
		}
	}
	err = l.CommitBatch(ctx, []ledger.CommitRequest{{Key: k, Token: a.Claim.Lease.Token}})[0]
	b := <-takeover
	switch {
	case b.err != nil:
		t.Fatalf("takeover: %v", b.err)
	case err == nil && b.c.Status != ledger.StatusCommitted:
		t.Errorf("the commit of a went through, and the takeover got %v (token %d): the commit was not fenced", b.c.Status, b.c.Lease.Token)
	case err != nil:
		t.Errorf("commit: %v; the takeover got %v", err, b.c.Status)
	}
}

// TestMixedRound runs claims and commits of one key in one round, as the
// shared rounds do when callers of both kinds queue together: each request
// sees what the one before it on the same key left, in request order, and
// a commit with a token that is not the claim's fails alone.
func TestMixedRound(t *testing.T) {
	db, err := badger.Open(badger.DefaultOptions(t.TempDir()).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := New(db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	k, other := dedupe.Key{9, 1}, dedupe.Key{9, 2}
	first := l.round(ctx, []roundReq{{key: k, opts: ledger.BeginOptions{Owner: "a", Lease: time.Minute}}})[0]
	if first.err != nil || first.claim.Status != ledger.StatusNew {
		t.Fatalf("claim: %v, %v", first.claim.Status, first.err)
	}
	rs := l.round(ctx, []roundReq{
		{key: k, opts: ledger.BeginOptions{Owner: "b", Lease: time.Minute}}, // a duplicate while a holds it
		{commit: true, key: k, token: first.claim.Lease.Token, result: ledger.Result{DownstreamID: "sent"}},
		{key: k, opts: ledger.BeginOptions{Owner: "c", Lease: time.Minute}}, // after the commit
		{key: other, opts: ledger.BeginOptions{Owner: "d", Lease: time.Minute, Volatile: true}},
		{commit: true, key: other, token: 12345}, // not d's token
	})
	if rs[0].err != nil || rs[0].claim.Status != ledger.StatusHeld {
		t.Errorf("claim before the commit: %v, %v; want held", rs[0].claim.Status, rs[0].err)
	}
	if rs[1].err != nil {
		t.Errorf("commit: %v", rs[1].err)
	}
	if rs[2].err != nil || rs[2].claim.Status != ledger.StatusCommitted || rs[2].claim.Record.Result.DownstreamID != "sent" {
		t.Errorf("claim after the commit: %v %+v, %v; want committed with its result", rs[2].claim.Status, rs[2].claim.Record.Result, rs[2].err)
	}
	if rs[3].err != nil || rs[3].claim.Status != ledger.StatusNew {
		t.Errorf("volatile claim: %v, %v", rs[3].claim.Status, rs[3].err)
	}
	if rs[4].err == nil {
		t.Error("a commit with another token: no error")
	}
	rec, err := l.Get(ctx, k)
	if err != nil || rec.State != ledger.StateCommitted {
		t.Errorf("record after the round: %v, %v; want committed", rec.State, err)
	}
	if rec, err := l.Get(ctx, other); err != nil || rec.State != ledger.StatePending || rec.Owner != "d" {
		t.Errorf("other key after the round: %v %q, %v; want d's pending claim", rec.State, rec.Owner, err)
	}
}
