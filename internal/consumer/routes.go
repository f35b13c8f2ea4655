package consumer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/cond"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/internal/tmpl"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Routes: one intent, one route.
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

// route is one of a pipeline's routes: the effects sent when its condition
// holds.
type route struct {
	name    string
	when    *cond.Condition // nil: always
	targets []*target
}

// routeKey is the ledger key of an intent's route decision.
func routeKey(k dedupe.Key) dedupe.Key { return deriveKey("oncegate/route", k, "") }

// routeRecord is what the ledger keeps of a route decision.
type routeRecord struct {
	Route string `json:"route"` // "" when no route held
	Skip  bool   `json:"skip"`  // the step was not run
}

// recallStage reads the route decisions recorded for the held triggers,
// and decides whether each runs the step.
type recallStage struct{ g *gate }

func (s *recallStage) name() string { return "recall" }

func (s *recallStage) wrap(next Handler) Handler {
	g := s.g
	return func(ctx context.Context, ts []*Trigger) {
		g.each(ts, stageRoute, func(t *Trigger) {
			st := g.state(t)
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
					st.route, st.skip, st.recorded, st.none = r.Route, r.Skip, true, r.Route == ""
					return
				}
			}
			if g.mile.skip != nil {
				skip, err := g.mile.skip.Eval(g.vars(t))
				if err != nil {
					t.decide(dead(t.keyRef(), outcome.ReasonCondition, fmt.Errorf("skip_when: %w", err)))
					return
				}
				st.skip = skip
			}
		})
		pass(ctx, next, ts)
	}
}

// routeStage chooses and records each trigger's route (or takes the one
// recorded) and renders the route's effects (render).
type routeStage struct{ g *gate }

func (s *routeStage) name() string { return "route" }

func (s *routeStage) wrap(next Handler) Handler {
	g := s.g
	return func(ctx context.Context, ts []*Trigger) {
		g.each(ts, stageRoute, func(t *Trigger) {
			st := g.state(t)
			targets := g.mile.targets
			if len(g.mile.routes) > 0 {
				if !st.recorded {
					if !g.chooseRoute(ctx, t) {
						return
					}
				}
				if st.none {
					// No route: nothing to send. The intent is committed
					// with that decision, and counted as filtered (a
					// resolve whose firing went nowhere, as unopened).
					if g.closing(t) {
						g.pol.unopened()
					} else {
						g.pol.filtered("routes")
					}
					t.res, t.effected = sink.Result{Body: []byte(`{"route":null}`)}, true
					return
				}
				i := slices.IndexFunc(g.mile.routes, func(r route) bool { return r.name == st.route })
				if i < 0 {
					t.decide(dead(t.keyRef(), outcome.ReasonRoute, fmt.Errorf("the route %q recorded for this intent is not in the configuration any more; its effects may have been sent in part", st.route)))
					return
				}
				targets = g.mile.routes[i].targets
			}
			st.out = st.out[:0]
			for _, tg := range targets {
				var body []byte
				var suffix string
				var err error
				if tg.tmpl != nil {
					body, suffix, err = tg.tmpl.Render(g.input(t, st.route, tg.name).Data())
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
					b, err := tmpl.Execute(tg.digest, "", g.input(t, st.route, tg.name).Data(), tmpl.Text)
					if err != nil {
						t.decide(dead(t.keyRef(), outcome.ReasonTemplate, err))
						return
					}
					group = cmp.Or(strings.TrimSpace(string(b)), g.pipeline)
				}
				st.out = append(st.out, outEffect{t: tg, key: key, body: body, suffix: suffix, group: group})
			}
			if len(st.out) == 1 {
				t.body = st.out[0].body // kept as the result for replies
			} else {
				t.body, _ = json.Marshal(struct {
					Route   string   `json:"route"`
					Effects []string `json:"effects"`
				}{st.route, effectNames(st.out)})
			}
		})
		pass(ctx, next, ts)
	}
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
