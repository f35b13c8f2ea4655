package consumer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/standin"
)

// TestModelFailureIsNotATakeover: a trigger whose model step fails (after
// its claim, before its effect) is put back with its claim released undone:
// its redelivery claims the work as new, and is not counted taken_over
// (nor checked as work that may have been done). Every alert still gets
// its one effect.
func TestModelFailureIsNotATakeover(t *testing.T) {
	f := start(t, func(c *config.Config) {
		c.Pipelines[0].MaxDeliver = 20
		c.Pipelines[0].Backoff = []time.Duration{100 * time.Millisecond}
		c.Pipelines[0].AckWait = 300 * time.Millisecond
		c.Ledger.Lease = 2 * time.Second
	}, standin.Options{ErrorRate: 0.5, Seed: 7})
	const alerts = 10
	for i := range alerts {
		f.publish("triggers.alerts", alert(fmt.Sprintf("flaky%02d", i), 1, 0))
	}
	waitFor(t, 60*time.Second, "every alert's effect", func() bool { return f.stats("alerts").Effects == alerts }, f)
	if s := f.stats("alerts"); s.Retries == 0 || s.TakenOver != 0 || s.DeadLetters != 0 {
		t.Errorf("stats: %d retries, %d taken over, %d dead letters; want retries, none taken over, no dead letters", s.Retries, s.TakenOver, s.DeadLetters)
	}
}
