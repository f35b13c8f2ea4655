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
