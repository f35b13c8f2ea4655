package consumer

import (
	"cmp"
	"context"
	"fmt"
	"text/template"
	"time"

	"github.com/oncegate/oncegate/internal/cond"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/internal/tmpl"
	"github.com/oncegate/oncegate/pkg/canon"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// The last mile: what turns an intent into the right messages in the
// right tools. A pipeline that uses it (a when: filter, step.skip_when,
// named effects, routes, or an effect with a template) gets these stages
// around the claim and the model step (doc.go draws the whole chain; this
// file holds the filter and the rendering, routes.go the route decision,
// fanout.go the effects):
//
//	key (+status) → filter → window → claim → recall → step (unless skipped) → route → [after-route] → effect
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
//   - route: the route is chosen (the first whose condition holds, over
//     the trigger and the answer) and recorded; each effect of the route is
//     rendered. A template that fails dead-letters the trigger with reason
//     template: no effect is sent half-rendered, and none of the others is
//     sent either.
//   - effect: each effect is sent under its own key, derived from the
//     intent key and its name, so that a redo collapses at each target; a
//     one-shot effect is published to the pipeline's outbox (under that
//     key, with its name in a header) and sent by the dispatcher. The
//     intent is committed once all its effects are out.

// The stages of the last mile, for panics.
const (
	stageFilter = "filter"
	stageRoute  = "route"
)

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
type filterStage struct {
	g    *gate
	when *cond.Condition
}

func (s *filterStage) name() string { return "filter" }

func (s *filterStage) wrap(next Handler) Handler {
	g := s.g
	return func(ctx context.Context, ts []*Trigger) {
		for _, t := range ts {
			if t.decided {
				continue
			}
			g.guard(t, stageFilter, func() {
				ok, err := s.when.Eval(g.vars(t))
				switch {
				case err != nil:
					t.decide(dead(t.keyRef(), outcome.ReasonCondition, fmt.Errorf("when: %w", err)))
				case !ok:
					g.pol.filtered("when")
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
