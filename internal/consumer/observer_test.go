package consumer_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/standin"
)

// leaseObserver records the Leases events of each pipeline: the count now
// and the most seen at once.
type leaseObserver struct {
	mu       sync.Mutex
	now, top map[string]int

	panics, ledgerDown atomic.Int64 // Panic and LedgerUnavailable events
}

func newLeaseObserver() *leaseObserver {
	return &leaseObserver{now: map[string]int{}, top: map[string]int{}}
}

func (o *leaseObserver) Leases(p string, delta int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.now[p] += delta
	o.top[p] = max(o.top[p], o.now[p])
}

func (o *leaseObserver) get(p string) (now, top int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.now[p], o.top[p]
}

func (*leaseObserver) Trigger(string)                               {}
func (*leaseObserver) Duplicate(string, outcome.Guard)              {}
func (*leaseObserver) Claim(string, ledger.Status)                  {}
func (*leaseObserver) Effect(string, string, string, time.Duration) {}
func (*leaseObserver) Step(string, string, time.Duration)           {}
func (*leaseObserver) DeadLetter(string, outcome.Reason)            {}
func (*leaseObserver) Settled(string, string)                       {}
func (*leaseObserver) InFlight(string, int)                         {}
func (*leaseObserver) ReplyRefused(string)                          {}
func (*leaseObserver) SettleTime(string, string, time.Duration)     {}
func (o *leaseObserver) Panic(string)                               { o.panics.Add(1) }
func (o *leaseObserver) LedgerUnavailable(string)                   { o.ledgerDown.Add(1) }

// TestLeasesAreCounted: the pending-leases gauge counts a claim from the
// moment it is taken until its commit, on the one-by-one path (alerts,
// whose model step is slow here) and on the batched gate path (webhooks),
// and comes back to zero.
func TestLeasesAreCounted(t *testing.T) {
	obs := newLeaseObserver()
	f := start(t, nil, standin.Options{Latency: 300 * time.Millisecond}, func(o *consumer.Options) { o.Observer = obs })

	for i := range 3 {
		f.publish("triggers.alerts", alert(fmt.Sprintf("fp-%d", i), 1, 0))
	}
	waitFor(t, 10*time.Second, "three alert leases held during the model step", func() bool {
		now, _ := obs.get("alerts")
		return now == 3
	}, f)
	for i := range 40 {
		f.publish("triggers.webhooks", []byte(fmt.Sprintf(`{"delivery_id":"d-%d","event":"invoice.paid","invoice":{"id":"in_%d"}}`, i, i)))
	}
	waitFor(t, 30*time.Second, "every trigger settled", func() bool {
		return f.stats("alerts").Effects == 3 && f.stats("webhooks").Effects == 40
	}, f)
	// An effect is counted at its commit, a moment before its lease is
	// let go: the gauge must come back to zero soon after.
	waitFor(t, 5*time.Second, "no lease held once every trigger settled", func() bool {
		a, _ := obs.get("alerts")
		w, _ := obs.get("webhooks")
		return a == 0 && w == 0
	}, f)
	for _, p := range []string{"alerts", "webhooks"} {
		if _, top := obs.get(p); top == 0 {
			t.Errorf("%s: no lease counted while working", p)
		}
	}
}
