package altset

import (
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v4"
)

// Xsync is a set of two generations of xsync.Map, swapped every TTL. A key is
// seen if it is in either generation, so it is remembered for at least TTL
// and at most twice that: the generations carry no timestamps.
//
// It is the reference the benchmarks compare every set with: the lock-free
// hash map a Go user is most likely to reach for.
type Xsync struct {
	gens     atomic.Pointer[xsyncGens]
	rot      *rotation
	clock    clock
	capacity int
}

type xsyncGens struct {
	cur, prev *xsync.Map[uint64, struct{}]
}

// NewXsync returns an Xsync whose generations are presized for capacity keys.
func NewXsync(capacity int, ttl time.Duration) *Xsync {
	s := &Xsync{clock: newClock(), capacity: capacity}
	s.rot = newRotation(ttl, s.clock.now())
	s.gens.Store(&xsyncGens{cur: s.newGen(), prev: xsync.NewMap[uint64, struct{}]()})
	return s
}

func (s *Xsync) newGen() *xsync.Map[uint64, struct{}] {
	return xsync.NewMap[uint64, struct{}](xsync.WithPresize(s.capacity))
}

// SeenOrAdd reports whether k was added within the TTL (up to twice the TTL,
// see Xsync); if not, it adds k and returns false.
func (s *Xsync) SeenOrAdd(k uint64) bool {
	if now := s.clock.now(); s.rot.due(now) {
		s.rotate(now)
	}
	g := s.gens.Load()
	if _, ok := g.prev.Load(k); ok {
		return true
	}
	_, loaded := g.cur.LoadOrStore(k, struct{}{})
	return loaded
}

func (s *Xsync) rotate(now int64) {
	won, stale := s.rot.claim(now)
	if !won {
		return
	}
	old := s.gens.Load()
	prev := old.cur
	if stale {
		prev = xsync.NewMap[uint64, struct{}]()
	}
	s.gens.Store(&xsyncGens{cur: s.newGen(), prev: prev})
}

// Settle swaps the generations once, as a TTL boundary does: the keys added
// so far become the previous generation. See Settler.
func (s *Xsync) Settle() {
	s.gens.Store(&xsyncGens{cur: s.newGen(), prev: s.gens.Load().cur})
}

// NewXsyncClock returns an Xsync that reads the time from now (nanoseconds,
// never going back) instead of time.Since: the long-running mode of
// bench/window runs every set on one clock it advances itself.
func NewXsyncClock(capacity int, ttl time.Duration, now func() int64) *Xsync {
	s := &Xsync{clock: clock{fake: now}, capacity: capacity}
	s.rot = newRotation(ttl, s.clock.now())
	s.gens.Store(&xsyncGens{cur: s.newGen(), prev: xsync.NewMap[uint64, struct{}]()})
	return s
}
