package main

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// TestPacedStormKeepsEveryTrigger runs a small storm through the real
// consumer against a stand-in limited to 200 requests in any 4s (3000 a
// minute). With llm.rate_limit at 0.8 of that (the slack is for a loaded
// machine under the race detector, whose stalls bunch requests up), every
// intent is answered once, with no 429, no dead letter and one effect. All
// 300 triggers are in flight at once, so their calls wait up to 7.5s for
// their turn, and most of them (as the wait histogram of the metrics
// counts) longer than the 2.5s ack_wait: were waiting triggers not kept in
// progress, most would be redelivered. The consumer's own work around the
// wait (claims, commits, acks) may let a trigger or two slip past ack_wait
// on a loaded machine under the race detector, so up to 1% may be.
func TestPacedStormKeepsEveryTrigger(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the consumer and runs for a few seconds")
	}
	o := options{
		triggers: 300, rpm: 3000, window: 4 * time.Second, ratio: 0.8, latency: time.Millisecond,
		concurrency: 300, maxPending: 300, ackWait: 2500 * time.Millisecond, timeout: time.Minute, max429: 1,
		log: slog.New(slog.DiscardHandler),
	}
	r, err := o.run(context.Background(), "paced")
	if err != nil {
		t.Fatal(err)
	}
	if p := r.check(o); len(p) > 0 {
		t.Fatalf("the paced storm missed its goal: %v", p)
	}
	if long := r.over[2.5]; long < uint64(o.triggers)/2 {
		t.Fatalf("%d of %d calls waited longer than ack_wait %v: the test needs most of them to", long, o.triggers, o.ackWait)
	}
	if redelivered := r.pipe.Deliveries - int64(o.triggers); redelivered > int64(o.triggers)/100 || r.pipe.Retries != 0 {
		t.Errorf("%d deliveries and %d naks for %d triggers: want each delivered once, but for 1%%", r.pipe.Deliveries, r.pipe.Retries, o.triggers)
	}
}
