package altset

import (
	"sync"
	"sync/atomic"
	"time"
)

// SyncMap is a set of two generations of sync.Map, swapped every TTL. Each
// entry holds the key's expiry time: LoadOrStore adds a key, and an expired
// entry is replaced with CompareAndSwap, so a key is remembered for exactly
// the TTL. The generations only bound the memory: every key in the previous
// one has expired by the time it is dropped.
//
// sync.Map boxes keys and values in interfaces, so it allocates on every
// operation; it cannot be presized.
type SyncMap struct {
	gens  atomic.Pointer[syncMapGens]
	rot   *rotation
	clock clock
	ttl   int64
}

type syncMapGens struct {
	cur, prev *sync.Map // uint64 → int64 expiry, in clock nanoseconds
}

// NewSyncMap returns a SyncMap. It ignores capacity: a sync.Map cannot be
// presized.
func NewSyncMap(capacity int, ttl time.Duration) *SyncMap {
	s := &SyncMap{clock: newClock(), ttl: int64(ttl)}
	s.rot = newRotation(ttl, s.clock.now())
	s.gens.Store(&syncMapGens{cur: new(sync.Map), prev: new(sync.Map)})
	return s
}

// SeenOrAdd reports whether k was added within the TTL; if not, it adds k and
// returns false.
func (s *SyncMap) SeenOrAdd(k uint64) bool {
	now := s.clock.now()
	if s.rot.due(now) {
		s.rotate(now)
	}
	g := s.gens.Load()
	if v, ok := g.prev.Load(k); ok && v.(int64) > now {
		return true
	}
	exp := now + s.ttl
	v, loaded := g.cur.LoadOrStore(k, exp)
	for loaded {
		old := v.(int64)
		if old > now {
			return true
		}
		if g.cur.CompareAndSwap(k, old, exp) {
			return false
		}
		v, loaded = g.cur.LoadOrStore(k, exp)
	}
	return false
}

func (s *SyncMap) rotate(now int64) {
	won, stale := s.rot.claim(now)
	if !won {
		return
	}
	prev := s.gens.Load().cur
	if stale {
		prev = new(sync.Map)
	}
	s.gens.Store(&syncMapGens{cur: new(sync.Map), prev: prev})
}

// Settle swaps the generations once, as a TTL boundary does. See Settler.
func (s *SyncMap) Settle() {
	s.gens.Store(&syncMapGens{cur: new(sync.Map), prev: s.gens.Load().cur})
}
