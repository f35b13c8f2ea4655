package altset

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/pkg/dedupe/window"
)

// TTL is the TTL the benchmarks give every set: long enough that no key
// expires and no generation is swapped during a run, so every set runs at
// the steady state of "live keys, all within the TTL" and the comparison is
// of lookups and inserts, not of expiry.
const TTL = time.Hour

// A Workload generates the keys for one set at a steady state of Live live
// keys, a fraction Dup of the operations repeating one of them.
//
// The model:
//
//   - Keys are Key(seed, pos) for positions 0, 1, 2, …: distinct, and random
//     looking. The history is the positions added so far.
//   - Prefill adds positions [0, Live): the set starts with Live live keys.
//   - Each round of operations (Next) is a fraction Dup of duplicates and
//     the rest fresh keys, the next positions of the history. A duplicate
//     repeats a key chosen uniformly among the newest Live-F keys added
//     before the round, F being the fresh keys of the round, so it is among
//     the newest Live keys at every moment of the round: a live key in any
//     set that keeps the newest Live keys, and in every set here, which keep
//     all of them (see Budget).
//   - No key expires (TTL), so fresh keys make the set grow. After Budget
//     fresh keys Next refuses, and the caller builds a new set and calls
//     Prefill, outside the measurement. A set thus holds Live to
//     Live+Budget keys while it is measured.
//
// Capacity, which is the choice that makes this fair: every set is made for
// MaxKeys, the most keys it holds during the run. The window gets Capacity
// MaxKeys, so it evicts nothing (the benchmarks check its Stats); the maps
// are presized for MaxKeys, so none resizes; otter's MaximumSize is MaxKeys,
// so it evicts nothing. Memory per live key is measured apart, on sets made
// for exactly Live keys.
//
// The two-generation sets are measured at their steady state: Prefill swaps
// their generations once (see Settler), so the Live keys are in the previous
// generation, as after every TTL boundary, and a new key costs a lookup
// there before the current generation takes it. (Measured before any swap,
// with an empty previous generation, they would look up to twice as fast for
// new keys; that is not a state they stay in.)
//
// A Workload is not safe for concurrent use; its rounds are.
type Workload struct {
	Live int     // live keys
	Dup  float64 // share of operations that repeat a live key, 0 to 1
	seed uint64
	hist uint64 // positions added so far
	rng  uint64
}

// NewWorkload returns a Workload for live keys. Workloads with the same seed
// generate the same keys.
func NewWorkload(live int, dup float64, seed uint64) *Workload {
	return &Workload{Live: live, Dup: dup, seed: seed, rng: seed}
}

// Key returns the key at position pos of the history of the workloads with
// seed. It is a bijection of pos (the splitmix64 finalizer), so keys never
// collide.
func Key(seed, pos uint64) uint64 {
	z := pos*0x9e3779b97f4a7c15 + seed
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Budget is how many fresh keys a set takes after Prefill before Next asks
// for a new one: half of Live.
func (w *Workload) Budget() int { return w.Live / 2 }

// MaxKeys is the most keys a set holds during the workload: Live + Budget.
func (w *Workload) MaxKeys() int { return w.Live + w.Budget() }

// Fresh returns how many fresh keys the rounds since Prefill generated.
func (w *Workload) Fresh() int { return int(w.hist) - w.Live }

// Prefill adds the Live keys to s, a new set, and restarts the history with
// them. It adds them from GOMAXPROCS goroutines, each a share, only to build
// big sets faster. It returns how many of them s reported seen, which is 0
// for a correct set.
func (w *Workload) Prefill(s Set) int {
	n := uint64(runtime.GOMAXPROCS(0))
	live := uint64(w.Live)
	var seen atomic.Int64
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			c := int64(0)
			for pos := g * live / n; pos < (g+1)*live/n; pos++ {
				if s.SeenOrAdd(Key(w.seed, pos)) {
					c++
				}
			}
			seen.Add(c)
		})
	}
	wg.Wait()
	if st, ok := s.(Settler); ok {
		st.Settle()
	}
	w.hist = live
	return int(seen.Load())
}

// Settler is a two-generation set. Prefill settles it after adding the live
// keys, so that it is measured as it runs at a steady state: some time after
// a swap, with the live keys in the previous generation, where a new key is
// looked up before the current generation takes it. Measured right after it
// was made instead, its previous generation would be empty and cost nothing.
type Settler interface {
	Settle()
}

// RoundSize returns the operations per lane of a round over lanes lanes: a
// round adds at most Live/8 fresh keys, so a budget lasts several rounds,
// and a lane holds at most 256Ki operations.
func (w *Workload) RoundSize(lanes int) int {
	fresh := max(1-w.Dup, 1e-3)
	n := float64(w.Live) / 8 / float64(lanes) / fresh
	return int(min(max(n, 1), 1<<18))
}

// A Lane is one goroutine's operations in a round.
type Lane struct {
	Keys []uint64
	Dup  []bool // Dup[i] reports whether Keys[i] repeats a live key
	Dups int    // duplicates in Keys
}

// NewLanes returns n lanes of size operations.
func NewLanes(n, size int) []Lane {
	lanes := make([]Lane, n)
	for i := range lanes {
		lanes[i] = Lane{Keys: make([]uint64, size), Dup: make([]bool, size)}
	}
	return lanes
}

// DupsIn returns the duplicates among the first n operations of l.
func (l *Lane) DupsIn(n int) int {
	d := 0
	for _, dup := range l.Dup[:n] {
		if dup {
			d++
		}
	}
	return d
}

// Next fills lanes with the next round. The lanes' fresh keys are distinct,
// and their duplicates repeat keys added before the round, so the lanes can
// run concurrently in any order. Next returns false, filling nothing, if the
// round could take the fresh keys since Prefill past Budget: the caller must
// then make a new set, Prefill it and call Next again. Rounds of RoundSize
// always fit a new set.
func (w *Workload) Next(lanes []Lane) bool {
	ops := 0
	for i := range lanes {
		ops += len(lanes[i].Keys)
	}
	// An upper bound of the round's fresh keys: mean plus 4 standard deviations.
	p := 1 - w.Dup
	bound := p*float64(ops) + 4*math.Sqrt(float64(ops)*p*w.Dup) + 1
	if float64(w.Fresh())+bound > float64(w.Budget()) {
		return false
	}
	// First decide which operations are duplicates, keeping a random word for
	// each; then the round's fresh count fixes the span duplicates draw from.
	var thresh uint64 = math.MaxUint64
	if w.Dup < 1 {
		thresh = uint64(w.Dup * (1 << 64))
	}
	fresh := uint64(0)
	for i := range lanes {
		l := &lanes[i]
		l.Dups = 0
		for j := range l.Keys {
			if w.Dup > 0 && w.rand() < thresh {
				l.Dup[j], l.Keys[j] = true, w.rand()
				l.Dups++
			} else {
				l.Dup[j] = false
				fresh++
			}
		}
	}
	span := uint64(w.Live) - fresh
	pos := w.hist
	for i := range lanes {
		l := &lanes[i]
		for j, r := range l.Keys {
			if l.Dup[j] {
				back, _ := bits.Mul64(r, span)
				l.Keys[j] = Key(w.seed, w.hist-1-back)
			} else {
				l.Keys[j] = Key(w.seed, pos)
				pos++
			}
		}
	}
	w.hist = pos
	return true
}

// rand is wyrand.
func (w *Workload) rand() uint64 {
	w.rng += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(w.rng, w.rng^0xe7037ed1a0b428db)
	return hi ^ lo
}

// HeapGrowth runs build and returns its result and how much the live heap
// grew, with a garbage collection before and after. For a set, that growth
// divided by its keys is its memory per key.
func HeapGrowth[T any](build func() (T, error)) (T, int64, error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v, err := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return v, int64(after.HeapAlloc) - int64(before.HeapAlloc), err
}

// ParseCount parses a count such as 64K, 1M or 10M (decimal: 1M is
// 1,000,000) or a plain number.
func ParseCount(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1_000, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1_000_000, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("count %q: want a positive number, optionally with K or M", s)
	}
	return n * mult, nil
}

// FormatCount formats n as ParseCount reads it, as short as it can.
func FormatCount(n int) string {
	switch {
	case n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n%1_000 == 0:
		return strconv.Itoa(n/1_000) + "K"
	}
	return strconv.Itoa(n)
}

// ParseCounts parses a comma-separated list of counts.
func ParseCounts(s string) ([]int, error) {
	var ns []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := ParseCount(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// MemoryPerKey builds a set of impl made for exactly live keys, holding
// them, and returns its heap growth per live key and, for a set that reports
// its table size (the window's Bytes), the table bytes per live key. It
// closes the set before returning.
func MemoryPerKey(impl Impl, live int, seed uint64) (heap, table float64, err error) {
	wl := NewWorkload(live, 0, seed)
	s, grew, err := HeapGrowth(func() (Set, error) {
		s, err := impl.New(live, TTL)
		if err == nil {
			wl.Prefill(s)
		}
		return s, err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", impl.Name, err)
	}
	defer Close(s)
	if w, ok := s.(interface{ Stats() window.Stats }); ok {
		// The window's table: 16 bytes a slot, off the Go heap on Linux.
		table = float64(16*w.Stats().Capacity) / float64(live)
	}
	return float64(grew) / float64(live), table, nil
}
