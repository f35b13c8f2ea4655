package badgerstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// BenchmarkBadgerLedger measures Begin+Commit pairs on fresh keys for each
// durability mode (see ledgertest.Benchmark); ",volatile" makes the claims
// volatile, as a replayable pipeline's are. bench/ledger runs the same
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
		{"sync=explicit,volatile", badgerstore.OpenOptions{}, badgerstore.Options{}},
	} {
		volatile := strings.HasSuffix(mode.name, ",volatile")
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
				if volatile {
					return volatileClaims{l}
				}
				return l
			})
		})
	}
}

// volatileClaims makes every claim volatile.
type volatileClaims struct{ *badgerstore.Ledger }

func (l volatileClaims) Begin(ctx context.Context, k dedupe.Key, o ledger.BeginOptions) (ledger.Claim, error) {
	o.Volatile = true
	return l.Ledger.Begin(ctx, k, o)
}
