package dedupe_test

import (
	"testing"

	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/dedupetest"
)

func newBadgerLedger(t *testing.T, opts dedupe.LedgerOptions, open dedupe.OpenBadgerOptions) *dedupe.BadgerLedger {
	t.Helper()
	db, err := dedupe.OpenBadger(t.TempDir(), open)
	if err != nil {
		t.Fatalf("OpenBadger: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	l, err := dedupe.NewBadgerLedger(db, dedupe.BadgerLedgerOptions{LedgerOptions: opts})
	if err != nil {
		t.Fatalf("NewBadgerLedger: %v", err)
	}
	return l
}

func TestBadgerLedgerConformance(t *testing.T) {
	for _, tt := range []struct {
		name string
		open dedupe.OpenBadgerOptions
	}{
		{"explicit-sync", dedupe.OpenBadgerOptions{}},
		{"sync-writes", dedupe.OpenBadgerOptions{SyncWrites: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dedupetest.Run(t, func(t *testing.T, opts dedupe.LedgerOptions) dedupe.Ledger {
				return newBadgerLedger(t, opts, tt.open)
			})
		})
	}
}
