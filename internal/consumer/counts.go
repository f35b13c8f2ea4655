package consumer

import (
	"context"
	"log/slog"
	"time"

	"github.com/oncegate/oncegate/internal/outcome"
)

// counts is what a gate counts of its triggers, as the stages report what
// happened: a pipeline's figures (PipelineStats, and the Observer's
// metrics) or a dispatcher's (DispatchStats). Each keeps what it has a
// figure for and lets the rest go by.
type counts interface {
	// arrived counts a batch of n triggers taken in; left is called once
	// they are all settled.
	arrived(n int) (left func())
	// settled counts a trigger settled with kind, took after its batch came.
	settled(kind settleKind, took time.Duration)
	// done counts an effect performed and settled.
	done(t *Trigger)
	// duplicate counts a trigger stopped as a duplicate by the window or
	// the ledger.
	duplicate(t *Trigger, gd outcome.Guard)
	held()      // another's work holds the intent: the trigger waits
	takenOver() // a claim took over an expired lease
	stale()     // another worker took the work over while it ran
	retried()   // naked after a retryable failure
	dead()      // dead-lettered
	// filtered counts a trigger acked without an effect by rule: "when"
	// (the pipeline's when: condition), "routes" (no route holds).
	filtered(rule string)
	// afterResolve counts a firing (or its entry) not sent: its resolve
	// had gone out (lifecycle.go).
	afterResolve()
	// unopened counts a resolve with nothing sent: its firing went nowhere.
	unopened()
	modelCall() // a model step's call made
	// recorded counts a model step's answer taken from its intent's
	// ledger record, and the tokens it was paid for with.
	recorded(tokens int64)
	stepSkipped() // a model step not run: skip_when held
	// unknown, failed and cancelled count a one-shot send of unknown
	// outcome, one refused for good, and one cancelled before it went out.
	unknown()
	failed()
	cancelled()
}

// pipelineCounts are a pipeline's counts: its PipelineStats and the
// Observer's metrics.
type pipelineCounts struct {
	c        *Consumer
	pipeline string
	n        *pipelineCounters
}

func (p *pipelineCounts) arrived(n int) func() {
	p.n.deliveries.Add(int64(n))
	p.c.obs.InFlight(p.pipeline, n)
	for range n {
		p.c.obs.Trigger(p.pipeline)
	}
	return func() { p.c.obs.InFlight(p.pipeline, -n) }
}

func (p *pipelineCounts) settled(kind settleKind, took time.Duration) {
	p.c.obs.SettleTime(p.pipeline, kind.String(), took)
}

func (p *pipelineCounts) done(t *Trigger) {
	p.n.effects.Add(1)
	if t.res.Duplicate {
		p.n.dupStream.Add(1)
		p.c.obs.Duplicate(p.pipeline, outcome.GuardStream)
		p.logDuplicate(t, outcome.GuardStream)
	}
}

func (p *pipelineCounts) duplicate(t *Trigger, gd outcome.Guard) {
	p.logDuplicate(t, gd)
	if gd == outcome.GuardWindow {
		p.n.dupWindow.Add(1)
	} else {
		p.n.dupLedger.Add(1)
	}
	p.c.obs.Duplicate(p.pipeline, gd)
}

// logDuplicate says at debug level which guard caught a duplicate:
// guard=window, ledger or stream (the effect stream's Nats-Msg-Id).
func (p *pipelineCounts) logDuplicate(t *Trigger, gd outcome.Guard) {
	if !p.c.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	var key string
	if k := t.keyRef(); k != nil {
		key = k.String()
	}
	p.c.log.Debug("duplicate dropped", "pipeline", p.pipeline, "guard", string(gd), "key", key, "msg", t.ref())
}

func (p *pipelineCounts) held()      { p.n.held.Add(1) }
func (p *pipelineCounts) takenOver() { p.n.takenOver.Add(1) }
func (p *pipelineCounts) stale()     { p.n.stale.Add(1) }
func (p *pipelineCounts) retried()   { p.n.retries.Add(1) }
func (p *pipelineCounts) dead()      { p.n.dead.Add(1) }

func (p *pipelineCounts) filtered(rule string) {
	p.observeFiltered(rule)
	if rule == "when" {
		p.n.filtered.Add(1)
	}
}

// observeFiltered tells the Observer, if it counts them, of a trigger
// filtered out by rule.
func (p *pipelineCounts) observeFiltered(rule string) {
	if o, ok := p.c.obs.(interface{ Filtered(pipeline, rule string) }); ok {
		o.Filtered(p.pipeline, rule)
	}
}

func (p *pipelineCounts) afterResolve() {
	p.n.afterResolve.Add(1)
	p.observeFiltered("after_resolve")
}

func (p *pipelineCounts) unopened()    { p.observeFiltered("unopened") }
func (p *pipelineCounts) modelCall()   { p.n.modelCalls.Add(1) }
func (p *pipelineCounts) stepSkipped() { p.n.skipped.Add(1) }

func (p *pipelineCounts) recorded(tokens int64) {
	p.n.recorded.Add(1)
	p.n.savedTokens.Add(tokens)
}

// A pipeline's effect is replayable (or its outbox publish is): it has no
// one-shot outcome to count.
func (p *pipelineCounts) unknown()   {}
func (p *pipelineCounts) failed()    {}
func (p *pipelineCounts) cancelled() {}

// dispatchCounts are a dispatcher's counts: its DispatchStats.
type dispatchCounts struct{ d *dispatcher }

func (c dispatchCounts) add(f func(*DispatchStats)) { c.d.count(f) }

func (c dispatchCounts) done(t *Trigger) {
	if !t.dropped {
		c.add(func(s *DispatchStats) { s.Sent++ })
	}
}

func (c dispatchCounts) afterResolve() { c.add(func(s *DispatchStats) { s.AfterResolve++ }) }
func (c dispatchCounts) unopened()     { c.add(func(s *DispatchStats) { s.Unopened++ }) }
func (c dispatchCounts) unknown()      { c.add(func(s *DispatchStats) { s.Unknown++ }) }
func (c dispatchCounts) failed()       { c.add(func(s *DispatchStats) { s.Failed++ }) }
func (c dispatchCounts) cancelled()    { c.add(func(s *DispatchStats) { s.Cancelled++ }) }

// DispatchStats has no figure for these: an outbox entry's deliveries,
// duplicates, waits and retries are the outbox's, not its pipeline's.
func (dispatchCounts) arrived(int) func()                { return func() {} }
func (dispatchCounts) settled(settleKind, time.Duration) {}
func (dispatchCounts) duplicate(*Trigger, outcome.Guard) {}
func (dispatchCounts) held()                             {}
func (dispatchCounts) takenOver()                        {}
func (dispatchCounts) stale()                            {}
func (dispatchCounts) retried()                          {}
func (dispatchCounts) dead()                             {}
func (dispatchCounts) filtered(string)                   {}
func (dispatchCounts) modelCall()                        {}
func (dispatchCounts) stepSkipped()                      {}
func (dispatchCounts) recorded(int64)                    {}
