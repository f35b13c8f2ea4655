package sink

import (
	"context"
	"time"
)

// SetWait replaces the backoff wait of s, so that tests can record the
// waits instead of sitting through them.
func SetWait(s *HTTP, wait func(ctx context.Context, d time.Duration) error) { s.wait = wait }

// ParseRetryAfter exposes parseRetryAfter.
var ParseRetryAfter = parseRetryAfter

// SetLimitSleep replaces the wait for room in s's rate limit.
func SetLimitSleep(s *HTTP, sleep func(ctx context.Context, d time.Duration) error) {
	s.limit.sleep = sleep
}

// Joined returns how many requests joined the one waiting with key.
func Joined(s *HTTP, key string) int {
	s.limit.mu.Lock()
	defer s.limit.mu.Unlock()
	if q, ok := s.limit.waiting[key]; ok {
		return q.joined
	}
	return -1
}
