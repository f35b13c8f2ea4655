package ledgertest

import (
	"context"
	"encoding/binary"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Benchmark measures Begin+Commit pairs on fresh keys, the cost of one unit
// of new work, with 1, 16 and 256 concurrent workers. One op is one pair;
// it also reports pairs/s. newLedger is called once per worker count.
func Benchmark(b *testing.B, newLedger func(b *testing.B) ledger.Ledger) {
	for _, workers := range []int{1, 16, 256} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) {
			l := newLedger(b)
			defer l.Close()
			benchPairs(b, l, workers)
		})
	}
}

func benchPairs(b *testing.B, l ledger.Ledger, workers int) {
	ctx := context.Background()
	var next atomic.Uint64
	result := ledger.Result{DownstreamID: "ticket-1", Response: make([]byte, 128)}
	seed := uint64(time.Now().UnixNano())
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
				binary.LittleEndian.PutUint64(k[8:], seed)
				c, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: "bench", Lease: time.Minute})
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
