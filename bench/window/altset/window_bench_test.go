package altset_test

import (
	"flag"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/bench/window/altset"
	"github.com/oncegate/oncegate/pkg/dedupe/window"
)

// The window benchmarks run window.Window side by side with the sets a user
// would write instead (package altset) on altset's workload: a steady state
// of a given number of live keys, a share of the operations repeating one of
// them, no expiry during the run. altset.Workload documents the model and the
// capacities; bench/window runs the same comparison as a table, at 1 and 2
// GOMAXPROCS, with the ratio to xsync.

var benchLive = flag.String("bench.live", "",
	"live set sizes for BenchmarkWindow, e.g. 1M,10M (default 64K,1M)")

const benchSeed = 0x5eed_0f_0ace9a7e

// benchLives returns the live set sizes BenchmarkWindow runs.
func benchLives(b *testing.B) []int {
	s := *benchLive
	if s == "" {
		s = "64K,1M"
	}
	lives, err := altset.ParseCounts(s)
	if err != nil {
		b.Fatalf("-bench.live: %v", err)
	}
	return lives
}

// benchImpls returns the window and its alternatives.
func benchImpls() []altset.Impl {
	window := altset.Impl{Name: "window", New: func(capacity int, ttl time.Duration) (altset.Set, error) {
		w, err := window.New(window.Options{Capacity: capacity, TTL: ttl})
		if err != nil {
			return nil, err
		}
		return w, nil
	}}
	return append([]altset.Impl{window}, altset.Alternatives()...)
}

// memPerKey caches bytesPerKey per impl and live set size.
var memPerKey = make(map[memKey]memCost)

type memKey struct {
	impl string
	live int
}

type memCost struct{ heap, table float64 }

// bytesPerKey returns the heap growth per key of a set made for live keys
// and holding them, and for the window also its table bytes per key.
func bytesPerKey(b *testing.B, impl altset.Impl, live int) memCost {
	key := memKey{impl.Name, live}
	if c, ok := memPerKey[key]; ok {
		return c
	}
	heap, table, err := altset.MemoryPerKey(impl, live, benchSeed)
	if err != nil {
		b.Fatal(err)
	}
	c := memCost{heap: heap, table: table}
	memPerKey[key] = c
	return c
}

// newBenchSet makes a set of impl for wl and prefills it.
func newBenchSet(b *testing.B, impl altset.Impl, wl *altset.Workload) altset.Set {
	s, err := impl.New(wl.MaxKeys(), altset.TTL)
	if err != nil {
		b.Fatalf("%s: New error = %v", impl.Name, err)
	}
	if seen := wl.Prefill(s); seen != 0 {
		b.Fatalf("%s: %d of %d new keys reported seen while prefilling", impl.Name, seen, wl.Live)
	}
	return s
}

// BenchmarkWindow measures SeenOrAdd on one goroutine at a steady state of
// live keys, for each share of duplicates and each implementation. Besides
// ns/op and allocs/op it reports Mops/s, heap-B/key (heap growth per live key
// of a set made for exactly the live keys; for the window also table-B/key,
// Bytes per live key) and dupmiss% (duplicates reported new: 0 unless a set
// lost a live key).
//
// -cpu 1,2 gives the garbage collector a second core but runs one goroutine;
// BenchmarkWindowSeenOrAddParallel and bench/window measure contention.
func BenchmarkWindow(b *testing.B) {
	for _, live := range benchLives(b) {
		for _, dup := range []int{0, 10, 90} {
			for _, impl := range benchImpls() {
				name := fmt.Sprintf("live=%s/dup=%d%%/impl=%s", altset.FormatCount(live), dup, impl.Name)
				b.Run(name, func(b *testing.B) { benchSteady(b, impl, live, float64(dup)/100) })
			}
		}
	}
}

func benchSteady(b *testing.B, impl altset.Impl, live int, dup float64) {
	mem := bytesPerKey(b, impl, live)
	wl := altset.NewWorkload(live, dup, benchSeed)
	s := newBenchSet(b, impl, wl)
	lanes := altset.NewLanes(1, wl.RoundSize(1))
	lane := &lanes[0]
	var evicted uint64
	drop := func() {
		if w, ok := s.(*window.Window); ok {
			evicted += w.Stats().Evictions
		}
		altset.Close(s)
		s = nil
	}
	// next fills the lane with the next round, first replacing a set that
	// has taken its budget of fresh keys. It runs with the timer stopped.
	next := func() {
		if wl.Next(lanes) {
			return
		}
		drop()
		runtime.GC() // collect the old set now, not during the measurement
		s = newBenchSet(b, impl, wl)
		if !wl.Next(lanes) {
			b.Fatalf("a round of %d operations does not fit a new set", len(lane.Keys))
		}
	}
	next()
	runtime.GC()

	hits, dups, i := 0, 0, 0
	b.ReportAllocs()
	for b.Loop() {
		if s.SeenOrAdd(lane.Keys[i]) {
			hits++
		}
		if i++; i == len(lane.Keys) {
			b.StopTimer()
			dups += lane.Dups
			next()
			i = 0
			b.StartTimer()
		}
	}
	dups += lane.DupsIn(i)

	if el := b.Elapsed(); el > 0 {
		b.ReportMetric(float64(b.N)/el.Seconds()/1e6, "Mops/s")
	}
	b.ReportMetric(mem.heap, "heap-B/key")
	if mem.table > 0 {
		b.ReportMetric(mem.table, "table-B/key")
	}
	if dups > 0 {
		b.ReportMetric(100*float64(dups-hits)/float64(dups), "dupmiss%")
	}
	drop()
	if evicted > 0 {
		b.Logf("the window evicted %d live keys (it was made for every key the run adds: this is a bug)", evicted)
	}
}

// BenchmarkWindowSeenOrAddParallel is a small contention benchmark: GOMAXPROCS
// goroutines (set it with -cpu) call SeenOrAdd on one set of 64K live keys,
// 10% of the operations duplicates. Each goroutine has its own stream of
// fresh keys, a few thousand operations long; a goroutine that gets to the
// end of its stream starts it again, and then every operation is a
// duplicate. So it keeps the stated mix only for -benchtime=Nx with N up to
// that length times GOMAXPROCS, e.g. the -benchtime=100x that CI uses; for
// throughput use bench/window.
func BenchmarkWindowSeenOrAddParallel(b *testing.B) {
	const live = 64_000
	for _, impl := range benchImpls() {
		b.Run("impl="+impl.Name, func(b *testing.B) {
			wl := altset.NewWorkload(live, 0.10, benchSeed)
			s := newBenchSet(b, impl, wl)
			defer altset.Close(s)
			procs := runtime.GOMAXPROCS(0)
			lanes := altset.NewLanes(procs, wl.RoundSize(procs))
			if !wl.Next(lanes) {
				b.Fatalf("a round of %d×%d operations does not fit a new set", procs, len(lanes[0].Keys))
			}
			var lane atomic.Int32
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				keys := lanes[int(lane.Add(1)-1)%len(lanes)].Keys
				i := 0
				for pb.Next() {
					s.SeenOrAdd(keys[i])
					if i++; i == len(keys) {
						i = 0
					}
				}
			})
		})
	}
}
