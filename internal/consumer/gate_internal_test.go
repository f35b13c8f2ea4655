package consumer

import (
	"errors"
	"testing"
	"time"
)

// TestFreshPutsStaleDeliveriesBack: a delivery that waited in the process
// past its ack wait is put back unclaimed (the server has delivered it
// again); a fresh one goes on to its claim.
func TestFreshPutsStaleDeliveriesBack(t *testing.T) {
	g := &gate{ackWait: func(*Trigger) time.Duration { return time.Second }}
	stale := &Trigger{received: time.Now().Add(-2 * time.Second), keyed: true}
	edge := &Trigger{received: time.Now().Add(-950 * time.Millisecond), keyed: true}
	fresh := &Trigger{received: time.Now(), keyed: true}
	unknown := &Trigger{keyed: true}
	out := g.fresh([]*Trigger{stale, edge, fresh, unknown})
	if len(out) != 2 || out[0] != fresh || out[1] != unknown {
		t.Fatalf("fresh kept %d triggers; want the fresh one and the one of unknown arrival", len(out))
	}
	for _, tr := range []*Trigger{stale, edge} {
		if !tr.decided || tr.v.kind != settleNak || !errors.Is(tr.v.err, errStaleDelivery) {
			t.Errorf("stale delivery decided %v (%+v); want a nak for errStaleDelivery", tr.decided, tr.v)
		}
	}
}
