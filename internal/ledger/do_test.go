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
			res, r, err := ledger.Do(context.Background(), l, key, fn, dedupe.DoOptions{Lease: 200 * time.Millisecond})
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
	if _, _, err := ledger.Do(ctx, l, key, func(context.Context) (dedupe.Result, error) { return dedupe.Result{}, boom }, dedupe.DoOptions{}); !errors.Is(err, boom) {
		t.Fatalf("Do = %v; want the work's error", err)
	}
	res, ran, err := ledger.Do(ctx, l, key, func(context.Context) (dedupe.Result, error) { return dedupe.Result{DownstreamID: "second try"}, nil }, dedupe.DoOptions{NoWait: true})
	if err != nil || !ran || res.DownstreamID != "second try" {
		t.Fatalf("retry after an error: %+v, %v, %v; want it run at once", res, ran, err)
	}

	key[0] = 3
	refused := errors.New("card declined")
	if _, _, err := ledger.Do(ctx, l, key, func(context.Context) (dedupe.Result, error) { return dedupe.Result{}, dedupe.Permanent(refused) }, dedupe.DoOptions{}); !errors.Is(err, refused) {
		t.Fatalf("Do = %v; want the permanent error", err)
	}
	_, ran, err = ledger.Do(ctx, l, key, func(context.Context) (dedupe.Result, error) {
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
		ledger.Do(context.Background(), l, key, func(context.Context) (dedupe.Result, error) {
			close(started)
			<-release
			return dedupe.Result{}, nil
		}, dedupe.DoOptions{})
	}()
	<-started
	_, _, err := ledger.Do(context.Background(), l, key, func(context.Context) (dedupe.Result, error) { return dedupe.Result{}, nil }, dedupe.DoOptions{NoWait: true})
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
		_, ran, err := ledger.Do(ctx, l, tt.key, func(ctx context.Context) (dedupe.Result, error) {
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
