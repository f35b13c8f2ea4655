package app

import (
	"time"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ops"
	"github.com/oncegate/oncegate/internal/outcome"
)

// NewObserver returns a consumer.Observer that feeds the consumer's events
// to m.
func NewObserver(m *ops.Metrics) consumer.Observer { return observer{m} }

// observer feeds the consumer's events to the Prometheus metrics.
type observer struct{ m *ops.Metrics }

func (o observer) Trigger(p string) { o.m.Trigger(p) }

func (o observer) Duplicate(p string, g outcome.Guard) { o.m.Duplicate(p, outcome.Guard(g)) }

func (o observer) Claim(p string, s ledger.Status) {
	var c ops.ClaimStatus
	switch s {
	case ledger.StatusNew:
		c = ops.ClaimNew
	case ledger.StatusCommitted:
		c = ops.ClaimCommitted
	case ledger.StatusHeld:
		c = ops.ClaimHeld
	case ledger.StatusTakenOver:
		c = ops.ClaimTakenOver
	case ledger.StatusFailed:
		c = ops.ClaimFailed
	}
	o.m.Claim(p, c)
}

func (o observer) Effect(p, sink, outcome string, took time.Duration) {
	o.m.Effect(p, sink, ops.Outcome(outcome), took)
}

func (o observer) Step(p, step string, took time.Duration) { o.m.Step(p, step, took) }

func (o observer) DeadLetter(p string, r outcome.Reason) { o.m.DeadLetter(p, outcome.Reason(r)) }

func (o observer) Settled(p, kind string) { o.m.Ack(p, ops.Ack(kind)) }

func (o observer) InFlight(p string, delta int) { o.m.AddInflight(p, delta) }

func (o observer) Leases(p string, delta int) { o.m.AddPendingLeases(p, delta) }

func (o observer) ReplyRefused(p string) { o.m.ReplyRefused(p) }

func (o observer) Panic(p string) { o.m.Panic(p) }

func (o observer) Filtered(p, rule string) { o.m.Filtered(p, rule) }

func (o observer) Routed(p, route string) { o.m.Routed(p, route) }

func (o observer) LedgerUnavailable(p string) { o.m.LedgerUnavailable(p) }

func (o observer) SettleTime(p, verdict string, took time.Duration) { o.m.SettleTime(p, verdict, took) }
