package ledger_test

import (
	"errors"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

func TestCheckRetention(t *testing.T) {
	for _, tt := range []struct {
		name       string
		retention  time.Duration
		maxAge     time.Duration
		maxDeliver int
		backoff    []time.Duration
		ok         bool
	}{
		{"default retention, week-long stream", ledger.DefaultRetention, 7 * 24 * time.Hour, 5, nil, true},
		{"retention shorter than stream max age", time.Hour, 24 * time.Hour, 0, nil, false},
		{"backoff adds up past retention", time.Hour, 0, 5, []time.Duration{time.Minute, 10 * time.Minute, time.Hour}, false},
		{"backoff within retention", 3 * time.Hour, 0, 4, []time.Duration{time.Minute, 10 * time.Minute, time.Hour}, true},
		{"last backoff repeats", 2 * time.Hour, 0, 6, []time.Duration{30 * time.Minute}, false},
		{"unbounded by both", time.Minute, 0, 0, nil, true},
	} {
		err := ledger.CheckRetention(tt.retention, tt.maxAge, tt.maxDeliver, tt.backoff)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ledger.ErrInvalidLedger)) {
			t.Errorf("%s: CheckRetention(%v, %v, %d, %v) = %v; want ok=%v", tt.name, tt.retention, tt.maxAge, tt.maxDeliver, tt.backoff, err, tt.ok)
		}
	}
}
