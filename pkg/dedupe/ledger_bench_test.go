package dedupe_test

import (
	"context"
	"encoding/binary"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/pkg/dedupe"
)

// BenchmarkBadgerLedger measures Begin+Commit pairs on fresh keys, the cost
// of one unit of new work, with 1, 16 and 256 concurrent workers, for each
// durability mode. One op is one pair. bench/ledger runs the same workload
// against the JetStream KV ledger and a raw JetStream publish.
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
		for _, workers := range []int{1, 16, 256} {
			b.Run(mode.name+"/workers="+strconv.Itoa(workers), func(b *testing.B) {
				db, err := dedupe.OpenBadger(b.TempDir(), mode.open)
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				l, err := dedupe.NewBadgerLedger(db, mode.opts)
				if err != nil {
					b.Fatal(err)
				}
				benchPairs(b, l, workers)
			})
		}
	}
}

// benchPairs runs b.N Begin+Commit pairs on distinct keys from workers
// goroutines and reports pairs/s.
func benchPairs(b *testing.B, l dedupe.Ledger, workers int) {
	ctx := context.Background()
	var next atomic.Uint64
	result := dedupe.Result{DownstreamID: "ticket-1", Response: make([]byte, 128)}
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var k dedupe.Key
			for {
				i := next.Add(1)
				if i > uint64(b.N) {
					return
				}
				binary.LittleEndian.PutUint64(k[:], i)
				binary.LittleEndian.PutUint64(k[8:], uint64(b.N))
				c, err := l.Begin(ctx, k, dedupe.BeginOptions{Owner: "bench", Lease: time.Minute})
				if err != nil {
					b.Error(err)
					return
				}
				if err := l.Commit(ctx, k, c.Lease.Token, result); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
}
