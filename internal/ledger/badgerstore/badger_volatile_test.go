package badgerstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgerproto"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// openVolatileTest opens a ledger on a Badger directory, on clock.
func openVolatileTest(t *testing.T, dir string, clock ledger.Clock) (*badger.DB, *Ledger) {
	t.Helper()
	db, err := Open(dir, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(db, Options{Options: ledger.Options{Clock: clock}})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	return db, l
}

// volatileTest opens a ledger on a fresh directory, on a fake clock, and
// closes both when the test ends.
func volatileTest(t *testing.T) (*fakeClock, *badger.DB, *Ledger) {
	t.Helper()
	clock := newFakeClock()
	clock.Set(time.Unix(1e9, 0))
	db, l := openVolatileTest(t, t.TempDir(), clock)
	t.Cleanup(func() { db.Close() })
	t.Cleanup(func() { l.Close() })
	return clock, db, l
}

// inDB returns the state of k's record in db, or 0 if db holds none.
func inDB(t *testing.T, db *badger.DB, k dedupe.Key) ledger.State {
	t.Helper()
	var st ledger.State
	err := db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(badgerKey(k))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			rec, err := ledgerproto.Decode(k, v)
			st = rec.State
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func mustBegin(t *testing.T, l *Ledger, k dedupe.Key, opts ledger.BeginOptions, want ledger.Status) ledger.Claim {
	t.Helper()
	c, err := l.Begin(context.Background(), k, opts)
	if err != nil || c.Status != want {
		t.Fatalf("Begin(%v, %+v) = %v, %v; want %v", k, opts, c.Status, err, want)
	}
	return c
}

// TestVolatileClaim follows volatile claims through a ledger's life: they
// never reach the DB, yet hold, renew, list, fence and commit as durable
// ones do; a commit is durable; and after the process is gone an
// uncommitted volatile claim is gone with it, so its key is new again.
func TestVolatileClaim(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	clock.Set(time.Unix(1e9, 0))
	dir := t.TempDir()
	db, l := openVolatileTest(t, dir, clock)
	vol := ledger.BeginOptions{Owner: "a", Lease: time.Minute, Volatile: true}
	done, open := dedupe.Key{1}, dedupe.Key{2}

	a := mustBegin(t, l, done, vol, ledger.StatusNew)
	mustBegin(t, l, open, vol, ledger.StatusNew)
	mustBegin(t, l, done, ledger.BeginOptions{Owner: "b", Lease: time.Minute}, ledger.StatusHeld)
	if _, err := l.Extend(ctx, done, a.Lease.Token, 2*time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	// A failed write of the key leaves the claim as it was.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Extend(canceled, done, a.Lease.Token, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Extend with a canceled context: %v", err)
	}
	for _, k := range []dedupe.Key{done, open} {
		if st := inDB(t, db, k); st != 0 {
			t.Fatalf("a volatile claim of %v is in the DB, %v", k, st)
		}
	}
	rec, err := l.Get(ctx, done)
	if err != nil || rec.State != ledger.StatePending || rec.Token != a.Lease.Token || !rec.LeaseUntil.Equal(clock.Now().Add(2*time.Minute)) {
		t.Fatalf("Get = %+v, %v; want the renewed claim", rec, err)
	}
	n := 0
	for rec, err := range l.Pending(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if rec.Key != done && rec.Key != open {
			t.Fatalf("Pending listed %v", rec.Key)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("Pending listed %d claims, want 2", n)
	}
	if err := l.Commit(ctx, done, a.Lease.Token+1, ledger.Result{}); !errors.Is(err, ledger.ErrStaleToken) {
		t.Fatalf("Commit with a wrong token: %v", err)
	}
	if err := l.Commit(ctx, done, a.Lease.Token, ledger.Result{DownstreamID: "d"}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if st := inDB(t, db, done); st != ledger.StateCommitted {
		t.Fatalf("after Commit the DB holds %v", st)
	}

	// The process goes; a new one opens the directory.
	l.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, l = openVolatileTest(t, dir, clock)
	defer db.Close()
	defer l.Close()
	c := mustBegin(t, l, done, vol, ledger.StatusCommitted)
	if c.Record.Result.DownstreamID != "d" {
		t.Fatalf("committed result %+v", c.Record.Result)
	}
	if c := mustBegin(t, l, open, vol, ledger.StatusNew); c.Lease.Token != 1 {
		t.Fatalf("token %d", c.Lease.Token)
	}
}

// TestVolatileClaimTakenOver checks that a durable takeover of a volatile
// claim whose lease ran out fences it and is written.
func TestVolatileClaimTakenOver(t *testing.T) {
	ctx := context.Background()
	clock, db, l := volatileTest(t)
	k := dedupe.Key{3}
	a := mustBegin(t, l, k, ledger.BeginOptions{Owner: "a", Lease: time.Second, Volatile: true}, ledger.StatusNew)
	clock.Advance(2 * time.Second)
	b := mustBegin(t, l, k, ledger.BeginOptions{Owner: "b", Lease: time.Second}, ledger.StatusTakenOver)
	if b.Lease.Token != a.Lease.Token+1 {
		t.Fatalf("takeover token %d after %d", b.Lease.Token, a.Lease.Token)
	}
	if st := inDB(t, db, k); st != ledger.StatePending {
		t.Fatalf("the durable takeover is not in the DB: %v", st)
	}
	if err := l.Commit(ctx, k, a.Lease.Token, ledger.Result{}); !errors.Is(err, ledger.ErrStaleToken) {
		t.Fatalf("the volatile holder's commit after the takeover: %v", err)
	}
	if err := l.Commit(ctx, k, b.Lease.Token, ledger.Result{}); err != nil {
		t.Fatal(err)
	}
}

// TestVolatileClaimBound checks that volatile claims past the memory bound
// are written, and that all of them, kept or written, hold and commit.
func TestVolatileClaimBound(t *testing.T) {
	defer func(n int) { inprocClaims = n }(inprocClaims)
	inprocClaims = 2
	ctx := context.Background()
	_, db, l := volatileTest(t)

	const n = 512
	keys := make([]dedupe.Key, n)
	reqs := make([]ledger.BeginRequest, n)
	for i := range keys {
		keys[i] = dedupe.Key{byte(i), byte(i >> 8), 9}
		reqs[i] = ledger.BeginRequest{Key: keys[i], Options: ledger.BeginOptions{Owner: "a", Lease: time.Minute, Volatile: true}}
	}
	// Half one by one, half in a batch.
	tokens := make([]uint64, n)
	for i := range n / 2 {
		tokens[i] = mustBegin(t, l, keys[i], reqs[i].Options, ledger.StatusNew).Lease.Token
	}
	for i, r := range l.BeginBatch(ctx, reqs[n/2:]) {
		if r.Err != nil || r.Claim.Status != ledger.StatusNew {
			t.Fatalf("BeginBatch: %v, %v", r.Claim.Status, r.Err)
		}
		tokens[n/2+i] = r.Claim.Lease.Token
	}
	written := 0
	for _, k := range keys {
		if inDB(t, db, k) == ledger.StatePending {
			written++
		}
	}
	kept := len(l.st.volatiles())
	if kept+written != n || kept > inprocShards*inprocClaims || written < n-inprocShards*inprocClaims {
		t.Fatalf("%d claims kept in memory and %d written, of %d; the bound is %d", kept, written, n, inprocShards*inprocClaims)
	}
	for _, k := range keys {
		mustBegin(t, l, k, ledger.BeginOptions{Owner: "b", Lease: time.Minute}, ledger.StatusHeld)
	}
	commits := make([]ledger.CommitRequest, n)
	for i, k := range keys {
		commits[i] = ledger.CommitRequest{Key: k, Token: tokens[i]}
	}
	for _, err := range l.CommitBatch(ctx, commits) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys {
		if st := inDB(t, db, k); st != ledger.StateCommitted {
			t.Fatalf("%v: %v after commit", k, st)
		}
	}
	if kept := len(l.st.volatiles()); kept != 0 {
		t.Fatalf("%d volatile claims still kept after their commits", kept)
	}
}

// TestVolatileBatchRepeatsKey checks that a batch that claims one key twice
// claims it once: the second request sees the first's volatile claim,
// which is in no transaction.
func TestVolatileBatchRepeatsKey(t *testing.T) {
	_, _, l := volatileTest(t)
	k := dedupe.Key{4}
	o := ledger.BeginOptions{Owner: "a", Lease: time.Minute, Volatile: true}
	rs := l.BeginBatch(context.Background(), []ledger.BeginRequest{{Key: dedupe.Key{5}, Options: o}, {Key: k, Options: o}, {Key: k, Options: o}})
	if rs[1].Err != nil || rs[1].Claim.Status != ledger.StatusNew || rs[2].Err != nil || rs[2].Claim.Status != ledger.StatusHeld {
		t.Fatalf("the two claims of one key in a batch: %v (%v), %v (%v); want new, held",
			rs[1].Claim.Status, rs[1].Err, rs[2].Claim.Status, rs[2].Err)
	}
}
