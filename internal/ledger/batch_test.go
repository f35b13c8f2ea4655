package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// TestBatchMatchesOneByOne runs the same claims and commits through the
// Badger ledger's batch path and through one call per key on a second
// ledger, and compares every outcome.
func TestBatchMatchesOneByOne(t *testing.T) {
	ctx := context.Background()
	batched := openTestLedger(t, nil, badgerstore.Options{})
	single := openTestLedger(t, nil, badgerstore.Options{})
	key := func(i byte) dedupe.Key { return dedupe.Key{i, 0xba} }
	opts := func(owner string) ledger.BeginOptions {
		return ledger.BeginOptions{Owner: owner, Lease: time.Minute}
	}
	// Key 1 committed before, key 2 held before; keys 3 and 4 new, key 3 twice in the batch.
	for _, l := range []ledger.Ledger{batched, single} {
		c, err := l.Begin(ctx, key(1), opts("early"))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Commit(ctx, key(1), c.Lease.Token, ledger.Result{DownstreamID: "done"}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Begin(ctx, key(2), opts("holder")); err != nil {
			t.Fatal(err)
		}
	}
	reqs := []ledger.BeginRequest{
		{key(1), opts("a")}, {key(2), opts("b")}, {key(3), opts("c")}, {key(3), opts("d")}, {key(4), opts("e")},
		{key(5), ledger.BeginOptions{Owner: "bad"}}, // no lease: an error for this request only
	}
	got := batched.BeginBatch(ctx, reqs)
	want := ledger.BeginAll(ctx, ledger.Ledger(struct{ ledger.Ledger }{single}), reqs) // hide the Batcher
	for i := range reqs {
		if got[i].Claim.Status != want[i].Claim.Status || (got[i].Err == nil) != (want[i].Err == nil) {
			t.Errorf("request %d: batch %v (%v); one by one %v (%v)", i, got[i].Claim.Status, got[i].Err, want[i].Claim.Status, want[i].Err)
		}
	}
	if got[2].Claim.Status != ledger.StatusNew || got[3].Claim.Status != ledger.StatusHeld || got[3].Claim.Record.Owner != "c" {
		t.Errorf("a key twice in one batch: %v then %v (owner %q); want new, then held by the first", got[2].Claim.Status, got[3].Claim.Status, got[3].Claim.Record.Owner)
	}
	commits := []ledger.CommitRequest{
		{key(3), got[2].Claim.Lease.Token, ledger.Result{DownstreamID: "three"}},
		{key(4), got[4].Claim.Lease.Token + 1, ledger.Result{}}, // a stale token
		{key(4), got[4].Claim.Lease.Token, ledger.Result{DownstreamID: "four"}},
	}
	errs := batched.CommitBatch(ctx, commits)
	if errs[0] != nil || !errors.Is(errs[1], ledger.ErrStaleToken) || errs[2] != nil {
		t.Errorf("CommitBatch errors %v; want nil, ErrStaleToken, nil", errs)
	}
	for _, k := range []dedupe.Key{key(3), key(4)} {
		if rec, err := batched.Get(ctx, k); err != nil || rec.State != ledger.StateCommitted {
			t.Errorf("after CommitBatch, %v: %v %v", k, rec.State, err)
		}
	}
}

// openTestLedger returns a ledger with opts on db, or on a new Badger
// directory if db is nil. Both are closed when the test ends.
func openTestLedger(t *testing.T, db *badger.DB, opts badgerstore.Options) *badgerstore.Ledger {
	t.Helper()
	if db == nil {
		var err error
		if db, err = badgerstore.Open(t.TempDir(), badgerstore.OpenOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := badgerstore.New(db, opts)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		db.Close()
	})
	return l
}

// TestBatchCommitIsFenced: a batch commit takes the claim from what the
// process remembers writing; a takeover in between must have replaced it,
// so the first holder's commit is refused and the second's goes through,
// and a commit after a Fail or after another commit is refused too.
func TestBatchCommitIsFenced(t *testing.T) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	l := openTestLedger(t, nil, badgerstore.Options{Options: ledger.Options{Clock: clock}})
	begin := func(k dedupe.Key, owner string, want ledger.Status) uint64 {
		t.Helper()
		r := l.BeginBatch(ctx, []ledger.BeginRequest{{Key: k, Options: ledger.BeginOptions{Owner: owner, Lease: time.Second}}})[0]
		if r.Err != nil || r.Claim.Status != want {
			t.Fatalf("BeginBatch %v for %s: %v, %v; want %v", k, owner, r.Claim.Status, r.Err, want)
		}
		return r.Claim.Lease.Token
	}
	commit := func(k dedupe.Key, token uint64) error {
		return l.CommitBatch(ctx, []ledger.CommitRequest{{Key: k, Token: token, Result: ledger.Result{DownstreamID: "x"}}})[0]
	}

	k := dedupe.Key{1, 0xfe}
	a := begin(k, "a", ledger.StatusNew)
	clock.Advance(2 * time.Second)
	b := begin(k, "b", ledger.StatusTakenOver)
	if err := commit(k, a); !errors.Is(err, ledger.ErrStaleToken) {
		t.Errorf("commit by the holder taken over: %v; want ErrStaleToken", err)
	}
	if err := commit(k, b); err != nil {
		t.Errorf("commit by the new holder: %v", err)
	}
	if err := commit(k, b); !errors.Is(err, ledger.ErrStaleToken) {
		t.Errorf("second commit: %v; want ErrStaleToken", err)
	}

	// Taken over by a one-by-one Begin, then failed by its holder.
	k2 := dedupe.Key{2, 0xfe}
	a = begin(k2, "a", ledger.StatusNew)
	clock.Advance(2 * time.Second)
	c, err := l.Begin(ctx, k2, ledger.BeginOptions{Owner: "c", Lease: time.Second})
	if err != nil || c.Status != ledger.StatusTakenOver {
		t.Fatalf("Begin: %v, %v", c.Status, err)
	}
	if err := commit(k2, a); !errors.Is(err, ledger.ErrStaleToken) {
		t.Errorf("commit by the holder taken over one by one: %v; want ErrStaleToken", err)
	}
	if err := l.Fail(ctx, k2, c.Lease.Token, "no"); err != nil {
		t.Fatal(err)
	}
	if err := commit(k2, c.Lease.Token); !errors.Is(err, ledger.ErrStaleToken) {
		t.Errorf("commit after Fail: %v; want ErrStaleToken", err)
	}
}

// TestBatchRace: goroutines claim, renew, commit and take over a few keys
// at once through both paths, the clock jumping past the leases now and
// then. Whatever the interleaving, a key is committed at most once, by the
// holder whose token the record carries, and never by a holder whose claim
// had been taken over before its commit was called (fencing).
func TestBatchRace(t *testing.T) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	l := openTestLedger(t, nil, badgerstore.Options{NoSync: true, Options: ledger.Options{Clock: clock}})
	const nkeys, workers = 3, 8
	rounds := 1000
	if testing.Short() {
		rounds = 200
	}
	keys := make([]dedupe.Key, nkeys)
	for i := range keys {
		keys[i] = dedupe.Key{byte(i), 0xce}
	}
	var mu sync.Mutex
	committed := map[dedupe.Key][]uint64{} // tokens whose commit succeeded
	var issued [nkeys]atomic.Uint64        // the highest token a returned claim carried, per key
	index := func(k dedupe.Key) int { return int(k[0]) }
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for range rounds {
				// A batch of 1 to 4 keys, maybe repeated.
				var reqs []ledger.BeginRequest
				for range 1 + rng.IntN(4) {
					reqs = append(reqs, ledger.BeginRequest{Key: keys[rng.IntN(nkeys)], Options: ledger.BeginOptions{Owner: fmt.Sprint(w), Lease: time.Second}})
				}
				var res []ledger.BeginResult
				if rng.IntN(4) == 0 {
					res = ledger.BeginAll(ctx, ledger.Ledger(struct{ ledger.Ledger }{l}), reqs)
				} else {
					res = l.BeginBatch(ctx, reqs)
				}
				var commits []ledger.CommitRequest
				for i, r := range res {
					if r.Err == nil && (r.Claim.Status == ledger.StatusNew || r.Claim.Status == ledger.StatusTakenOver) {
						if rng.IntN(3) == 0 {
							_, _ = l.Extend(ctx, reqs[i].Key, r.Claim.Lease.Token, time.Second)
						}
						commits = append(commits, ledger.CommitRequest{Key: reqs[i].Key, Token: r.Claim.Lease.Token})
						for n := &issued[index(reqs[i].Key)]; ; {
							if cur := n.Load(); cur >= r.Claim.Lease.Token || n.CompareAndSwap(cur, r.Claim.Lease.Token) {
								break
							}
						}
					}
				}
				if rng.IntN(3) == 0 {
					clock.Advance(2 * time.Second) // every lease taken so far runs out
				}
				// Claims returned before the commits are called: a commit
				// of an older token must fail.
				before := make([]uint64, len(commits))
				for i, c := range commits {
					before[i] = issued[index(c.Key)].Load()
				}
				var errs []error
				if rng.IntN(4) == 0 {
					for _, c := range commits {
						errs = append(errs, l.Commit(ctx, c.Key, c.Token, c.Result))
					}
				} else {
					errs = l.CommitBatch(ctx, commits)
				}
				for i, err := range errs {
					switch {
					case err == nil && before[i] > commits[i].Token:
						t.Errorf("%v: the commit of token %d went through after token %d was handed out", commits[i].Key, commits[i].Token, before[i])
					case err == nil:
						mu.Lock()
						committed[commits[i].Key] = append(committed[commits[i].Key], commits[i].Token)
						mu.Unlock()
					case !errors.Is(err, ledger.ErrStaleToken):
						t.Errorf("commit: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	for _, k := range keys {
		tokens := committed[k]
		rec, err := l.Get(ctx, k)
		switch {
		case err != nil && len(tokens) == 0:
		case err != nil:
			t.Errorf("%v: committed by %v, then Get: %v", k, tokens, err)
		case len(tokens) > 1:
			t.Errorf("%v: committed %d times, by tokens %v", k, len(tokens), tokens)
		case len(tokens) == 1 && (rec.State != ledger.StateCommitted || rec.Token != tokens[0]):
			t.Errorf("%v: committed by token %d; the record is %v with token %d", k, tokens[0], rec.State, rec.Token)
		case len(tokens) == 1 && issued[index(k)].Load() > tokens[0]:
			// A committed key is never claimed again: a later claim means
			// a takeover the commit should have been fenced by.
			t.Errorf("%v: committed by token %d, yet claimed with token %d", k, tokens[0], issued[index(k)].Load())
		case len(tokens) == 0 && rec.State == ledger.StateCommitted:
			t.Errorf("%v: committed, but no commit succeeded", k)
		}
	}
}

// TestBatchTooBigIsSplit: a batch larger than one Badger transaction can
// hold is written in parts, and every claim and commit in it goes through.
func TestBatchTooBigIsSplit(t *testing.T) {
	ctx := context.Background()
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithMemTableSize(1 << 20).WithValueThreshold(1 << 10).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	l := openTestLedger(t, db, badgerstore.Options{})
	const n = 5000 // a 1 MiB memtable takes transactions of ~1,000 entries
	reqs := make([]ledger.BeginRequest, n)
	for i := range reqs {
		reqs[i] = ledger.BeginRequest{Key: dedupe.Key{byte(i), byte(i >> 8), 0x5b}, Options: ledger.BeginOptions{Owner: "big", Lease: time.Minute}}
	}
	var commits []ledger.CommitRequest
	for i, r := range l.BeginBatch(ctx, reqs) {
		if r.Err != nil || r.Claim.Status != ledger.StatusNew {
			t.Fatalf("claim %d: %v, %v", i, r.Claim.Status, r.Err)
		}
		commits = append(commits, ledger.CommitRequest{Key: reqs[i].Key, Token: r.Claim.Lease.Token})
	}
	for i, err := range l.CommitBatch(ctx, commits) {
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	for _, r := range reqs {
		if rec, err := l.Get(ctx, r.Key); err != nil || rec.State != ledger.StateCommitted {
			t.Fatalf("%v: %v, %v; want committed", r.Key, rec.State, err)
		}
	}
}
