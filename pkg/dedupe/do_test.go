package dedupe_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
	"github.com/oncegate/oncegate/pkg/dedupe/jskv"
)

// ledgers returns one ledger of each kind, closed at the test's end.
func ledgers(t *testing.T) map[string]dedupe.Ledger {
	t.Helper()
	b, err := badgerledger.Open(t.TempDir(), badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	k, err := jskv.New(context.Background(), js, jskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return map[string]dedupe.Ledger{"badger": b, "jskv": k}
}

// intents are two payloads of one order: the same key, other fingerprints.
func intents(t *testing.T, order string) (first, reworded dedupe.Intent) {
	t.Helper()
	keyer, err := dedupe.NewKeyer(dedupe.KeySpec{Pipeline: "shop", Step: "charge", Fields: []string{"/order"}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := keyer.Intent([]byte(`{"order":"` + order + `","amount":10}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := keyer.Intent([]byte(`{"order":"` + order + `","amount":12}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.Key != b.Key || a.Fingerprint == b.Fingerprint {
		t.Fatal("the two payloads are not one key with two fingerprints")
	}
	return a, b
}

// TestDoMismatch: an intent whose key the ledger holds for another payload
// is the same work by default; with RejectMismatch it is refused with
// ErrMismatch, while the work is held and once it is committed, and the
// work does not run for it.
func TestDoMismatch(t *testing.T) {
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			first, reworded := intents(t, "o-"+name)
			release := make(chan struct{})
			started := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				_, _, err := l.Do(ctx, first, func(context.Context) (dedupe.Result, error) {
					close(started)
					<-release
					return dedupe.Result{DownstreamID: "ch_1"}, nil
				}, dedupe.DoOptions{})
				done <- err
			}()
			<-started
			never := func(context.Context) (dedupe.Result, error) {
				t.Error("the work ran for another payload")
				return dedupe.Result{}, nil
			}
			// Held: refused as a mismatch, not as held.
			_, ran, err := l.Do(ctx, reworded, never, dedupe.DoOptions{NoWait: true, RejectMismatch: true})
			if !errors.Is(err, dedupe.ErrMismatch) || ran {
				t.Errorf("Do(reworded, held) = ran %v, %v; want ErrMismatch", ran, err)
			}
			var held *dedupe.HeldError
			if _, _, err := l.Do(ctx, reworded, never, dedupe.DoOptions{NoWait: true}); !errors.As(err, &held) {
				t.Errorf("Do(reworded, held, accepting) = %v; want a *HeldError", err)
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			// Committed.
			_, ran, err = l.Do(ctx, reworded, never, dedupe.DoOptions{RejectMismatch: true})
			if !errors.Is(err, dedupe.ErrMismatch) || ran {
				t.Errorf("Do(reworded, committed) = ran %v, %v; want ErrMismatch", ran, err)
			}
			res, ran, err := l.Do(ctx, reworded, never, dedupe.DoOptions{})
			if err != nil || ran || res.DownstreamID != "ch_1" {
				t.Errorf("Do(reworded, committed, accepting) = %+v, ran %v, %v; want the stored result", res, ran, err)
			}
			res, ran, err = l.Do(ctx, first, never, dedupe.DoOptions{RejectMismatch: true})
			if err != nil || ran || res.DownstreamID != "ch_1" {
				t.Errorf("Do(first, committed) = %+v, ran %v, %v; want the stored result", res, ran, err)
			}
		})
	}
}

// TestIntentFrom: the function Do runs finds its intent on its context.
func TestIntentFrom(t *testing.T) {
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			in, _ := intents(t, "o-"+name)
			if _, ok := dedupe.IntentFrom(context.Background()); ok {
				t.Error("IntentFrom(Background) reported an intent")
			}
			var got dedupe.Intent
			var ok bool
			_, _, err := l.Do(context.Background(), in, func(ctx context.Context) (dedupe.Result, error) {
				got, ok = dedupe.IntentFrom(ctx)
				return dedupe.Result{}, nil
			}, dedupe.DoOptions{})
			if err != nil || !ok || got != in {
				t.Errorf("IntentFrom in Do = %v, %v (Do: %v); want %v", got, ok, err, in)
			}
		})
	}
}

// TestDoLeaseRunsOut: when the claim cannot be renewed (the JetStream
// server is gone), the function's context ends once the lease runs out,
// so that it stops before another worker takes the work over. It did not
// end: only a renewal refused as stale ended it.
func TestDoLeaseRunsOut(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	l, err := jskv.New(context.Background(), js, jskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	in, _ := intents(t, "o-lease")
	const lease = 600 * time.Millisecond
	var cause error
	var took time.Duration // from the claim to the end of the work's context
	start := time.Now()
	_, ran, err := l.Do(context.Background(), in, func(ctx context.Context) (dedupe.Result, error) {
		s.Shutdown() // no renewal reaches the ledger from now on
		select {
		case <-ctx.Done():
			cause, took = context.Cause(ctx), time.Since(start)
			return dedupe.Result{}, ctx.Err()
		case <-time.After(20 * lease):
			took = time.Since(start)
			return dedupe.Result{}, errors.New("the work's context did not end")
		}
	}, dedupe.DoOptions{Lease: lease})
	if !ran || err == nil {
		t.Fatalf("Do = ran %v, %v; want the work's error", ran, err)
	}
	if cause == nil || !strings.Contains(cause.Error(), "claim ran out") {
		t.Errorf("the work's context ended with %v, after %v; want it to end as the lease (%v) runs out", cause, took, lease)
	}
	if took > 10*lease {
		t.Errorf("the work ran %v under a lease of %v", took, lease)
	}
}

// TestRun: Run returns the value to the call that ran the work and the
// stored value, decoded, to every later call; a value that cannot be kept
// is returned once, the work recorded done.
func TestRun(t *testing.T) {
	type charge struct {
		ID     string    `json:"id"`
		Amount int       `json:"amount"`
		At     time.Time `json:"at"`
	}
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			in, reworded := intents(t, "o-"+name)
			at := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
			var runs atomic.Int64
			fn := func(ctx context.Context) (charge, error) {
				runs.Add(1)
				return charge{ID: "ch_1", Amount: 10, At: at}, nil
			}
			for i, in := range []dedupe.Intent{in, in, reworded} {
				v, ran, err := dedupe.Run(ctx, l, in, fn)
				if err != nil || ran != (i == 0) || v.ID != "ch_1" || v.Amount != 10 || !v.At.Equal(at) {
					t.Errorf("call %d: Run = %+v, ran %v, %v; want ch_1, ran on the first call only", i, v, ran, err)
				}
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("the work ran %d times; want 1", n)
			}

			// A value too large to keep, and one that does not encode.
			big, _ := intents(t, "big-"+name)
			bigFn := func(context.Context) (string, error) { return strings.Repeat("x", dedupe.MaxResultBytes), nil }
			v, ran, err := dedupe.Run(ctx, l, big, bigFn)
			if !ran || !errors.Is(err, dedupe.ErrResultTooLarge) || len(v) != dedupe.MaxResultBytes {
				t.Errorf("Run(too large) = %d bytes, ran %v, %v; want the value, ran, ErrResultTooLarge", len(v), ran, err)
			}
			v, ran, err = dedupe.Run(ctx, l, big, bigFn)
			if ran || !errors.Is(err, dedupe.ErrResultTooLarge) || v != "" {
				t.Errorf("Run(too large) again = %q, ran %v, %v; want nothing run, ErrResultTooLarge", v, ran, err)
			}
			nan, _ := intents(t, "nan-"+name)
			f, ran, err := dedupe.Run(ctx, l, nan, func(context.Context) (float64, error) { return math.NaN(), nil })
			if !ran || err == nil || !math.IsNaN(f) {
				t.Errorf("Run(NaN) = %v, ran %v, %v; want NaN, ran, an error", f, ran, err)
			}
			if _, ran, err := dedupe.Run(ctx, l, nan, func(context.Context) (float64, error) { return 1, nil }); ran || !errors.Is(err, dedupe.ErrResultTooLarge) {
				t.Errorf("Run(NaN) again = ran %v, %v; want nothing run, ErrResultTooLarge", ran, err)
			}
		})
	}
}
