package badgerstore_test

import (
	"context"
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

func newBadgerLedger(t *testing.T, opts ledger.Options, open badgerstore.OpenOptions) *badgerstore.Ledger {
	t.Helper()
	db, err := badgerstore.Open(t.TempDir(), open)
	if err != nil {
		t.Fatalf("OpenBadger: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	l, err := badgerstore.New(db, badgerstore.Options{Options: opts})
	if err != nil {
		t.Fatalf("NewBadgerLedger: %v", err)
	}
	return l
}

func TestBadgerLedgerConformance(t *testing.T) {
	for _, tt := range []struct {
		name string
		open badgerstore.OpenOptions
	}{
		{"explicit-sync", badgerstore.OpenOptions{}},
		{"sync-writes", badgerstore.OpenOptions{SyncWrites: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ledgertest.Run(t, func(t *testing.T, opts ledger.Options) ledger.Ledger {
				return newBadgerLedger(t, opts, tt.open)
			})
		})
	}
	// The same suite with every Begin and Commit going through the batch
	// calls, whose commits take the claim from what the process remembers
	// writing instead of reading it back.
	t.Run("batched", func(t *testing.T) {
		ledgertest.Run(t, func(t *testing.T, opts ledger.Options) ledger.Ledger {
			return batchedLedger{newBadgerLedger(t, opts, badgerstore.OpenOptions{})}
		})
	})
	// And with every claim volatile, kept in memory: within the process a
	// ledger must not behave any differently for it.
	t.Run("volatile", func(t *testing.T) {
		ledgertest.Run(t, func(t *testing.T, opts ledger.Options) ledger.Ledger {
			return volatileLedger{newBadgerLedger(t, opts, badgerstore.OpenOptions{})}
		})
	})
	t.Run("batched-volatile", func(t *testing.T) {
		ledgertest.Run(t, func(t *testing.T, opts ledger.Options) ledger.Ledger {
			return volatileLedger{batchedLedger{newBadgerLedger(t, opts, badgerstore.OpenOptions{})}}
		})
	})
}

// volatileLedger makes every claim volatile.
type volatileLedger struct{ ledger.Ledger }

func (l volatileLedger) Begin(ctx context.Context, k dedupe.Key, o ledger.BeginOptions) (ledger.Claim, error) {
	o.Volatile = true
	return l.Ledger.Begin(ctx, k, o)
}

// batchedLedger sends Begin and Commit through BeginBatch and CommitBatch.
type batchedLedger struct{ *badgerstore.Ledger }

func (l batchedLedger) Begin(ctx context.Context, k dedupe.Key, o ledger.BeginOptions) (ledger.Claim, error) {
	r := l.BeginBatch(ctx, []ledger.BeginRequest{{Key: k, Options: o}})[0]
	return r.Claim, r.Err
}

func (l batchedLedger) Commit(ctx context.Context, k dedupe.Key, token uint64, res ledger.Result) error {
	return l.CommitBatch(ctx, []ledger.CommitRequest{{Key: k, Token: token, Result: res}})[0]
}
