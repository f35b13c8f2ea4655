package badgerledger_test

import (
	"context"
	"testing"

	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
	"github.com/oncegate/oncegate/pkg/dedupe/dedupetest"
)

func newBadgerLedger(t *testing.T, opts dedupe.LedgerOptions, open badgerledger.OpenOptions) *badgerledger.Ledger {
	t.Helper()
	db, err := badgerledger.Open(t.TempDir(), open)
	if err != nil {
		t.Fatalf("OpenBadger: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	l, err := badgerledger.New(db, badgerledger.Options{LedgerOptions: opts})
	if err != nil {
		t.Fatalf("NewBadgerLedger: %v", err)
	}
	return l
}

func TestBadgerLedgerConformance(t *testing.T) {
	for _, tt := range []struct {
		name string
		open badgerledger.OpenOptions
	}{
		{"explicit-sync", badgerledger.OpenOptions{}},
		{"sync-writes", badgerledger.OpenOptions{SyncWrites: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dedupetest.Run(t, func(t *testing.T, opts dedupe.LedgerOptions) dedupe.Ledger {
				return newBadgerLedger(t, opts, tt.open)
			})
		})
	}
	// The same suite with every Begin and Commit going through the batch
	// calls, whose commits take the claim from what the process remembers
	// writing instead of reading it back.
	t.Run("batched", func(t *testing.T) {
		dedupetest.Run(t, func(t *testing.T, opts dedupe.LedgerOptions) dedupe.Ledger {
			return batchedLedger{newBadgerLedger(t, opts, badgerledger.OpenOptions{})}
		})
	})
	// And with every claim volatile, kept in memory: within the process a
	// ledger must not behave any differently for it.
	t.Run("volatile", func(t *testing.T) {
		dedupetest.Run(t, func(t *testing.T, opts dedupe.LedgerOptions) dedupe.Ledger {
			return volatileLedger{newBadgerLedger(t, opts, badgerledger.OpenOptions{})}
		})
	})
	t.Run("batched-volatile", func(t *testing.T) {
		dedupetest.Run(t, func(t *testing.T, opts dedupe.LedgerOptions) dedupe.Ledger {
			return volatileLedger{batchedLedger{newBadgerLedger(t, opts, badgerledger.OpenOptions{})}}
		})
	})
}

// volatileLedger makes every claim volatile.
type volatileLedger struct{ dedupe.Ledger }

func (l volatileLedger) Begin(ctx context.Context, k dedupe.Key, o dedupe.BeginOptions) (dedupe.Claim, error) {
	o.Volatile = true
	return l.Ledger.Begin(ctx, k, o)
}

// batchedLedger sends Begin and Commit through BeginBatch and CommitBatch.
type batchedLedger struct{ *badgerledger.Ledger }

func (l batchedLedger) Begin(ctx context.Context, k dedupe.Key, o dedupe.BeginOptions) (dedupe.Claim, error) {
	r := l.BeginBatch(ctx, []dedupe.BeginRequest{{Key: k, Options: o}})[0]
	return r.Claim, r.Err
}

func (l batchedLedger) Commit(ctx context.Context, k dedupe.Key, token uint64, res dedupe.Result) error {
	return l.CommitBatch(ctx, []dedupe.CommitRequest{{Key: k, Token: token, Result: res}})[0]
}
