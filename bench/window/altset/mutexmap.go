package altset

import (
	"sync"
	"time"
)

// MutexMap is a set of two generations of map[uint64]int64 behind one
// mutex, swapped every TTL. Each entry holds the key's expiry time, so a key
// is remembered for exactly the TTL; the generations only bound the memory.
// The clock is read before the lock is taken.
type MutexMap struct {
	mu        sync.Mutex
	cur, prev map[uint64]int64 // key → expiry, in clock nanoseconds
	next      int64            // when the next swap is due
	ttl       int64
	capacity  int
	clock     clock
}

// NewMutexMap returns a MutexMap whose generations are presized for capacity
// keys.
func NewMutexMap(capacity int, ttl time.Duration) *MutexMap {
	s := &MutexMap{
		cur:      make(map[uint64]int64, capacity),
		prev:     make(map[uint64]int64),
		ttl:      int64(ttl),
		capacity: capacity,
		clock:    newClock(),
	}
	s.next = s.clock.now() + s.ttl
	return s
}

// SeenOrAdd reports whether k was added within the TTL; if not, it adds k and
// returns false.
func (s *MutexMap) SeenOrAdd(k uint64) bool {
	now := s.clock.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if now >= s.next {
		s.prev = s.cur
		if now >= s.next+s.ttl {
			s.prev = make(map[uint64]int64) // a whole TTL went by: all of it expired
		}
		s.cur = make(map[uint64]int64, s.capacity)
		s.next = now + s.ttl
	}
	if exp, ok := s.prev[k]; ok && exp > now {
		return true
	}
	if exp, ok := s.cur[k]; ok && exp > now {
		return true
	}
	s.cur[k] = now + s.ttl
	return false
}

// Settle swaps the generations once, as a TTL boundary does. See Settler.
func (s *MutexMap) Settle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prev, s.cur = s.cur, make(map[uint64]int64, s.capacity)
}
