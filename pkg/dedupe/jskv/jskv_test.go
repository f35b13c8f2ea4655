package jskv_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

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
