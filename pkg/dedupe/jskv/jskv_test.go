package jskv_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/jskvstore"
	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/jskv"
)

// TestMain fails the package's tests if they leave goroutines behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNew: New creates the bucket it is given with a TTL of the retention
// plus an hour, and two ledgers on it run the work once.
func TestNew(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	opts := jskv.Options{Bucket: "public-ledger", Retention: 48 * time.Hour}
	a, err := jskv.New(ctx, js, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := jskv.New(ctx, js, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	kv, err := js.KeyValue(ctx, "public-ledger")
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.TTL(), 49*time.Hour; got != want {
		t.Errorf("bucket TTL = %v; want %v", got, want)
	}
	runs := 0
	fn := func(context.Context) (dedupe.Result, error) { runs++; return dedupe.Result{DownstreamID: "once"}, nil }
	for _, l := range []*jskv.Ledger{a, b} {
		if res, _, err := l.Do(ctx, dedupe.Intent{Key: dedupe.Key{1}}, fn, dedupe.DoOptions{}); err != nil || res.DownstreamID != "once" {
			t.Errorf("Do = %+v, %v", res, err)
		}
	}
	if runs != 1 {
		t.Errorf("the work ran %d times; want 1", runs)
	}
	if _, err := jskv.New(ctx, js, jskv.Options{Bucket: "public-ledger", Retention: 72 * time.Hour}); err == nil {
		t.Error("New on a bucket whose TTL is shorter than the retention succeeded")
	}
}

// TestClockSkew checks that Options.ClockSkew reaches the ledger: a claim
// whose holder stopped renewing it (its lease 1 ms) is held, with the
// skew left as RetryAfter, for a ledger that allows for clocks an hour
// apart, and taken over at once by one that allows for none.
func TestClockSkew(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	k := dedupe.Key{7}
	holder, err := jskvstore.New(ctx, js, jskvstore.Options{Bucket: "skew-ledger"})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	claim, err := holder.Begin(ctx, k, ledger.BeginOptions{Owner: "stopped", Lease: time.Millisecond})
	if err != nil || claim.Status != ledger.StatusNew {
		t.Fatalf("Begin = %v, %v", claim.Status, err)
	}
	for time.Now().Before(claim.Lease.Until) { // a millisecond: the lease runs out by this clock
		runtime.Gosched()
	}
	fn := func(context.Context) (dedupe.Result, error) { return dedupe.Result{DownstreamID: "ran"}, nil }

	skewed, err := jskv.New(ctx, js, jskv.Options{Bucket: "skew-ledger", ClockSkew: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer skewed.Close()
	_, ran, err := skewed.Do(ctx, dedupe.Intent{Key: k}, fn, dedupe.DoOptions{NoWait: true})
	var held *dedupe.HeldError
	if !errors.As(err, &held) || ran || held.RetryAfter < 59*time.Minute {
		t.Fatalf("Do with ClockSkew 1h = ran %v, %v; want a HeldError with about an hour left, the work not run", ran, err)
	}

	plain, err := jskv.New(ctx, js, jskv.Options{Bucket: "skew-ledger"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if res, ran, err := plain.Do(ctx, dedupe.Intent{Key: k}, fn, dedupe.DoOptions{NoWait: true}); err != nil || !ran || res.DownstreamID != "ran" {
		t.Fatalf("Do with no ClockSkew = %+v, ran %v, %v; want the lapsed claim taken over and the work run", res, ran, err)
	}
}
