package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/faults"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/sink"
)

// A gate is the chain of stages of one pipeline or dispatcher (doc.go
// draws it): this file holds what every stage shares, composes each
// kind's chain, runs a batch through it, and holds the key stage. The
// other stages are values in the files of what they do: window.go,
// lifecycle.go (order), claim.go and lease.go (claim), routes.go (recall,
// route), render.go (filter, the effects' bodies), effect.go (step and
// the effect), approval.go (the dispatcher's waits), crash.go (the fault
// points).

// gate is the chain of stages of one pipeline or dispatcher, and what its
// stages share.
type gate struct {
	c        *Consumer
	pipeline string
	pol      policy // what its outcomes mean for its effect, and its counts

	ledger     ledger.Ledger // nil in gate-window mode
	owner      string
	lease      time.Duration
	maxDeliver int // 0: no limit

	mile     *mile  // the last mile (render.go); nil when the pipeline does not use it
	step     *step  // nil without a model step
	stepName string // for the effect's headers
	sink     sink.Sink
	js       *sink.JetStream // the sink, when it publishes asynchronously
	sinkName string
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

	set    *settler
	stages []stage // the chain, outermost first (use)
	h      Handler
}

// use composes the gate's chain of stages, the first outermost, around its
// effect; nil stages (ones the pipeline or build does not have) are left
// out.
func (g *gate) use(stages ...stage) {
	g.stages = g.stages[:0]
	for _, s := range stages {
		if s != nil {
			g.stages = append(g.stages, s)
		}
	}
	g.h = chain(g.effect, g.stages)
}

// stageNames names the gate's stages, in order, and its effect last: the
// chain as doc.go draws it.
func (g *gate) stageNames() []string {
	names := make([]string, 0, len(g.stages)+1)
	for _, s := range g.stages {
		names = append(names, s.name())
	}
	return append(names, "effect")
}

// pipelineStages are the stages of pipeline p's gate g.
func pipelineStages(p *pipeline, g *gate) []stage {
	m := g.mile
	s := []stage{&keyStage{g: g, keyOf: p.keyOf}, crashAt(faults.BeforeAck)}
	if m != nil && m.filter != nil {
		s = append(s, &filterStage{g: g, when: m.filter})
	}
	s = append(s, &windowStage{
		g: g, w: p.window, only: p.cfg.Mode == config.ModeGateWindow,
		fp: p.c.cfg.Ledger.Mismatch == config.MismatchReject,
	})
	if g.ordered() {
		s = append(s, &orderStage{g: g, resolveWait: cmp.Or(p.cfg.Key.ResolveWait, DefaultResolveWait)})
	}
	s = append(s, crashAt(faults.AfterCommit))
	if g.ledger != nil {
		s = append(s, &claimStage{
			g: g, keepEvery: p.keepEvery,
			// A replayable effect redone after a crash is harmless, so its
			// claim need not survive one: the ledger may keep it in memory
			// (see ledger.BeginOptions.Volatile). A one-shot effect's
			// outbox publish is replayable too; its dispatch claim is not.
			//
			// An ordered pipeline's claims are durable too: the resolve of
			// an identity reads its firing's lease (lifecycle.go).
			volatile: !p.cfg.HasClass(config.ClassOneShot) && (p.cfg.Key.Status == "" || p.cfg.Mode == config.ModeGateWindow),
		}, crashAt(faults.AfterClaim))
	}
	if m != nil && g.ledger != nil && (len(m.routes) > 0 || m.skip != nil) {
		s = append(s, &recallStage{g: g})
	}
	if g.step != nil {
		s = append(s, &modelStage{g: g}, crashAt(faults.AfterAnswer))
	}
	if m != nil {
		s = append(s, &routeStage{g: g}, crashAt(faults.AfterRoute))
	}
	return append(s, crashAt(faults.AfterEffect))
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

// keyStage derives each trigger's intent key.
type keyStage struct {
	g *gate
	// keyOf sets t.key and t.intent, or returns the verdict on a trigger
	// that cannot be keyed.
	keyOf func(t *Trigger) *verdict
}

func (s *keyStage) name() string { return "key" }

func (s *keyStage) wrap(next Handler) Handler {
	g := s.g
	return func(ctx context.Context, ts []*Trigger) {
		for _, t := range ts {
			sp := t.child(g, "oncegate.key", trace.SpanKindInternal)
			g.guard(t, stageKey, func() {
				if v := s.keyOf(t); v != nil {
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
