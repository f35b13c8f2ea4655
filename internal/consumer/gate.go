package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate/internal/faults"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/window"
)

// A gate is the chain of stages of one pipeline or dispatcher: this file
// builds it, runs a batch through it, and holds the stages before the
// claim (keys, window). claim.go claims and settles the work in the
// ledger, lease.go keeps held work alive, effect.go runs the model step
// and the effect and flights.go lets a duplicate wait for local work.

// gate is the chain of stages of one pipeline or dispatcher (handler.go),
// and what its stages need.
type gate struct {
	c        *Consumer
	pipeline string
	pol      policy // what its outcomes mean for its effect

	// keyOf sets t.key and t.intent, or returns the verdict on a trigger
	// that cannot be keyed.
	keyOf func(t *Trigger) *verdict

	window     *window.Window // nil: none
	windowOnly bool           // the window alone decides (gate-window mode)
	windowFP   bool           // the window remembers key and payload (mismatch reject)

	ledger     ledger.Ledger // nil in gate-window mode
	owner      string
	lease      time.Duration
	volatile   bool
	maxDeliver int                            // 0: no limit
	keepEvery  func(t *Trigger) time.Duration // how often to renew a held trigger

	mile *mile // the last mile (mile.go); nil when the pipeline does not use it
	// resolveWait is how long a resolve waits for its firing's outcome
	// (lifecycle.go).
	resolveWait time.Duration
	// dispatchOrder is a dispatcher's ordering of an ordered pipeline's
	// entries, after the claim; nil otherwise.
	dispatchOrder Middleware
	step          *step  // nil without a model step
	stepName      string // for the effect's headers
	sink          sink.Sink
	js            *sink.JetStream // the sink, when it publishes asynchronously
	sinkName      string
	// sinkOf, if set, names the kind of t's effect for the metrics instead
	// of sinkName: the dispatcher's, whose entries are of several effects.
	sinkOf func(t *Trigger) string
	// dedupeWindow is how long the effect's target drops a repeat of its
	// key (the duplicate window of the stream a JetStream effect lands
	// in); 0 when unknown or unlimited.
	dedupeWindow time.Duration
	maxResult    int
	// retry is the effect's retry schedule (config.EffectRetry), for the
	// effect the gate sends itself; nil: the pipeline's.
	retry func(n int) time.Duration

	set     *settler
	h       Handler
	flights flights // the work this process holds
}

// build composes the gate's stages.
func (g *gate) build(wait Middleware) {
	var window, answer Middleware
	if g.window != nil {
		window = g.windowStage
	}
	claim := Middleware(nil)
	if g.ledger != nil {
		claim = g.claimStage
	}
	model := Middleware(nil)
	if g.step != nil {
		model, answer = g.model, crashAt(faults.AfterAnswer)
	}
	var afterClaim Middleware
	if g.ledger != nil {
		afterClaim = crashAt(g.pol.afterClaim)
	}
	filter, recall, decide := g.mileStages() // mile.go; nil without the last mile
	var order Middleware
	if g.ordered() {
		order = g.orderStage // lifecycle.go
	}
	g.h = chain(g.effect,
		g.keys,
		crashAt(faults.BeforeAck),
		wait,
		filter,
		window,
		order,
		crashAt(faults.AfterCommit),
		claim,
		afterClaim,
		g.dispatchOrder,
		recall,
		model,
		answer,
		decide,
		crashAt(faults.AfterEffect),
	)
}

// run takes a batch of messages through the gate and settles each.
func (g *gate) run(ctx context.Context, msgs []jetstream.Msg) {
	t0 := time.Now()
	ts := make([]*Trigger, len(msgs))
	for i, m := range msgs {
		ts[i] = newTrigger(m)
		g.traceBegin(ctx, ts[i])
	}
	defer g.pol.arrived(len(ts))()
	func() {
		defer g.recoverBatch(ts, stageGate)
		g.h(ctx, ts)
	}()
	for _, t := range ts {
		if !t.decided {
			if t.effected {
				g.pol.done(t)
				t.decide(ack(t.keyRef(), nil))
			} else {
				t.decide(nak(t.keyRef(), 0, errors.New("no stage decided the trigger")))
			}
		}
		sp := t.child(g, "oncegate.settle", trace.SpanKindInternal)
		g.set.settle(ctx, t)
		if sp.IsRecording() {
			sp.SetAttributes(attrVerdict.String(t.v.kind.String()))
		}
		sp.End()
		t.traceEnd()
		g.pol.settled(t.v.kind, time.Since(t0))
	}
}

// pass runs next on the triggers of ts not yet decided, if any.
func pass(ctx context.Context, next Handler, ts []*Trigger) []*Trigger {
	rest := open(ts)
	if len(rest) > 0 {
		next(ctx, rest)
	}
	return rest
}

// keys derives each trigger's intent key.
func (g *gate) keys(next Handler) Handler {
	return func(ctx context.Context, ts []*Trigger) {
		for _, t := range ts {
			sp := t.child(g, "oncegate.key", trace.SpanKindInternal)
			g.guard(t, stageKey, func() {
				if v := g.keyOf(t); v != nil {
					t.decide(*v)
					endSpan(sp, v.err)
					return
				}
				t.keyed = true
				if sp.IsRecording() {
					sp.SetAttributes(attrKey.String(t.intent.String()))
				}
				sp.End()
			})
		}
		pass(ctx, next, ts)
	}
}

// exhausted reports whether t came back after its last delivery: its
// process died (or drained) during that delivery.
func (g *gate) exhausted(t *Trigger) bool {
	return g.maxDeliver > 0 && t.deliveries() > uint64(g.maxDeliver)
}

func (g *gate) exhaustedErr(t *Trigger) error {
	return fmt.Errorf("delivered %d times (max_deliver %d); the last delivery did not finish (its process stopped)", t.deliveries(), g.maxDeliver)
}

// windowKey is t's key in the window. Under a mismatch policy of reject it
// includes the payload fingerprint, so that a reused key with another
// payload misses the window and reaches the ledger, which refuses it.
func (g *gate) windowKey(t *Trigger) uint64 {
	k := ledger.WindowKey(t.key)
	if g.windowFP {
		k ^= ledger.WindowKey(dedupe.Key(t.fp))*0x9e3779b97f4a7c15 | 1
	}
	return k
}

// windowStage drops the triggers whose key the window has seen.
func (g *gate) windowStage(next Handler) Handler {
	if g.windowOnly {
		// The window alone decides: it remembers a key once its effect is
		// out (Add after the effect, not SeenOrAdd before it). A key still
		// at work is not yet a duplicate: acking on its word would trust a
		// delivery that may have stalled past its ack wait and whose message
		// the server delivered again (and this stage may be about to ack
		// that redelivery). Two triggers of one key at work at once both
		// publish, under one Nats-Msg-Id: the effect stream keeps one.
		return func(ctx context.Context, ts []*Trigger) {
			keys := make([]uint64, len(ts))
			seen := make([]bool, len(ts))
			for i, t := range ts {
				keys[i] = g.windowKey(t)
				seen[i] = g.window.Contains(keys[i])
				g.traceWindow(t, seen[i])
				switch {
				case seen[i]:
					g.pol.duplicate(t, outcome.GuardWindow)
					t.decide(ack(t.keyRef(), nil))
				case g.exhausted(t):
					t.decide(dead(t.keyRef(), outcome.ReasonExhausted, g.exhaustedErr(t)))
				}
			}
			pass(ctx, next, ts)
			for i, t := range ts {
				if !seen[i] && t.effected {
					g.window.Add(keys[i])
					g.pol.done(t)
					if !t.decided {
						t.decide(ack(t.keyRef(), nil))
					}
				}
			}
		}
	}
	return func(ctx context.Context, ts []*Trigger) {
		for _, t := range ts {
			seen := g.window.Contains(g.windowKey(t))
			g.traceWindow(t, seen)
			if seen {
				g.pol.duplicate(t, outcome.GuardWindow)
				t.decide(ack(t.keyRef(), nil))
			}
		}
		for _, t := range pass(ctx, next, ts) {
			if t.committed {
				g.window.Add(g.windowKey(t))
			}
		}
	}
}
