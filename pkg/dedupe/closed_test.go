package dedupe_test

import (
	"context"
	"errors"
	"testing"

	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
	"github.com/oncegate/oncegate/pkg/dedupe/jskv"
)

// TestClosedLedgerErrClosed: every ledger, once closed, answers Do with an
// error that errors.Is dedupe.ErrClosed.
func TestClosedLedgerErrClosed(t *testing.T) {
	b, err := badgerledger.Open(t.TempDir(), badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	k, err := jskv.New(context.Background(), js, jskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]interface {
		dedupe.Ledger
		Close() error
	}{"badger": b, "jskv": k} {
		if err := l.Close(); err != nil {
			t.Fatalf("%s: Close: %v", name, err)
		}
		in, _ := intents(t, "o-closed-"+name)
		_, ran, err := l.Do(context.Background(), in, func(context.Context) (dedupe.Result, error) {
			t.Errorf("%s: the work ran on a closed ledger", name)
			return dedupe.Result{}, nil
		}, dedupe.DoOptions{})
		if ran || !errors.Is(err, dedupe.ErrClosed) {
			t.Errorf("%s: Do after Close = ran %v, %v; want an error wrapping dedupe.ErrClosed", name, ran, err)
		}
	}
}
