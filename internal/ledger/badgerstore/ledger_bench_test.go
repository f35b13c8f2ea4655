package badgerstore_test

import (
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
)

// BenchmarkBadgerLedger measures Begin+Commit pairs on fresh keys for each
// durability mode (see ledgertest.Benchmark). bench/ledger runs the same
// workload against the JetStream KV ledger and a raw JetStream publish.
func BenchmarkBadgerLedger(b *testing.B) {
	for _, mode := range []struct {
		name string
		open badgerstore.OpenOptions
		opts badgerstore.Options
	}{
		{"sync=writes", badgerstore.OpenOptions{SyncWrites: true}, badgerstore.Options{}},
		{"sync=explicit", badgerstore.OpenOptions{}, badgerstore.Options{}},
		{"sync=none", badgerstore.OpenOptions{}, badgerstore.Options{NoSync: true}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			ledgertest.Benchmark(b, func(b *testing.B) ledger.Ledger {
				db, err := badgerstore.Open(b.TempDir(), mode.open)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { db.Close() })
				l, err := badgerstore.New(db, mode.opts)
				if err != nil {
					b.Fatal(err)
				}
				return l
			})
		})
	}
}
