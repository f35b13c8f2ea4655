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
	l.testRemembered = func(dedupe.Key) {
		l.testRemembered = nil
		go func() {
			c, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: "b", Lease: time.Second})
			takeover <- begun{c, err}
		}()
		// With the lock, the takeover waits for this commit: give it the
		// time it would need to get through without.
		select {
		case b := <-takeover:
			takeover <- b
		case <-time.After(200 * time.Millisecond):
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
