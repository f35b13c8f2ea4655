package badgerledger_test

import (
	"testing"

	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
	"github.com/oncegate/oncegate/pkg/dedupe/dedupetest"
)

// BenchmarkBadgerLedger measures Begin+Commit pairs on fresh keys for each
// durability mode (see dedupetest.Benchmark). bench/ledger runs the same
// workload against the JetStream KV ledger and a raw JetStream publish.
func BenchmarkBadgerLedger(b *testing.B) {
	for _, mode := range []struct {
		name string
		open badgerledger.OpenOptions
		opts badgerledger.Options
	}{
		{"sync=writes", badgerledger.OpenOptions{SyncWrites: true}, badgerledger.Options{}},
		{"sync=explicit", badgerledger.OpenOptions{}, badgerledger.Options{}},
		{"sync=none", badgerledger.OpenOptions{}, badgerledger.Options{NoSync: true}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			dedupetest.Benchmark(b, func(b *testing.B) dedupe.Ledger {
				db, err := badgerledger.Open(b.TempDir(), mode.open)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { db.Close() })
				l, err := badgerledger.New(db, mode.opts)
				if err != nil {
					b.Fatal(err)
				}
				return l
			})
		})
	}
}
