package ledgertest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// failed begins k and fails it, and returns the failed record's token.
func failed(t *testing.T, l ledger.Ledger, k dedupe.Key, reason string) uint64 {
	t.Helper()
	c := begin(t, l, k, "worker-a", ledger.StatusNew)
	if err := l.Fail(ctx, k, c.Lease.Token, reason); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	return c.Lease.Token
}

// testClear: a failed record cleared at its token is new work for the next
// Begin, fenced above the failed work's tokens, with its tries counted
// anew; clearing it again is harmless.
func (s *suite) testClear(t *testing.T) {
	l, c := s.open(t, ledger.Options{})
	k := key(t, 1)
	// The work was taken over once before it failed: two tokens, two tries.
	a := begin(t, l, k, "worker-a", ledger.StatusNew)
	c.Advance(lease)
	b := begin(t, l, k, "worker-b", ledger.StatusTakenOver)
	if err := l.Fail(ctx, k, b.Lease.Token, "permanent_effect: 400 from the receiver"); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	if err := l.Clear(ctx, k, b.Lease.Token, "redriven by alice"); err != nil {
		t.Fatalf("Clear: %v", err)
	}
	rec, err := l.Get(ctx, k)
	if err != nil || rec.State != ledger.StateCleared || !strings.HasPrefix(rec.Reason, "redriven by alice") ||
		!strings.Contains(rec.Reason, "400 from the receiver") {
		t.Fatalf("Get after Clear = %+v, %v; want cleared, the note before the failure's reason", rec, err)
	}
	if err := l.Clear(ctx, k, b.Lease.Token, "redriven by alice, again"); err != nil {
		t.Fatalf("second Clear at the same token: %v; want nil (a retry)", err)
	}
	n := begin(t, l, k, "worker-c", ledger.StatusNew)
	if n.Lease.Token <= b.Lease.Token || n.Record.Attempts != 1 || n.Record.Owner != "worker-c" || !n.Record.Created.Equal(c.Now()) {
		t.Errorf("Begin after Clear = %+v; want a token above %d, 1 attempt, created now", n.Record, b.Lease.Token)
	}
	// The failed work's holders stay fenced out.
	for _, tok := range []uint64{a.Lease.Token, b.Lease.Token} {
		wantErr(t, fmt.Sprint("Commit with old token ", tok), l.Commit(ctx, k, tok, ledger.Result{DownstreamID: "zombie"}), ledger.ErrStaleToken)
	}
	if err := l.Commit(ctx, k, n.Lease.Token, ledger.Result{DownstreamID: "ok"}); err != nil {
		t.Fatalf("Commit of the new work: %v", err)
	}
	// The clear of a success that followed is refused: never undone.
	wantErr(t, "Clear after the commit", l.Clear(ctx, k, b.Lease.Token, "late retry"), ledger.ErrNotFailed)
	begin(t, l, k, "worker-d", ledger.StatusCommitted)
}

// testClearRefuses: Clear clears only the failure the caller read.
func (s *suite) testClearRefuses(t *testing.T) {
	l, c := s.open(t, ledger.Options{})
	wantErr(t, "Clear of no record", l.Clear(ctx, key(t, 1), 1, "x"), ledger.ErrNotFound)

	k := key(t, 2)
	cl := begin(t, l, k, "worker-a", ledger.StatusNew)
	wantErr(t, "Clear of held work", l.Clear(ctx, k, cl.Lease.Token, "x"), ledger.ErrNotFailed)
	c.Advance(2 * lease)
	wantErr(t, "Clear of abandoned work", l.Clear(ctx, k, cl.Lease.Token, "x"), ledger.ErrNotFailed)
	if err := l.Commit(ctx, k, cl.Lease.Token, ledger.Result{DownstreamID: "done"}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	wantErr(t, "Clear of committed work", l.Clear(ctx, k, cl.Lease.Token, "x"), ledger.ErrNotFailed)

	k = key(t, 3)
	tok := failed(t, l, k, "budget: spent")
	wantErr(t, "Clear with another token", l.Clear(ctx, k, tok+1, "x"), ledger.ErrStaleToken)
	if err := l.Clear(ctx, k, tok, "forgotten"); err != nil {
		t.Fatalf("Clear: %v", err)
	}
	// The work fails again: the first failure's clear does not clear it.
	n := begin(t, l, k, "worker-b", ledger.StatusNew)
	if err := l.Fail(ctx, k, n.Lease.Token, "budget: spent again"); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	wantErr(t, "Clear of a later failure with the first's token", l.Clear(ctx, k, tok, "x"), ledger.ErrStaleToken)
	rec, err := l.Get(ctx, k)
	if err != nil || rec.State != ledger.StateFailed {
		t.Errorf("Get = %+v, %v; want the later failure, failed", rec, err)
	}

	// A cleared record expires like any other.
	c.Advance(ledger.DefaultRetention + time.Second)
	wantErr(t, "Clear of an expired record", l.Clear(ctx, k, n.Lease.Token, "x"), ledger.ErrNotFound)
}

// testClearMismatch: a cleared record is absent, so a key that comes back
// with another payload under MismatchReject is new work, not a mismatch.
func (s *suite) testClearMismatch(t *testing.T) {
	l, _ := s.open(t, ledger.Options{Mismatch: ledger.MismatchReject})
	k := key(t, 1)
	tok := failed(t, l, k, "template: bad field")
	if err := l.Clear(ctx, k, tok, "fixed the template"); err != nil {
		t.Fatalf("Clear: %v", err)
	}
	c, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: "w", Fingerprint: fp("another payload"), Lease: lease})
	if err != nil || c.Status != ledger.StatusNew || c.Mismatch {
		t.Fatalf("Begin with another payload after Clear = %+v, %v; want new, no mismatch", c, err)
	}
}

// testRaceClear is a redrive racing duplicates: on every key, several
// goroutines clear the failure (each retrying its Clear, as a redrive
// retried after a lost answer does) and then begin the work, and a
// duplicate begins it as well; whoever is new commits. The work must be
// done exactly once per key, and no Clear may succeed once it is
// committed.
func (s *suite) testRaceClear(t *testing.T) {
	l, _ := s.open(t, ledger.Options{})
	// Few keys, many goroutines on each: the race is per key.
	n := 32
	keys := make([]dedupe.Key, n)
	tokens := make([]uint64, n)
	for i := range keys {
		keys[i] = key(t, i)
		tokens[i] = failed(t, l, keys[i], "permanent_effect: 400")
	}
	RaceClear(t, []ledger.Ledger{l}, 8, keys, tokens)
}

// RaceClear has goroutines (spread over ledgers, which may be several
// handles on one store) race on every key, whose failed record has the
// token at the same index: half of them clear it and then begin the work,
// the others begin it as duplicates do; a caller that gets StatusNew
// commits. It checks that each key was begun new and committed exactly
// once, that it ends committed, and that a Clear after the commit is
// refused.
func RaceClear(t *testing.T, ledgers []ledger.Ledger, goroutines int, keys []dedupe.Key, tokens []uint64) {
	t.Helper()
	n := len(keys)
	news := make([]atomic.Int32, n)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		l := ledgers[g%len(ledgers)]
		owner := fmt.Sprintf("ledger%d/g%d", g%len(ledgers), g)
		redriver := g%2 == 0
		wg.Go(func() {
			for j := range n {
				i := (j + g*(n/goroutines+1)) % n
				k := keys[i]
				if redriver {
					for range 2 {
						err := l.Clear(ctx, k, tokens[i], "redriven by "+owner)
						if err != nil && !errors.Is(err, ledger.ErrNotFailed) && !errors.Is(err, ledger.ErrStaleToken) {
							errs <- fmt.Errorf("Clear(key %d) by %s: %w", i, owner, err)
							return
						}
					}
				}
				c, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: owner, Lease: time.Hour})
				if err != nil {
					errs <- fmt.Errorf("Begin(key %d) by %s: %w", i, owner, err)
					return
				}
				switch c.Status {
				case ledger.StatusNew:
					news[i].Add(1)
					if err := l.Commit(ctx, k, c.Lease.Token, ledger.Result{DownstreamID: owner}); err != nil {
						errs <- fmt.Errorf("Commit(key %d) by %s: %w", i, owner, err)
						return
					}
				case ledger.StatusFailed, ledger.StatusHeld, ledger.StatusCommitted:
				default:
					errs <- fmt.Errorf("Begin(key %d) by %s = %v", i, owner, c.Status)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	l := ledgers[0]
	for i, k := range keys {
		if w := news[i].Load(); w != 1 {
			t.Errorf("key %d: begun new %d times; want 1", i, w)
		}
		rec, err := l.Get(ctx, k)
		if err != nil || rec.State != ledger.StateCommitted {
			t.Errorf("key %d: %+v, %v; want committed", i, rec, err)
		}
		if err := l.Clear(ctx, k, tokens[i], "late"); !errors.Is(err, ledger.ErrNotFailed) {
			t.Errorf("key %d: Clear after the commit: %v; want ErrNotFailed", i, err)
		}
	}
}
