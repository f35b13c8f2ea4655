// Package altset holds what a user would write instead of window.Window: sets
// of 64-bit keys that remember each key for a TTL, built on sync.Map, a mutex
// and a map, xsync.Map and otter. It also generates the workload that the
// window benchmarks (BenchmarkWindow in this package's tests and the
// bench/window program) run against all of them, so both feed every set the
// same keys.
//
// # Fairness
//
// Every set reads the time once per SeenOrAdd, as time.Since(start): one
// monotonic clock read, what a Window without Options.Now does where it does
// not read the CPU's time-stamp counter (see window.Options.Now; a build
// with -tags oncegate_nocounter keeps the window on time.Since too). Otter
// reads its own default clock, the same time.Since,
// as often as it needs (once or more per operation). None of them
// starts a goroutine except otter, whose maintenance goroutines are part of
// what a user of otter pays for.
//
// The two-generation sets (SyncMap, MutexMap, Xsync) swap generations every
// TTL: the current one becomes the previous one and a new current one is
// made, presized to the capacity where the map allows it. Their memory is one
// to two generations, so at a steady state with live keys arriving over the
// TTL they hold between one and two times the live keys.
//
// Every set is safe for concurrent use by multiple goroutines.
package altset

import (
	"sync/atomic"
	"time"
)

// Set is the operation the benchmarks compare.
type Set interface {
	// SeenOrAdd reports whether k was added within the TTL. If it was not,
	// it adds k and returns false.
	SeenOrAdd(k uint64) bool
}

// Impl names a kind of Set and makes one that holds capacity keys, each for
// at least ttl.
type Impl struct {
	Name string
	New  func(capacity int, ttl time.Duration) (Set, error)
}

// Reference is the name of the Impl every result is compared with.
const Reference = "xsync"

// Alternatives returns the alternatives to the window, Reference first.
func Alternatives() []Impl {
	return []Impl{
		{Name: "xsync", New: func(c int, ttl time.Duration) (Set, error) { return NewXsync(c, ttl), nil }},
		{Name: "syncmap", New: func(c int, ttl time.Duration) (Set, error) { return NewSyncMap(c, ttl), nil }},
		{Name: "mutexmap", New: func(c int, ttl time.Duration) (Set, error) { return NewMutexMap(c, ttl), nil }},
		{Name: "otter", New: func(c int, ttl time.Duration) (Set, error) { return NewOtter(c, ttl) }},
	}
}

// Close releases what s holds besides memory: otter's goroutines. It does
// nothing for a set that holds nothing else.
func Close(s Set) {
	if c, ok := s.(interface{ Close() }); ok {
		c.Close()
	}
}

// clock reads the time as nanoseconds since the set was made: one
// monotonic clock read. fake replaces it in tests.
type clock struct {
	start time.Time
	fake  func() int64
}

func newClock() clock { return clock{start: time.Now()} }

func (c *clock) now() int64 {
	if c.fake != nil {
		return c.fake()
	}
	return int64(time.Since(c.start))
}

// rotation decides when a two-generation set swaps generations. Every
// operation compares the time it has already read with next, one atomic load
// of a word that changes once per TTL; the operation that finds a swap due
// claims it with a CAS, so exactly one goroutine swaps.
type rotation struct {
	next atomic.Int64 // when the next swap is due, in clock nanoseconds
	ttl  int64
}

func newRotation(ttl time.Duration, now int64) *rotation {
	r := &rotation{ttl: int64(ttl)}
	r.next.Store(now + int64(ttl))
	return r
}

// due reports whether a swap is due at now. It is the per-operation check.
func (r *rotation) due(now int64) bool { return now >= r.next.Load() }

// claim reports whether the caller won the swap that is due at now. stale
// reports that a whole TTL passed since the swap was due, so the current
// generation holds only expired keys and must be dropped, not kept as the
// previous one.
func (r *rotation) claim(now int64) (won, stale bool) {
	next := r.next.Load()
	if now < next || !r.next.CompareAndSwap(next, now+r.ttl) {
		return false, false
	}
	return true, now >= next+r.ttl
}
