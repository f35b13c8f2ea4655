package consumer

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/template"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate/internal/cond"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/internal/tmpl"
	"github.com/oncegate/oncegate/pkg/canon"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// The last mile: what turns an intent into the right messages in the
// right tools. A pipeline that uses it (a when: filter, step.skip_when,
// named effects, routes, or an effect with a template) gets these stages
// around the claim and the model step:
//
//	key (+status) → filter → window → claim → recall → step (unless skipped) → decide → [after-route] → effects
//
//   - key: with key.status (any pipeline; pipeline.keyOf), the trigger's
//     key is derived from its identity (the key the fields give) and its
//     status (StatusKey), so that a resolve is distinct work from the
//     firing it resolves, while both share the identity that templates
//     (.identity) and the pagerduty preset's dedup_key carry. A firing (or
//     a trigger without a status) is keyed by the identity itself. The
//     status is read from the canonical form the key is derived from
//     (dedupe.Keyer.LookupIntent): a pipeline with key.status and no other
//     last-mile option keeps the plain gate's path, batches included.
//   - filter: a trigger whose when: condition is false is acked and
//     counted, before its key is looked up in the window or claimed: it is
//     never paid for or sent.
//   - recall: a routed intent's recorded route decision is read from the
//     ledger (see below); skip_when decides whether the step runs.
//   - decide: the route is chosen (the first whose condition holds, over
//     the trigger and the answer) and recorded; each effect of the route is
//     rendered. A template that fails dead-letters the trigger with reason
//     template: no effect is sent half-rendered, and none of the others is
//     sent either.
//   - effects: each effect is sent under its own key, derived from the
//     intent key and its name, so that a redo collapses at each target; a
//     one-shot effect is published to the pipeline's outbox (under that
//     key, with its name in a header) and sent by the dispatcher. The
//     intent is committed once all its effects are out.
//
// # One intent, one route
//
// The route decision is part of what is committed: before any effect is
// sent, it is recorded in the ledger under a key derived from the intent
// key (routeKey), with the ledger's own Begin and Commit (durable, fenced:
// a stalled holder cannot overwrite it). A redelivery — after a crash
// between the decision and the effects, say — reads it back and takes the
// same route, whatever the configuration or the model's answer says by
// then: the effects already sent under that route's keys are collapsed by
// their targets, and no other route's effects are sent. A recorded route
// that the configuration no longer has dead-letters the trigger (reason
// route) rather than guess. The record costs a claim and a commit per
// routed intent; pipelines without routes do not write it.

// The stages of the last mile, for panics.
const (
	stageFilter = "filter"
	stageRoute  = "route"
)

// HeaderEffect, on an outbox entry, names the pipeline's effect the
// dispatcher sends it with.
const HeaderEffect = "Oncegate-Effect"

// HeaderIntent, on the outbox entry of a named one-shot effect (whose key
// is EffectKey of the intent's), names the intent key, so that the entry's
// dead letter names the intent every admin command takes (package admin).
const HeaderIntent = "Oncegate-Intent"

// mile is a pipeline's last mile.
type mile struct {
	filter  *cond.Condition // nil: keep every trigger
	skip    *cond.Condition // nil: always run the step
	limits  canon.Options
	routes  []route
	targets []*target // without routes, every one; with routes, those routes name
	byName  map[string]*target
	named   bool // the targets are named effects (each key derived from its name)
	ordered bool // key.status with a ledger: firings and resolves are ordered (lifecycle.go)
	digests bool // a one-shot effect gathers its messages in digests
}

type route struct {
	name    string
	when    *cond.Condition // nil: always
	targets []*target
}

// target is one of a pipeline's effects.
type target struct {
	name    string // "" for the pipeline's single effect
	tmpl    *sink.Template
	sink    sink.Sink // where the gate sends it: its sink, or the outbox for a one-shot effect
	direct  sink.Sink // its sink itself, which the dispatcher sends a one-shot effect with
	oneShot bool
	kind    string                    // for metrics: the preset, else the sink
	retry   func(n int) time.Duration // its retry schedule (config.EffectRetry)
	digest  *template.Template        // its digest's group (config.EffectDigest); nil without one
}

// mileState is what the last mile knows of one trigger.
type mileState struct {
	doc      any
	parsed   bool
	headers  map[string]string
	status   string
	identity dedupe.Key
	vars     cond.Vars

	ans      *answer
	skip     bool
	route    string
	recorded bool // the route came from the ledger
	none     bool // no route holds: nothing to send
	out      []outEffect
}

type outEffect struct {
	t      *target
	key    dedupe.Key
	body   []byte
	suffix string
	group  string // its digest's group, or ""
}

// usesMile reports whether a pipeline needs the last mile's stages.
func usesMile(p *config.Pipeline) bool {
	e := &p.Effect
	return p.When != "" || len(p.Effects) > 0 || len(p.Routes) > 0 ||
		(p.Key.Status != "" && p.Mode != config.ModeGateWindow) ||
		(p.Step != nil && p.Step.SkipWhen != "") || e.Preset != "" || e.Body != "" || e.SubjectSuffix != ""
}

// routeKey is the ledger key of an intent's route decision.
func routeKey(k dedupe.Key) dedupe.Key { return deriveKey("oncegate/route", k, "") }

// EffectKey is the key a named effect of intent k is sent under (its
// Idempotency-Key, Nats-Msg-Id or outbox entry): the intent key for a
// pipeline's single effect.
func EffectKey(k dedupe.Key, effect string) dedupe.Key {
	if effect == "" {
		return k
	}
	return deriveKey("oncegate/effect", k, effect)
}

// OpenStatus is the status whose work is keyed by the identity itself.
const OpenStatus = "firing"

// StatusKey is the key of the work on an intent identity in a status: the
// identity itself for a trigger without a status or with OpenStatus (so
// that a firing keeps the key it has without key.status, and the work of
// a pipeline that adds key.status is not done again), and a key derived
// from the identity and the status for any other (a resolve).
func StatusKey(identity dedupe.Key, status string) dedupe.Key {
	if status == "" || status == OpenStatus {
		return identity
	}
	return deriveKey("oncegate/status", identity, status)
}

func deriveKey(domain string, k dedupe.Key, name string) dedupe.Key {
	h := sha256.New()
	h.Write([]byte(domain + "\x00" + name + "\x00"))
	h.Write(k[:])
	var d dedupe.Key
	copy(d[:], h.Sum(nil))
	return d
}

// newMile builds the last mile of pipeline p, whose single effect (if it
// has one) is sent with single. It returns the sink the dispatcher sends
// one-shot effects with, or nil if none is one-shot.
func newMile(p *pipeline, single sink.Sink) (*mile, sink.Sink, error) {
	c, cfg := p.c, p.cfg
	m := &mile{byName: map[string]*target{}, limits: KeySpec(cfg).Limits}
	m.ordered = cfg.Key.Status != "" && cfg.Mode != config.ModeGateWindow
	var err error
	if cfg.When != "" {
		if m.filter, err = cond.Compile(cfg.When); err != nil {
			return nil, nil, err
		}
	}
	if cfg.Step != nil && cfg.Step.SkipWhen != "" {
		if m.skip, err = cond.Compile(cfg.Step.SkipWhen); err != nil {
			return nil, nil, err
		}
	}
	outbox, err := sink.NewJetStream(c.js, sink.JetStreamOptions{Subject: OutboxSubject(cfg.Name)})
	if err != nil {
		return nil, nil, err
	}
	mux := &muxSink{byName: map[string]sink.Sink{}}
	for _, ne := range cfg.AllEffects() {
		path := fmt.Sprintf("pipelines[%s].effect", cfg.Name)
		t := &target{name: ne.Name, oneShot: ne.Class == config.ClassOneShot, kind: ne.Sink, retry: retrySchedule(ne.Effect)}
		if ne.Preset != "" {
			t.kind = ne.Preset
		}
		if ne.Name == "" {
			t.direct = single
		} else {
			path = fmt.Sprintf("pipelines[%s].effects[%s]", cfg.Name, ne.Name)
			if s, ok := c.opts.Sinks[cfg.Name+"/"+ne.Name]; ok {
				t.direct = s
			} else if t.direct, err = NewSink(c.js, path, ne.Effect); err != nil {
				return nil, nil, err
			}
		}
		if t.tmpl, err = effectTemplate(path, ne.Effect); err != nil {
			return nil, nil, err
		}
		if ne.Digest.Window > 0 && t.oneShot {
			if t.digest, err = tmpl.Parse(path+".digest.group", cmp.Or(ne.Digest.Group, config.DefaultDigestGroup)); err != nil {
				return nil, nil, err
			}
			m.digests = true
		}
		t.sink = t.direct
		if t.oneShot {
			t.sink = outbox
			mux.byName[ne.Name] = t.direct
		}
		m.byName[ne.Name] = t
		m.targets = append(m.targets, t)
	}
	m.named = len(cfg.Effects) > 0
	for _, r := range cfg.Routes {
		rt := route{name: r.Name}
		if r.When != "" {
			if rt.when, err = cond.Compile(r.When); err != nil {
				return nil, nil, err
			}
		}
		for _, name := range r.Effects {
			t, ok := m.byName[name]
			if !ok {
				return nil, nil, fmt.Errorf("route %s names no effect %q", r.Name, name)
			}
			rt.targets = append(rt.targets, t)
		}
		m.routes = append(m.routes, rt)
	}
	if len(mux.byName) == 0 {
		return m, nil, nil
	}
	return m, mux, nil
}

// mileStages returns the last mile's stages for the gate's chain (nil for
// the ones the pipeline does not have): the filter before the window, the
// recall of route decisions after the claim, the decision and rendering
// after the model step, followed by the after-route fault point.
func (g *gate) mileStages() (filter, recall, decide Middleware) {
	m := g.mile
	if m == nil { // a dispatcher's gate has none
		return nil, nil, nil
	}
	if m.filter != nil {
		filter = g.filterStage
	}
	if g.ledger != nil && (len(m.routes) > 0 || m.skip != nil) {
		recall = g.recall
	}
	afterRoute := faultAt(AfterRoute, g.set)
	decide = func(next Handler) Handler {
		if afterRoute != nil {
			next = afterRoute(next)
		}
		return g.decide(next)
	}
	return filter, recall, decide
}

// state returns t's last-mile state, parsing its JSON once.
func (g *gate) state(t *Trigger) *mileState {
	if t.lm == nil {
		t.lm = &mileState{}
	}
	return t.lm
}

// parsed is t's state with the trigger decoded for templates and
// conditions, which only they need.
func (g *gate) parsed(t *Trigger) *mileState {
	s := g.state(t)
	if !s.parsed {
		s.parsed = true
		s.doc, _ = tmpl.DecodeJSON(t.msg.Data()) // the key stage has validated it
		s.headers = map[string]string{}
		for k, vs := range t.msg.Headers() {
			if len(vs) > 0 {
				s.headers[k] = vs[0]
			}
		}
	}
	return s
}

// input is what t's templates and conditions see.
func (g *gate) input(t *Trigger, route, effect string) tmpl.Input {
	s := g.parsed(t)
	in := tmpl.Input{
		Trigger: s.doc, Headers: s.headers, Key: t.intent.String(), Identity: t.intent.String(),
		Status: s.status, Pipeline: g.pipeline, Step: g.stepName, Route: route, Effect: effect,
	}
	if s.status != "" {
		in.Identity = s.identity.String()
	}
	if s.ans != nil {
		in.Answer = &tmpl.Answer{Text: s.ans.Text, Fields: s.ans.Fields, Model: s.ans.Model}
	}
	return in
}

// filterStage acks the triggers the pipeline's when: condition filters out.
func (g *gate) filterStage(next Handler) Handler {
	return func(ctx context.Context, ts []*Trigger) {
		for _, t := range ts {
			if t.decided {
				continue
			}
			g.guard(t, stageFilter, func() {
				ok, err := g.mile.filter.Eval(g.vars(t))
				switch {
				case err != nil:
					t.decide(dead(t.keyRef(), outcome.ReasonCondition, fmt.Errorf("when: %w", err)))
				case !ok:
					g.filtered("when")
					t.decide(ack(t.keyRef(), nil))
				}
			})
		}
		pass(ctx, next, ts)
	}
}

func (g *gate) vars(t *Trigger) cond.Vars {
	s := g.state(t)
	if s.vars == nil || s.ans != nil {
		s.vars = cond.NewVars(g.input(t, "", ""))
	}
	return s.vars
}

// filtered counts a trigger filtered out by rule.
func (g *gate) filtered(rule string) {
	if o, ok := g.c.obs.(interface{ Filtered(pipeline, rule string) }); ok {
		o.Filtered(g.pipeline, rule)
	}
	if g.n != nil && rule == "when" {
		g.n.filtered.Add(1)
	}
}

// routeRecord is what the ledger keeps of a route decision.
type routeRecord struct {
	Route string `json:"route"` // "" when no route held
	Skip  bool   `json:"skip"`  // the step was not run
}

// recall reads the route decisions recorded for the held triggers, and
// decides whether each runs the step.
func (g *gate) recall(next Handler) Handler {
	return func(ctx context.Context, ts []*Trigger) {
		g.each(ts, stageRoute, func(t *Trigger) {
			s := g.state(t)
			if len(g.mile.routes) > 0 {
				rec, err := g.ledger.Get(ctx, routeKey(t.intent))
				switch {
				case errors.Is(err, ledger.ErrNotFound):
				case err != nil:
					t.decide(nak(t.keyRef(), 0, fmt.Errorf("reading the route decision: %w", err)))
					return
				case rec.State == ledger.StateCommitted:
					var r routeRecord
					if err := json.Unmarshal(rec.Result.Response, &r); err != nil {
						t.decide(dead(t.keyRef(), outcome.ReasonRoute, fmt.Errorf("the recorded route decision does not decode: %w", err)))
						return
					}
					s.route, s.skip, s.recorded, s.none = r.Route, r.Skip, true, r.Route == ""
					return
				}
			}
			if g.mile.skip != nil {
				skip, err := g.mile.skip.Eval(g.vars(t))
				if err != nil {
					t.decide(dead(t.keyRef(), outcome.ReasonCondition, fmt.Errorf("skip_when: %w", err)))
					return
				}
				s.skip = skip
			}
		})
		pass(ctx, next, ts)
	}
}

// decide chooses and records each trigger's route and renders its effects.
func (g *gate) decide(next Handler) Handler {
	return func(ctx context.Context, ts []*Trigger) {
		g.each(ts, stageRoute, func(t *Trigger) {
			s := g.state(t)
			targets := g.mile.targets
			if len(g.mile.routes) > 0 {
				if !s.recorded {
					if !g.chooseRoute(ctx, t) {
						return
					}
				}
				if s.none {
					// No route: nothing to send. The intent is committed
					// with that decision, and counted as filtered (a
					// resolve whose firing went nowhere, as unopened).
					if g.closing(t) {
						g.filtered("unopened")
					} else {
						g.filtered("routes")
					}
					t.res, t.effected = sink.Result{Body: []byte(`{"route":null}`)}, true
					return
				}
				i := slices.IndexFunc(g.mile.routes, func(r route) bool { return r.name == s.route })
				if i < 0 {
					t.decide(dead(t.keyRef(), outcome.ReasonRoute, fmt.Errorf("the route %q recorded for this intent is not in the configuration any more; its effects may have been sent in part", s.route)))
					return
				}
				targets = g.mile.routes[i].targets
			}
			s.out = s.out[:0]
			for _, tg := range targets {
				var body []byte
				var suffix string
				var err error
				if tg.tmpl != nil {
					body, suffix, err = tg.tmpl.Render(g.input(t, s.route, tg.name).Data())
				}
				if err != nil {
					t.decide(dead(t.keyRef(), outcome.ReasonTemplate, err))
					return
				}
				if body == nil {
					body, err = g.defaultBody(t)
					if err != nil {
						t.decide(dead(t.keyRef(), outcome.ReasonInvalidJSON, err))
						return
					}
				}
				key := t.intent
				if g.mile.named {
					key = EffectKey(t.intent, tg.name)
				}
				group := ""
				if tg.digest != nil {
					b, err := tmpl.Execute(tg.digest, "", g.input(t, s.route, tg.name).Data(), tmpl.Text)
					if err != nil {
						t.decide(dead(t.keyRef(), outcome.ReasonTemplate, err))
						return
					}
					group = cmp.Or(strings.TrimSpace(string(b)), g.pipeline)
				}
				s.out = append(s.out, outEffect{t: tg, key: key, body: body, suffix: suffix, group: group})
			}
			if len(s.out) == 1 {
				t.body = s.out[0].body // kept as the result for replies
			} else {
				t.body, _ = json.Marshal(struct {
					Route   string   `json:"route"`
					Effects []string `json:"effects"`
				}{s.route, effectNames(s.out)})
			}
		})
		pass(ctx, next, ts)
	}
}

func effectNames(out []outEffect) []string {
	names := make([]string, len(out))
	for i, o := range out {
		names[i] = o.t.name
	}
	return names
}

// defaultBody is what an effect without a template sends: the envelope of
// a pipeline with a model step, or the trigger as it came.
func (g *gate) defaultBody(t *Trigger) ([]byte, error) {
	if g.step == nil {
		return t.msg.Data(), nil
	}
	var a answer
	if s := t.lm; s != nil && s.ans != nil {
		a = *s.ans
	}
	return g.effectBody(t.intent, t.msg.Data(), a)
}

// chooseRoute decides t's route, records it, and reports whether t goes
// on (false: t is decided).
func (g *gate) chooseRoute(ctx context.Context, t *Trigger) bool {
	s := g.state(t)
	chosen := ""
	if g.closing(t) {
		// A resolve goes where its firing went (lifecycle.go).
		var err error
		if chosen, err = g.firingRoute(ctx, t); err != nil {
			t.decide(nak(t.keyRef(), 0, fmt.Errorf("reading the firing's route: %w", err)))
			return false
		}
	}
	for _, r := range g.mile.routes {
		if g.closing(t) {
			break
		}
		ok := true
		if r.when != nil {
			var err error
			if ok, err = r.when.Eval(g.vars(t)); err != nil {
				t.decide(dead(t.keyRef(), outcome.ReasonCondition, fmt.Errorf("route %s: %w", r.name, err)))
				return false
			}
		}
		if ok {
			chosen = r.name
			break
		}
	}
	rec, _ := json.Marshal(routeRecord{Route: chosen, Skip: s.skip})
	rk := routeKey(t.intent)
	claim, err := g.ledger.Begin(ctx, rk, ledger.BeginOptions{Owner: g.owner + "#route", Lease: g.lease})
	if err != nil {
		t.decide(nak(t.keyRef(), 0, fmt.Errorf("recording the route decision: %w", err)))
		return false
	}
	switch claim.Status {
	case ledger.StatusNew, ledger.StatusTakenOver:
		if err := g.ledger.Commit(ctx, rk, claim.Lease.Token, ledger.Result{Response: rec}); err != nil {
			t.decide(nak(t.keyRef(), 0, fmt.Errorf("recording the route decision: %w", err)))
			return false
		}
		if o, ok := g.c.obs.(interface{ Routed(pipeline, route string) }); ok {
			name := chosen
			if name == "" {
				name = "none"
			}
			o.Routed(g.pipeline, name)
		}
	case ledger.StatusCommitted:
		// Recorded meanwhile (by a holder this one took over from, which
		// recorded and stalled): that decision stands.
		var r routeRecord
		if err := json.Unmarshal(claim.Record.Result.Response, &r); err != nil {
			t.decide(dead(t.keyRef(), outcome.ReasonRoute, fmt.Errorf("the recorded route decision does not decode: %w", err)))
			return false
		}
		chosen, s.recorded = r.Route, true
	case ledger.StatusHeld:
		t.decide(wait(t.keyRef(), claim.RetryAfter+10*time.Millisecond, errors.New("another worker is recording the route decision")))
		return false
	default:
		t.decide(nak(t.keyRef(), 0, fmt.Errorf("the route decision's record is %s", claim.Status)))
		return false
	}
	s.route, s.none = chosen, chosen == ""
	return true
}

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
				g.stale()
				t.decide(wait(t.keyRef(), g.lease, errLeaseLost))
				return
			}
			if g.resolvedFirst(ctx, t) {
				return // its resolve went out: nothing more is sent (lifecycle.go)
			}
			e := sink.Effect{Key: o.key.String(), Pipeline: g.pipeline, Step: g.stepName, Body: o.body, SubjectSuffix: o.suffix}
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
