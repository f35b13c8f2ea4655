package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/internal/tmpl"
)

// HeaderEffect, on an outbox entry, names the pipeline's effect the
// dispatcher sends it with.
const HeaderEffect = "Oncegate-Effect"

// HeaderIntent, on the outbox entry of a named one-shot effect (whose key
// is EffectKey of the intent's), names the intent key, so that the entry's
// dead letter names the intent every admin command takes (package admin).
const HeaderIntent = "Oncegate-Intent"

// mileEffects sends each trigger's effects, in order, each under its own
// key; the trigger's effect is done once all are.
func (g *gate) mileEffects(ctx context.Context, ts []*Trigger) {
	g.each(ts, stageEffect, func(t *Trigger) {
		s := t.lm
		if s == nil || s.none {
			return // no route: effected already
		}
		results := map[string]json.RawMessage{}
		var last sink.Result
		for _, o := range s.out {
			if g.leaseGone(t) {
				// A route's effects take time: each goes out only while
				// the lease holds (see leaseGone).
				g.pol.stale()
				t.decide(wait(t.keyRef(), g.lease, errLeaseLost))
				return
			}
			if g.resolvedFirst(ctx, t) {
				return // its resolve went out: nothing more is sent (lifecycle.go)
			}
			e := sink.Effect{Key: o.key.String(), Pipeline: g.pipeline, Step: g.stepName, Body: o.body, SubjectSuffix: o.suffix, Fence: g.fence(t)}
			if o.t.oneShot && o.t.name != "" {
				e.Header = map[string]string{HeaderEffect: o.t.name, HeaderIntent: t.intent.String()}
			}
			if o.group != "" {
				if e.Header == nil {
					e.Header = map[string]string{}
				}
				e.Header[sink.DigestHeader] = o.group
			}
			if o.t.oneShot && g.ordered() {
				// The dispatcher orders the entries again (lifecycle.go).
				if e.Header == nil {
					e.Header = map[string]string{}
				}
				e.Header[HeaderIdentity], e.Header[HeaderStatus] = s.identity.String(), s.status
			}
			var esp trace.Span
			if t.span != nil {
				esp = t.child(g, "oncegate.effect", trace.SpanKindProducer)
				e.Header = injectTrace(esp, e.Header)
			}
			t0 := time.Now()
			t.sent = true
			res, err := o.t.sink.Deliver(ctx, e)
			result := "done"
			switch {
			case err == nil:
				if res.Duplicate {
					result = "duplicate"
				}
			case errors.Is(err, sink.ErrFenced):
				// The lease ran out while the sink waited: this effect was
				// not sent; the new holder sends it (those before it collapse).
				g.pol.stale()
				t.decide(wait(t.keyRef(), g.lease, errLeaseLost))
				result = "retry" // put back: the new holder sends it
			case errors.Is(err, sink.ErrKeyConflict):
				g.c.log.Info("the target already has this key with another body: the effect exists", "pipeline", g.pipeline, "effect", o.t.name, "key", o.key.String(), "err", err)
				res, err, result = sink.Result{Status: res.Status, Duplicate: true}, nil, "key_reused"
			case errors.Is(err, sink.ErrPermanent):
				t.decide(dead(t.keyRef(), outcome.ReasonPermanentEffect, effectErr(o.t.name, err)))
				result = "dead"
			default:
				v := nak(t.keyRef(), 0, effectErr(o.t.name, err))
				if !o.t.oneShot { // an outbox publish that failed is the pipeline's
					v.schedule = o.t.retry
				}
				t.decide(v)
				result = "retry"
			}
			kind := o.t.kind
			if o.t.oneShot {
				kind = "outbox"
			}
			g.c.obs.Effect(g.pipeline, kind, result, time.Since(t0))
			if esp != nil {
				esp.SetAttributes(attrSink.String(kind), attrOutcome.String(result))
				endSpan(esp, err)
			}
			if err != nil {
				return // the effects sent are redone under their keys, and collapse
			}
			last = res
			if len(s.out) > 1 {
				b := res.Body
				if len(b) > 512 || !json.Valid(b) {
					b, _ = json.Marshal(tmpl.Snippet(b, 512))
				}
				results[o.t.name] = b
			}
		}
		t.res, t.effected = last, true
		if len(s.out) > 1 {
			body, _ := json.Marshal(results)
			t.res = sink.Result{Body: body}
		}
	})
}

func effectErr(name string, err error) error {
	if name == "" {
		return err
	}
	return fmt.Errorf("effect %s: %w", name, err)
}

// muxSink is the dispatcher's sink for a pipeline's one-shot named
// effects: it sends each outbox entry with the sink its HeaderEffect names.
type muxSink struct {
	byName map[string]sink.Sink
}

func (m *muxSink) Deliver(ctx context.Context, e sink.Effect) (sink.Result, error) {
	name := e.Header[HeaderEffect]
	s, ok := m.byName[name]
	if !ok {
		return sink.Result{}, &sink.Error{Sink: "outbox", Key: e.Key, Err: fmt.Errorf("the outbox entry names effect %q, which the pipeline does not have", name)}
	}
	if name != "" {
		h := make(map[string]string, len(e.Header))
		for k, v := range e.Header {
			if k != HeaderEffect {
				h[k] = v
			}
		}
		e.Header = h
	}
	return s.Deliver(ctx, e)
}

func (m *muxSink) Close() error {
	var errs []error
	for _, s := range m.byName {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
