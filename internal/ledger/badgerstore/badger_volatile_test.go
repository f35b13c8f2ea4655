package badgerstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sync/errgroup"

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
// are kept in memory and the claims journal, never written to the DB, yet
// hold, renew, list, fence and commit as durable ones do; a commit is
// durable; and after the process is gone an uncommitted claim, volatile or
// durable, is taken over at once by the next process, which counts it as a
// try and keeps the time it was first made.
// (Volatile claims were once kept in memory only: after a crash the key was
// new again, with its attempts back at 1 and no trace of when an effect may
// have happened, so a trigger that killed its process came back for ever
// and a redo past the sink's duplicate window went unnoticed.)
func TestVolatileClaim(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	clock.Set(time.Unix(1e9, 0))
	dir := t.TempDir()
	db, l := openVolatileTest(t, dir, clock)
	vol := ledger.BeginOptions{Owner: "a", Lease: time.Minute, Volatile: true}
	done, open, durable := dedupe.Key{1}, dedupe.Key{2}, dedupe.Key{6}

	a := mustBegin(t, l, done, vol, ledger.StatusNew)
	mustBegin(t, l, open, vol, ledger.StatusNew)
	mustBegin(t, l, durable, ledger.BeginOptions{Owner: "a", Lease: time.Minute}, ledger.StatusNew)
	mustBegin(t, l, done, ledger.BeginOptions{Owner: "b", Lease: time.Minute}, ledger.StatusHeld)
	if _, err := l.Extend(ctx, done, a.Lease.Token, 2*time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	// A failed write of the key leaves the claim as it was, and this
	// process's.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Extend(canceled, done, a.Lease.Token, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Extend with a canceled context: %v", err)
	}
	mustBegin(t, l, done, ledger.BeginOptions{Owner: "b", Lease: time.Minute}, ledger.StatusHeld)
	for k, want := range map[dedupe.Key]ledger.State{done: 0, open: 0, durable: ledger.StatePending} {
		if st := inDB(t, db, k); st != want {
			t.Fatalf("the DB holds %v for the claim of %v; want %v", st, k, want)
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
		if rec.Key != done && rec.Key != open && rec.Key != durable {
			t.Fatalf("Pending listed %v", rec.Key)
		}
		n++
	}
	if n != 3 {
		t.Fatalf("Pending listed %d claims, want 3", n)
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

	// The process goes, its leases still live on the clock; a new one opens
	// the directory and takes the claims over at once.
	created := clock.Now()
	l.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	db, l = openVolatileTest(t, dir, clock)
	defer db.Close()
	defer l.Close()
	c := mustBegin(t, l, done, vol, ledger.StatusCommitted)
	if c.Record.Result.DownstreamID != "d" {
		t.Fatalf("committed result %+v", c.Record.Result)
	}
	for _, k := range []dedupe.Key{open, durable} {
		rec, err := l.Get(ctx, k)
		if err != nil || rec.State != ledger.StatePending || rec.LeaseUntil.After(clock.Now()) {
			t.Fatalf("Get(%v) after the restart = %+v, %v; want pending with its lease over", k, rec, err)
		}
		c := mustBegin(t, l, k, vol, ledger.StatusTakenOver)
		if c.Lease.Token != 2 || c.Record.Attempts != 2 || !c.Record.Created.Equal(created) {
			t.Fatalf("takeover of %v after the restart: token %d, attempts %d, created %v; want 2, 2, %v", k, c.Lease.Token, c.Record.Attempts, c.Record.Created, created)
		}
		// The new claim is this process's: it holds.
		mustBegin(t, l, k, vol, ledger.StatusHeld)
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

// TestClaimsPruned checks that the durable claims the ledger remembers are
// pruned once their leases have run out, that the live ones stay this
// process's (held, not taken over as a dead process's), and that they
// commit. (A volatile claim has no other copy and is never pruned: see
// TestVolatileClaimBound.)
func TestClaimsPruned(t *testing.T) {
	ctx := context.Background()
	clock, db, l := volatileTest(t)

	// Keys of one shard (the shard is the first byte's low six bits): a
	// first lot whose leases run out, then more live ones than the shard
	// prunes at.
	key := func(i int) dedupe.Key { return dedupe.Key{0, byte(i), byte(i >> 8), 9} }
	const expired, live = minPrune - 24, minPrune + 76
	for i := range expired {
		mustBegin(t, l, key(i), ledger.BeginOptions{Owner: "a", Lease: time.Second}, ledger.StatusNew)
	}
	clock.Advance(2 * time.Second)
	reqs := make([]ledger.BeginRequest, live)
	for i := range reqs {
		reqs[i] = ledger.BeginRequest{Key: key(expired + i), Options: ledger.BeginOptions{Owner: "a", Lease: time.Minute}}
	}
	commits := make([]ledger.CommitRequest, live)
	for i, r := range l.BeginBatch(ctx, reqs) {
		if r.Err != nil || r.Claim.Status != ledger.StatusNew {
			t.Fatalf("BeginBatch: %v, %v", r.Claim.Status, r.Err)
		}
		commits[i] = ledger.CommitRequest{Key: reqs[i].Key, Token: r.Claim.Lease.Token}
	}
	if n := len(l.st.shards[0].claims); n > live+1 {
		t.Fatalf("%d claims remembered, of %d live and %d past their lease; want the %d", n, live, expired, live)
	}
	for i := range expired + live {
		if inDB(t, db, key(i)) != ledger.StatePending {
			t.Fatalf("%v: not in the DB", key(i))
		}
	}
	for _, r := range reqs {
		mustBegin(t, l, r.Key, ledger.BeginOptions{Owner: "b", Lease: time.Minute}, ledger.StatusHeld)
	}
	for _, err := range l.CommitBatch(ctx, commits) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range reqs {
		if st := inDB(t, db, r.Key); st != ledger.StateCommitted {
			t.Fatalf("%v: %v after commit", r.Key, st)
		}
	}
}

// TestVolatileClaimBound checks that volatile claims past the memory bound
// are written, and that all of them, kept or written, hold and commit.
func TestVolatileClaimBound(t *testing.T) {
	ctx := context.Background()
	_, db, l := volatileTest(t)
	const bound = 2
	l.st.maxVolatile = bound

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
	if kept+written != n || kept > inprocShards*bound || written < n-inprocShards*bound {
		t.Fatalf("%d claims kept in memory and %d written, of %d; the bound is %d", kept, written, n, inprocShards*bound)
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

// TestJournalRotatesAndRecovers checks the claims journal: it starts a new
// file when one grows past journalMax, carrying the claims still held; a
// torn last entry (a crash in the middle of a write) is ignored; and the
// next process takes over every claim the journal holds and the DB does not
// show settled, and nothing else.
func TestJournalRotatesAndRecovers(t *testing.T) {
	defer func(n int64) { journalMax = n }(journalMax)
	journalMax = 10 * journalEntrySize
	ctx := context.Background()
	clock := newFakeClock()
	clock.Set(time.Unix(1e9, 0))
	dir := t.TempDir()
	db, l := openVolatileTest(t, dir, clock)
	vol := ledger.BeginOptions{Owner: "a", Lease: time.Minute, Volatile: true}
	key := func(i int) dedupe.Key { return dedupe.Key{byte(i), 7} }
	const n = 40
	tokens := make([]uint64, n)
	for i := range n {
		tokens[i] = mustBegin(t, l, key(i), vol, ledger.StatusNew).Lease.Token
		if i%2 == 0 { // half settled: committed, or failed
			var err error
			if i%4 == 0 {
				err = l.Commit(ctx, key(i), tokens[i], ledger.Result{DownstreamID: "d"})
			} else {
				err = l.Fail(ctx, key(i), tokens[i], "refused")
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	files, err := journalFiles(dir)
	if err != nil || len(files) != 1 || files[0] == 0 {
		t.Fatalf("journal files %v, %v; want one, rotated past the first", files, err)
	}
	// A crash in the middle of an entry's write.
	f, err := os.OpenFile(journalPath(dir, files[0]), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(journalEntry{Key: key(99), Token: 1, Attempts: 1, Created: clock.Now()}.append(nil)[:journalEntrySize/2])
	f.Close()
	created := clock.Now()
	l.Close()
	db.Close()
	clock.Advance(time.Second)

	db, l = openVolatileTest(t, dir, clock)
	defer db.Close()
	defer l.Close()
	for i := range n {
		rec, err := l.Get(ctx, key(i))
		switch {
		case err != nil:
			t.Fatalf("%d: %v", i, err)
		case i%4 == 0 && rec.State != ledger.StateCommitted, i%4 == 2 && rec.State != ledger.StateFailed:
			t.Fatalf("%d: %v after the restart; want it settled as before", i, rec.State)
		case i%2 == 1 && (rec.State != ledger.StatePending || rec.LeaseUntil.After(clock.Now()) || !rec.Created.Equal(created)):
			t.Fatalf("%d: %+v after the restart; want pending, its lease over, created %v", i, rec, created)
		}
		if i%2 == 1 {
			if c := mustBegin(t, l, key(i), vol, ledger.StatusTakenOver); c.Record.Attempts != 2 {
				t.Fatalf("%d: attempts %d after the takeover; want 2", i, c.Record.Attempts)
			}
		}
	}
	if _, err := l.Get(ctx, key(99)); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the torn entry's key: %v; want no record", err)
	}
	if files, _ := journalFiles(dir); len(files) != 1 {
		t.Fatalf("journal files after the restart %v; want the new one only", files)
	}
}

// TestVolatileBatchRepeatsKey checks that a batch that claims one key twice
// claims it once: the second request sees the first's claim, in the same
// transaction.
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

// TestOrphanedClaimsIgnoreSkew checks that the claims of a process that
// held the directory before this one (durable, and volatile ones recovered
// from the journal) are taken over at once, though their leases are live
// and the ledger allows for clocks apart (Options.ClockSkew): a gone holder
// sends nothing more, whatever its clock said.
func TestOrphanedClaimsIgnoreSkew(t *testing.T) {
	clock := newFakeClock()
	clock.Set(time.Unix(1e9, 0))
	dir := t.TempDir()
	open := func() (*badger.DB, *Ledger) {
		t.Helper()
		db, err := Open(dir, OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := New(db, Options{Options: ledger.Options{Clock: clock, ClockSkew: 5 * time.Second}})
		if err != nil {
			db.Close()
			t.Fatal(err)
		}
		return db, l
	}
	db, l := open()
	durable, volatile := dedupe.Key{7}, dedupe.Key{8}
	mustBegin(t, l, durable, ledger.BeginOptions{Owner: "gone", Lease: time.Minute}, ledger.StatusNew)
	mustBegin(t, l, volatile, ledger.BeginOptions{Owner: "gone", Lease: time.Minute, Volatile: true}, ledger.StatusNew)
	l.Close()
	db.Close()

	db, l = open()
	defer db.Close()
	defer l.Close()
	for _, k := range []dedupe.Key{durable, volatile} {
		mustBegin(t, l, k, ledger.BeginOptions{Owner: "next", Lease: time.Minute}, ledger.StatusTakenOver)
	}
}

// TestJournalRecoversManyClaims restarts, as after a crash, on a journal of
// thousands of claims, enough for the recovery to read the DB on several
// goroutines in key order: each claim the DB shows settled stays settled,
// and each other one is pending, its holder gone.
func TestJournalRecoversManyClaims(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	clock.Set(time.Unix(1e9, 0))
	dir := t.TempDir()
	db, l := openVolatileTest(t, dir, clock)
	vol := ledger.BeginOptions{Owner: "a", Lease: time.Minute, Volatile: true}
	key := func(i int) dedupe.Key { return dedupe.Key{byte(i * 37), byte(i >> 8), byte(i), 9} }
	const n = 3000
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			c, err := l.Begin(ctx, key(i), vol)
			if err != nil {
				return err
			}
			switch i % 3 {
			case 0:
				return l.Commit(ctx, key(i), c.Lease.Token, ledger.Result{DownstreamID: fmt.Sprint(i)})
			case 1:
				return l.Fail(ctx, key(i), c.Lease.Token, "refused")
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	// The journal as a killed process leaves it: a clean close keeps only
	// the claims still held (TestCloseLeavesHeldClaims).
	files, err := journalFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	saved := make(map[string][]byte)
	for _, n := range files {
		b, err := os.ReadFile(journalPath(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		saved[journalPath(dir, n)] = b
	}
	l.Close()
	db.Close()
	if files, err = journalFiles(dir); err != nil {
		t.Fatal(err)
	}
	for _, n := range files {
		os.Remove(journalPath(dir, n))
	}
	for path, b := range saved {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if es, _, err := readJournal(dir); err != nil || len(es) < 2000 {
		t.Fatalf("the journal holds %d claims (%v); want at least 2,000, for the recovery's goroutines", len(es), err)
	}
	clock.Advance(time.Second)

	db, l = openVolatileTest(t, dir, clock)
	defer db.Close()
	defer l.Close()
	for i := range n {
		rec, err := l.Get(ctx, key(i))
		switch {
		case err != nil:
			t.Fatalf("%d: %v", i, err)
		case i%3 == 0 && (rec.State != ledger.StateCommitted || rec.Result.DownstreamID != fmt.Sprint(i)),
			i%3 == 1 && rec.State != ledger.StateFailed:
			t.Fatalf("%d: %v %q after the restart; want it settled as before", i, rec.State, rec.Result.DownstreamID)
		case i%3 == 2 && (rec.State != ledger.StatePending || rec.LeaseUntil.After(clock.Now()) || rec.Owner == "a"):
			t.Fatalf("%d: %+v after the restart; want pending, its lease over, its holder gone", i, rec)
		}
	}
}

// TestCloseLeavesHeldClaims closes a ledger cleanly while it holds some of
// its volatile claims: the journal then holds those claims and no other
// (the settled ones are dropped, so a clean restart has nothing else to
// look up), and the next process takes each held one over.
func TestCloseLeavesHeldClaims(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	clock.Set(time.Unix(1e9, 0))
	dir := t.TempDir()
	db, l := openVolatileTest(t, dir, clock)
	vol := ledger.BeginOptions{Owner: "a", Lease: time.Minute, Volatile: true}
	key := func(i int) dedupe.Key { return dedupe.Key{byte(i), 11} }
	const n = 100
	for i := range n {
		c := mustBegin(t, l, key(i), vol, ledger.StatusNew)
		if i%5 < 3 {
			if err := l.Commit(ctx, key(i), c.Lease.Token, ledger.Result{DownstreamID: "d"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if es, _, _ := readJournal(dir); len(es) != n {
		t.Fatalf("the journal holds %d claims before the close; want all %d", len(es), n)
	}
	l.Close()
	db.Close()
	es, _, err := readJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, ok := es[key(i)]; ok != (i%5 >= 3) {
			t.Fatalf("key %d in the journal after the close: %v; want only the %d claims still held", i, ok, n*2/5)
		}
	}
	if len(es) != n*2/5 {
		t.Fatalf("the journal holds %d claims after the close; want %d", len(es), n*2/5)
	}

	clock.Advance(time.Second)
	db, l = openVolatileTest(t, dir, clock)
	defer db.Close()
	defer l.Close()
	for i := range n {
		want := ledger.StatusCommitted
		if i%5 >= 3 {
			want = ledger.StatusTakenOver
		}
		mustBegin(t, l, key(i), vol, want)
	}
}
