package altset

import (
	"time"

	"github.com/maypok86/otter/v2"
)

// Otter is an otter cache bounded to capacity entries whose entries expire
// ttl after they were written. SeenOrAdd is SetIfAbsent, which is atomic (it
// runs under the lock of the key's hash bucket) and treats an expired entry
// as absent.
//
// Otter reads its own clock, time.Since of its creation time, and runs
// maintenance goroutines; Close stops them.
type Otter struct {
	c *otter.Cache[uint64, struct{}]
}

// NewOtter returns an Otter holding at most capacity keys, presized for them.
func NewOtter(capacity int, ttl time.Duration) (*Otter, error) {
	c, err := otter.New(&otter.Options[uint64, struct{}]{
		MaximumSize:      capacity,
		InitialCapacity:  capacity,
		ExpiryCalculator: otter.ExpiryWriting[uint64, struct{}](ttl),
	})
	if err != nil {
		return nil, err
	}
	return &Otter{c: c}, nil
}

// SeenOrAdd reports whether k was added within the TTL and is still cached;
// if not, it adds k and returns false.
func (s *Otter) SeenOrAdd(k uint64) bool {
	_, added := s.c.SetIfAbsent(k, struct{}{})
	return !added
}

// Close stops the cache's goroutines.
func (s *Otter) Close() { s.c.StopAllGoroutines() }
