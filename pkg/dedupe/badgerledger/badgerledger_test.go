package badgerledger_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
)

// TestMain fails the package's tests if they leave goroutines behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestReopen: Close releases the directory, and a ledger opened on it again
// answers a committed key with the stored result without running the work;
// a second Open while the first holds the directory fails.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	key := dedupe.Key{7}
	l, err := badgerledger.Open(dir, badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := badgerledger.Open(dir, badgerledger.Options{}); err == nil {
		t.Error("a second Open of a held directory succeeded")
	}
	res, ran, err := l.Do(ctx, dedupe.Intent{Key: key}, func(context.Context) (dedupe.Result, error) {
		return dedupe.Result{DownstreamID: "INC-1", Response: []byte("opened")}, nil
	}, dedupe.DoOptions{})
	if err != nil || !ran || res.DownstreamID != "INC-1" {
		t.Fatalf("Do = %+v, %v, %v; want it run", res, ran, err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, _, err := l.Do(ctx, dedupe.Intent{Key: key}, nil, dedupe.DoOptions{}); err == nil {
		t.Error("Do after Close succeeded")
	}

	l, err = badgerledger.Open(dir, badgerledger.Options{})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	defer l.Close()
	res, ran, err = l.Do(ctx, dedupe.Intent{Key: key}, func(context.Context) (dedupe.Result, error) {
		t.Error("committed work ran again after a reopen")
		return dedupe.Result{}, nil
	}, dedupe.DoOptions{})
	if err != nil || ran || res.DownstreamID != "INC-1" || string(res.Response) != "opened" {
		t.Errorf("Do after reopen = %+v, %v, %v; want the stored result", res, ran, err)
	}
}

// TestOpenOptions: options the ledger cannot honour fail Open.
func TestOpenOptions(t *testing.T) {
	for _, opts := range []badgerledger.Options{
		{Retention: -1, InMemory: true},
		{EncryptionKeyFile: "/nonexistent/key", InMemory: true},
	} {
		if l, err := badgerledger.Open("", opts); err == nil {
			l.Close()
			t.Errorf("Open(%+v) succeeded", opts)
		}
	}
}
