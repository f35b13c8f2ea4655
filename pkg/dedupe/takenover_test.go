package dedupe_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/jskv"
)

// TestTakenOverOnlyIfMaybeDone: the retry of work whose function returned
// a plain error runs with TakenOver false (the error says the work was not
// done); after a panic, an error marked MaybeDone, or an error returned
// once the work's context had ended, it runs with TakenOver true (the work
// may have been done part way), on each ledger.
// (A holder killed mid-work: TestKillBetweenEffectAndCommit in package
// httponce; a lease that ran out: TestTakenOverAfterLeaseRanOut.)
func TestTakenOverOnlyIfMaybeDone(t *testing.T) {
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			for _, tt := range []struct {
				name string
				fail func() error
				want bool
			}{
				{"plain error", func() error { return errors.New("the card network said no") }, false},
				{"panic", func() error { panic("the work failed mid-way") }, true},
				{"MaybeDone", func() error { return dedupe.MaybeDone(errors.New("the card network timed out")) }, true},
				{"error once the context ended", nil, true},
			} {
				in, _ := intents(t, name+"-"+tt.name)
				func() {
					defer func() { recover() }()
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					_, ran, err := l.Do(ctx, in, func(ctx context.Context) (dedupe.Result, error) {
						if tt.fail == nil {
							// The caller gives up (a consumer stopping):
							// the work's request is cut mid-way.
							cancel()
							<-ctx.Done()
							return dedupe.Result{}, ctx.Err()
						}
						return dedupe.Result{}, tt.fail()
					}, dedupe.DoOptions{})
					if !ran || err == nil {
						t.Errorf("%s: first Do = ran %v, %v; want ran, its error", tt.name, ran, err)
					}
				}()
				var got bool
				_, ran, err := l.Do(context.Background(), in, func(ctx context.Context) (dedupe.Result, error) {
					got = dedupe.TakenOver(ctx)
					return dedupe.Result{DownstreamID: "ch_1"}, nil
				}, dedupe.DoOptions{NoWait: true})
				if err != nil || !ran || got != tt.want {
					t.Errorf("%s: the retry's Do = ran %v, %v, TakenOver %v; want it run at once, TakenOver %v", tt.name, ran, err, got, tt.want)
				}
			}
		})
	}
}

// TestTakenOverAfterLeaseRanOut: a holder that stalls cut off from the
// ledger (its NATS connection closed) loses its claim when the lease runs
// out, and the worker that then takes the work over runs it with
// TakenOver true: the stalled holder may have done it.
func TestTakenOverAfterLeaseRanOut(t *testing.T) {
	s := natstest.RunServer(t)
	ncA, jsA := natstest.Connect(t, s)
	_, jsB := natstest.Connect(t, s)
	ctx := context.Background()
	a, err := jskv.New(ctx, jsA, jskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := jskv.New(ctx, jsB, jskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	in, _ := intents(t, "o-stalled")
	const lease = 600 * time.Millisecond
	claimed, takenOver := make(chan struct{}), make(chan struct{})
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		a.Do(ctx, in, func(ctx context.Context) (dedupe.Result, error) {
			ncA.Close() // cut off: no renewal, and no release, reaches the ledger
			close(claimed)
			<-takenOver // stalled, whatever its context says
			return dedupe.Result{}, errors.New("stalled")
		}, dedupe.DoOptions{Lease: lease})
	}()
	<-claimed
	var got, ran bool
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		_, ran, err = b.Do(ctx, in, func(ctx context.Context) (dedupe.Result, error) {
			got = dedupe.TakenOver(ctx)
			return dedupe.Result{DownstreamID: "reconciled"}, nil
		}, dedupe.DoOptions{NoWait: true})
		var held *dedupe.HeldError
		if !errors.As(err, &held) || time.Now().After(deadline) {
			if err != nil || !ran {
				t.Errorf("Do by the next worker = ran %v, %v; want it run", ran, err)
			}
			break
		}
		time.Sleep(min(held.RetryAfter, lease/20)) // poll until the claim runs out
	}
	close(takenOver)
	<-aDone
	if !got {
		t.Error("the work taken over from a holder whose lease ran out ran with TakenOver false")
	}
}
