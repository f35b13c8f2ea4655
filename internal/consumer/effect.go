package consumer

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/sink"
)

// modelStage runs the model step of each trigger (step.go).
type modelStage struct{ g *gate }

func (s *modelStage) name() string { return "step" }

func (s *modelStage) wrap(next Handler) Handler {
	g := s.g
	return func(ctx context.Context, ts []*Trigger) {
		g.each(ts, stageModel, func(t *Trigger) {
			if t.lm != nil && t.lm.skip {
				g.pol.stepSkipped()
				return // skip_when holds (a resolve): no call, nothing paid
			}
			if g.leaseGone(t) {
				// Its lease ran out before the model was asked (a pause, a
				// stalled ledger): the model is asked only under a live
				// claim, as the effect is sent only under one. Whoever took
				// the intent over asks it; this message comes back.
				g.pol.stale()
				t.decide(wait(t.keyRef(), g.lease, errLeaseLost))
				return
			}
			t0 := time.Now()
			sp := t.child(g, "chat "+g.step.model, trace.SpanKindClient)
			ans, err := g.step.run(trace.ContextWithSpan(ctx, sp), t.intent, t.msg.Data(), g.stepRecord(ctx, t))
			traceModel(sp, g.step.model, ans, err)
			g.pol.modelCall()
			if err == nil && ans.Cache == CacheRecord {
				g.pol.recorded(int64(ans.InputTokens + ans.OutputTokens))
				if c := g.c.opts.Cache; c != nil {
					llmhook.Saved(c, g.pipeline, g.step.cfg.Name, ans.Model, int64(ans.InputTokens), int64(ans.OutputTokens))
				}
			}
			g.c.obs.Step(g.pipeline, g.step.cfg.Name, time.Since(t0))
			if errors.Is(err, errLeaseLost) {
				g.pol.stale()
				t.decide(wait(t.keyRef(), g.lease, err))
				return
			}
			if err != nil {
				se, ok := errors.AsType[*stepError](err)
				switch {
				case ok && se.permanent:
					t.decide(dead(t.keyRef(), se.reason, err))
				case ok:
					v := nak(t.keyRef(), se.delay, err)
					v.last = se.reason // "" on the last try: exhausted
					t.decide(v)
				default:
					t.decide(nak(t.keyRef(), 0, err))
				}
				return
			}
			if g.mile != nil {
				// The decide stage renders the effects.
				g.state(t).ans, t.modelRef = &ans, ans.cacheKey
				return
			}
			body, err := g.effectBody(t.intent, t.msg.Data(), ans)
			if err != nil {
				t.decide(dead(t.keyRef(), outcome.ReasonInvalidJSON, err))
				return
			}
			t.body, t.modelRef = body, ans.cacheKey
		})
		pass(ctx, next, ts)
	}
}

// effect performs each trigger's effect; it is the last stage.
func (g *gate) effect(ctx context.Context, ts []*Trigger) {
	live := ts[:0:0]
	for _, t := range ts {
		if g.leaseGone(t) {
			// Taken over before the effect, or run out: the new holder does it. The
			// trigger is put back, not acked: the new holder may be working
			// on a redelivery of this very message, and if it fails, the
			// message must still come back. Its next delivery finds the
			// work committed, or takes it over again.
			g.pol.stale()
			t.decide(wait(t.keyRef(), g.lease, errLeaseLost))
			continue
		}
		live = append(live, t)
	}
	if g.mile != nil {
		g.mileEffects(ctx, live)
		return
	}
	eff := func(t *Trigger) sink.Effect {
		e := sink.Effect{Key: t.intent.String(), Pipeline: g.pipeline, Step: g.stepName, Body: t.body, Fence: g.fence(t)}
		if _, mux := g.sink.(*muxSink); mux {
			if name := t.msg.Headers().Get(HeaderEffect); name != "" {
				e.Header = map[string]string{HeaderEffect: name} // the dispatcher's sink picks the effect's
			}
		}
		if group := t.msg.Headers().Get(sink.DigestHeader); group != "" && g.pol.forwardDigest {
			// An outbox entry of a digest: the sink gathers its group.
			if e.Header == nil {
				e.Header = map[string]string{}
			}
			e.Header[sink.DigestHeader] = group
		}
		if t.span != nil {
			t.esp = t.child(g, "oncegate.effect", trace.SpanKindProducer)
			e.Header = injectTrace(t.esp, e.Header)
		}
		return e
	}
	if g.js != nil {
		for _, t := range live {
			g.guard(t, stageEffect, func() {
				poison(t)
				t.sent = true
				t.pend = g.js.PublishAsync(eff(t))
			})
		}
		// One deadline for the batch's PubAcks.
		wctx, cancel := context.WithTimeout(ctx, g.js.Timeout())
		defer cancel()
		t0 := time.Now()
		for _, t := range live {
			if t.pend == nil {
				continue // decided: its publish panicked
			}
			res, err := t.pend.Wait(wctx)
			g.effectOutcome(t, res, err, time.Since(t0))
		}
		return
	}
	g.each(live, stageEffect, func(t *Trigger) {
		poison(t)
		t0 := time.Now()
		t.sent = true
		res, err := g.sink.Deliver(ctx, eff(t))
		g.effectOutcome(t, res, err, time.Since(t0))
	})
}

// effectOutcome records what the sink said of t's effect.
func (g *gate) effectOutcome(t *Trigger, res sink.Result, err error, took time.Duration) {
	result := "done"
	switch {
	case err == nil:
		t.res, t.effected = res, true
		if res.Duplicate {
			result = "duplicate"
		}
	case errors.Is(err, sink.ErrFenced):
		// The lease ran out while the sink waited to send (for room in
		// the receiver's quota, or a pause of this process): nothing was
		// sent, and the new holder does it, as before the effect.
		t.sent = false
		g.pol.stale()
		t.decide(wait(t.keyRef(), g.lease, errLeaseLost))
		result = "retry" // put back: the new holder sends it
	case errors.Is(err, sink.ErrKeyConflict):
		// The target already has this key with another body: the
		// intent's effect exists (a holder before a crash sent it, or a
		// reworded duplicate did). Record it as done, never as failed: a
		// person replaying a dead letter would do it twice.
		g.c.log.Info("the target already has this key with another body: the effect exists", "pipeline", g.pipeline, "key", t.intent.String(), "err", err)
		t.res, t.effected = sink.Result{Status: res.Status, Duplicate: true}, true
		result = "key_reused"
	case !g.pol.retryEffect:
		// A one-shot sink that failed may have acted all the same (a
		// timeout after the message went out): nothing is resent.
		if errors.Is(err, sink.ErrPermanent) {
			g.pol.failed()
			t.decide(dead(t.keyRef(), outcome.ReasonPermanentEffect, err))
			result = "dead"
		} else {
			g.pol.unknown()
			t.decide(dead(t.keyRef(), outcome.ReasonUnknownOutcome, err))
			result = "retry"
		}
	case errors.Is(err, sink.ErrPermanent):
		t.decide(dead(t.keyRef(), outcome.ReasonPermanentEffect, err))
		result = "dead"
	default:
		v := nak(t.keyRef(), 0, err)
		v.schedule = g.retry
		t.decide(v)
		result = "retry"
	}
	name := g.sinkName
	if g.sinkOf != nil {
		name = g.sinkOf(t)
	}
	g.c.obs.Effect(g.pipeline, name, result, took)
	if t.esp != nil {
		t.esp.SetAttributes(attrSink.String(name), attrOutcome.String(result))
		endSpan(t.esp, err)
	}
}
