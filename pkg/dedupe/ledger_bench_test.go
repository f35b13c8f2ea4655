package dedupe_test

import (
	"testing"

	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/dedupetest"
)

// BenchmarkBadgerLedger measures Begin+Commit pairs on fresh keys for each
// durability mode (see dedupetest.Benchmark). bench/ledger runs the same
// workload against the JetStream KV ledger and a raw JetStream publish.
func BenchmarkBadgerLedger(b *testing.B) {
	for _, mode := range []struct {
		name string
		open dedupe.OpenBadgerOptions
		opts dedupe.BadgerLedgerOptions
	}{
		{"sync=writes", dedupe.OpenBadgerOptions{SyncWrites: true}, dedupe.BadgerLedgerOptions{}},
		{"sync=explicit", dedupe.OpenBadgerOptions{}, dedupe.BadgerLedgerOptions{}},
		{"sync=none", dedupe.OpenBadgerOptions{}, dedupe.BadgerLedgerOptions{NoSync: true}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			dedupetest.Benchmark(b, func(b *testing.B) dedupe.Ledger {
				db, err := dedupe.OpenBadger(b.TempDir(), mode.open)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { db.Close() })
				l, err := dedupe.NewBadgerLedger(db, mode.opts)
				if err != nil {
					b.Fatal(err)
				}
				return l
			})
		})
	}
}
