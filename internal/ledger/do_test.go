package ledger_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

func doLedger(t *testing.T) ledger.Ledger {
	t.Helper()
	db, err := badgerstore.Open(t.TempDir(), badgerstore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := badgerstore.New(db, badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); db.Close() })
	return l
}

// TestDoOnce: of 32 concurrent callers of one key, whose work is slower
// than the lease, exactly one runs it (the lease is renewed, so nobody
// takes it over), and every caller gets its result.
func TestDoOnce(t *testing.T) {
	l := doLedger(t)
	var key dedupe.Key
	key[0] = 1
	var runs atomic.Int64
	fn := func(ctx context.Context) (dedupe.Result, error) {
		runs.Add(1)
		select {
		case <-time.After(600 * time.Millisecond): // three leases
		case <-ctx.Done():
			return dedupe.Result{}, ctx.Err()
		}
		return dedupe.Result{DownstreamID: "done-once"}, nil
	}
	var wg sync.WaitGroup
	var ran atomic.Int64
	for range 32 {
		wg.Go(func() {
			res, r, err := ledger.Do(context.Background(), l, dedupe.Intent{Key: key}, fn, dedupe.DoOptions{Lease: 200 * time.Millisecond})
			if err != nil || res.DownstreamID != "done-once" {
				t.Errorf("Do = %+v, %v", res, err)
			}
			if r {
				ran.Add(1)
			}
		})
	}
	wg.Wait()
	if runs.Load() != 1 || ran.Load() != 1 {
		t.Errorf("fn ran %d times, %d callers say they ran it; want 1 and 1", runs.Load(), ran.Load())
	}
}

// TestDoErrors: a plain error releases the claim, so the next call runs
// the work again; a Permanent one gives the work up for good.
func TestDoErrors(t *testing.T) {
	l := doLedger(t)
	ctx := context.Background()
	var key dedupe.Key
	key[0] = 2
	boom := errors.New("the target is down")
	if _, _, err := ledger.Do(ctx, l, dedupe.Intent{Key: key}, func(context.Context) (dedupe.Result, error) { return dedupe.Result{}, boom }, dedupe.DoOptions{}); !errors.Is(err, boom) {
		t.Fatalf("Do = %v; want the work's error", err)
	}
	res, ran, err := ledger.Do(ctx, l, dedupe.Intent{Key: key}, func(context.Context) (dedupe.Result, error) { return dedupe.Result{DownstreamID: "second try"}, nil }, dedupe.DoOptions{NoWait: true})
	if err != nil || !ran || res.DownstreamID != "second try" {
		t.Fatalf("retry after an error: %+v, %v, %v; want it run at once", res, ran, err)
	}

	key[0] = 3
	refused := errors.New("card declined")
	if _, _, err := ledger.Do(ctx, l, dedupe.Intent{Key: key}, func(context.Context) (dedupe.Result, error) { return dedupe.Result{}, dedupe.Permanent(refused) }, dedupe.DoOptions{}); !errors.Is(err, refused) {
		t.Fatalf("Do = %v; want the permanent error", err)
	}
	_, ran, err = ledger.Do(ctx, l, dedupe.Intent{Key: key}, func(context.Context) (dedupe.Result, error) {
		t.Error("work given up ran again")
		return dedupe.Result{}, nil
	}, dedupe.DoOptions{})
	if ran || !errors.Is(err, dedupe.ErrGivenUp) {
		t.Errorf("Do after a permanent error = %v, ran %v; want ErrGivenUp", err, ran)
	}
}

// TestDoNoWait: a caller that will not wait gets a *HeldError while
// another holds the key.
func TestDoNoWait(t *testing.T) {
	l := doLedger(t)
	var key dedupe.Key
	key[0] = 4
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		ledger.Do(context.Background(), l, dedupe.Intent{Key: key}, func(context.Context) (dedupe.Result, error) {
			close(started)
			<-release
			return dedupe.Result{}, nil
		}, dedupe.DoOptions{})
	}()
	<-started
	_, _, err := ledger.Do(context.Background(), l, dedupe.Intent{Key: key}, func(context.Context) (dedupe.Result, error) { return dedupe.Result{}, nil }, dedupe.DoOptions{NoWait: true})
	close(release)
	<-done
	if held, ok := errors.AsType[*dedupe.HeldError](err); !ok || held.Owner != "dedupe.Do" || held.RetryAfter <= 0 {
		t.Errorf("Do while held = %v; want a *HeldError naming the holder", err)
	}
}

// TestDoTakenOver: fn learns from its ctx that it takes over work whose
// holder died before committing, and only then.
func TestDoTakenOver(t *testing.T) {
	clock := ledgertest.NewClock()
	db, err := badgerstore.Open(t.TempDir(), badgerstore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := badgerstore.New(db, badgerstore.Options{Options: ledger.Options{Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); db.Close() })
	ctx := context.Background()
	dead, fresh := dedupe.Key{1}, dedupe.Key{2}
	if _, err := l.Begin(ctx, dead, ledger.BeginOptions{Owner: "crashed", Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // the holder's lease ran out: it died
	for _, tt := range []struct {
		key  dedupe.Key
		want bool
	}{{dead, true}, {fresh, false}} {
		var got bool
		_, ran, err := ledger.Do(ctx, l, dedupe.Intent{Key: tt.key}, func(ctx context.Context) (dedupe.Result, error) {
			got = dedupe.TakenOver(ctx)
			return dedupe.Result{}, nil
		}, dedupe.DoOptions{})
		if err != nil || !ran || got != tt.want {
			t.Errorf("Do(%v): ran %v, err %v, TakenOver %v; want ran, TakenOver %v", tt.key, ran, err, got, tt.want)
		}
	}
	if dedupe.TakenOver(ctx) {
		t.Error("TakenOver(context.Background()) = true")
	}
}

// TestDoMismatchTakenOver: abandoned work found by a caller with another
// payload, under RejectMismatch, is not done for that payload: Do returns
// ErrMismatch and gives the claim back, so that the retry of the payload
// the work was begun with takes it over at once, told so by TakenOver.
func TestDoMismatchTakenOver(t *testing.T) {
	clock := ledgertest.NewClock()
	db, err := badgerstore.Open(t.TempDir(), badgerstore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := badgerstore.New(db, badgerstore.Options{Options: ledger.Options{Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); db.Close() })
	ctx := context.Background()
	first := dedupe.Intent{Key: dedupe.Key{7}, Fingerprint: dedupe.Fingerprint{1}}
	other := dedupe.Intent{Key: first.Key, Fingerprint: dedupe.Fingerprint{2}}
	if _, err := l.Begin(ctx, first.Key, ledger.BeginOptions{Owner: "crashed", Fingerprint: first.Fingerprint, Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // the holder died
	_, ran, err := ledger.Do(ctx, l, other, func(context.Context) (dedupe.Result, error) {
		t.Error("the work ran for another payload")
		return dedupe.Result{}, nil
	}, dedupe.DoOptions{RejectMismatch: true})
	if !errors.Is(err, dedupe.ErrMismatch) || ran {
		t.Fatalf("Do(other payload) = ran %v, %v; want ErrMismatch", ran, err)
	}
	clock.Advance(time.Millisecond) // past the claim given back (this clock stands still)
	var takenOver bool
	res, ran, err := ledger.Do(ctx, l, first, func(ctx context.Context) (dedupe.Result, error) {
		takenOver = dedupe.TakenOver(ctx)
		return dedupe.Result{DownstreamID: "reconciled"}, nil
	}, dedupe.DoOptions{NoWait: true, RejectMismatch: true})
	if err != nil || !ran || !takenOver || res.DownstreamID != "reconciled" {
		t.Errorf("Do(first payload) = %+v, ran %v, TakenOver %v, %v; want it run at once, taken over", res, ran, takenOver, err)
	}
}

// TestDoMismatchReleased: work its holder released undone (fn's plain
// error), found by a caller with another payload under RejectMismatch, is
// given back as it was found: the retry of the payload it was begun with
// runs it at once, as new work (TakenOver false).
func TestDoMismatchReleased(t *testing.T) {
	l := doLedger(t)
	ctx := context.Background()
	first := dedupe.Intent{Key: dedupe.Key{8}, Fingerprint: dedupe.Fingerprint{1}}
	other := dedupe.Intent{Key: first.Key, Fingerprint: dedupe.Fingerprint{2}}
	if _, ran, err := ledger.Do(ctx, l, first, func(context.Context) (dedupe.Result, error) {
		return dedupe.Result{}, errors.New("not done")
	}, dedupe.DoOptions{}); !ran || err == nil {
		t.Fatalf("Do(first) = ran %v, %v; want ran, its error", ran, err)
	}
	if _, ran, err := ledger.Do(ctx, l, other, func(context.Context) (dedupe.Result, error) {
		t.Error("the work ran for another payload")
		return dedupe.Result{}, nil
	}, dedupe.DoOptions{RejectMismatch: true}); !errors.Is(err, dedupe.ErrMismatch) || ran {
		t.Fatalf("Do(other payload) = ran %v, %v; want ErrMismatch", ran, err)
	}
	takenOver := true
	_, ran, err := ledger.Do(ctx, l, first, func(ctx context.Context) (dedupe.Result, error) {
		takenOver = dedupe.TakenOver(ctx)
		return dedupe.Result{DownstreamID: "done"}, nil
	}, dedupe.DoOptions{NoWait: true, RejectMismatch: true})
	if err != nil || !ran || takenOver {
		t.Errorf("Do(first payload) again = ran %v, TakenOver %v, %v; want it run at once, not taken over", ran, takenOver, err)
	}
}
