package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Pipeline modes.
const (
	// ModeFull runs the whole flow: key, window, ledger, step, effect.
	ModeFull = "full"
	// ModeGateWindow drops duplicates with the in-memory window alone and
	// publishes to JetStream with Nats-Msg-Id: no ledger, no step. Fast,
	// and only as good as the window's memory and the target stream's
	// duplicate window.
	ModeGateWindow = "gate-window"
	// ModeGateLedger gates the effect through the ledger, without a step.
	ModeGateLedger = "gate-ledger"
)

// Pipeline is one flow from a subject to an effect.
type Pipeline struct {
	// Name identifies the pipeline in keys, metrics, logs and environment
	// variables: lower-case letters, digits and '-', unique. Required.
	Name string `yaml:"name"`
	// Subject is the filter of the pipeline's consumer; the stream's
	// subjects must cover it. Required.
	Subject string `yaml:"subject"`
	// Mode is ModeFull, ModeGateWindow or ModeGateLedger. The default is
	// ModeFull when Step is set, else ModeGateLedger.
	Mode string `yaml:"mode"`
	// Key says which part of a trigger identifies the work.
	Key Key `yaml:"key"`
	// Step is the model call; nil for gate pipelines.
	Step *Step `yaml:"step"`
	// When is a CEL condition (package cond) over the trigger, its
	// headers and its status: a trigger for which it is false is filtered
	// out — acked, counted in oncegate_filtered_total, never claimed, paid
	// for or sent. Empty keeps every trigger.
	When string `yaml:"when"`
	// Effect is what the pipeline does, once per intent. A pipeline has
	// Effect, or Effects.
	Effect Effect `yaml:"effect"`
	// Effects are named effects: without Routes each intent performs all
	// of them, with Routes those of its route. Each is sent under its own
	// key, derived from the intent key and its name, so that a redo
	// collapses at each target; the intent is committed once all are out.
	Effects map[string]Effect `yaml:"effects"`
	// Routes choose, per intent, which of Effects it performs.
	Routes []Route `yaml:"routes"`
	// Window configures the in-memory duplicate window.
	Window Window `yaml:"window"`
	// AckWait is how long JetStream waits for an ack before redelivering.
	// With Backoff set, NATS uses Backoff[0] instead, so the two must
	// agree. The default is Backoff[0] if set, else 30s.
	AckWait time.Duration `yaml:"ack_wait"`
	// MaxDeliver is how many tries an intent gets before it is
	// dead-lettered: with a ledger, how many times its work is claimed
	// (whichever of its triggers claims it); without one, how many times a
	// trigger is delivered. A duplicate that waits on work another trigger
	// holds is not trying, and is never dead-lettered for it. Oncegate
	// counts the tries itself (the server's consumer has no limit), so that
	// work whose last try dies with its process comes back once more, to be
	// dead-lettered rather than dropped. The default is 5.
	MaxDeliver int `yaml:"max_deliver"`
	// Backoff are the redelivery delays after each failed delivery; the
	// last repeats. At most MaxDeliver of them. The default is none
	// (every redelivery waits AckWait).
	Backoff []time.Duration `yaml:"backoff"`
	// MaxAckPending bounds the triggers delivered and not yet acked. The
	// default is 1000.
	MaxAckPending int `yaml:"max_ack_pending"`
	// Concurrency is how many triggers are worked on at once, at most
	// MaxAckPending. The default is 64.
	Concurrency int `yaml:"concurrency"`
}

// Window configures a pipeline's in-memory duplicate window.
type Window struct {
	// TTL is how long a key is remembered. The default is 10m.
	TTL time.Duration `yaml:"ttl"`
	// Capacity is how many keys fit. The default is 1000000.
	Capacity int `yaml:"capacity"`
}

// Route sends the intents whose condition holds to some of a pipeline's
// named effects. Routes are tried in order and the first whose condition
// holds is taken: one route per intent, decided once (the decision is
// recorded before any effect, and a redelivery takes the recorded route).
type Route struct {
	// Name names the route in the ledger's record of the decision, in
	// metrics and in templates (.route): lower-case letters, digits and
	// '-'. Required.
	Name string `yaml:"name"`
	// When is a CEL condition (package cond); empty always holds.
	When string `yaml:"when"`
	// Effects are the names of the pipeline's effects the route performs,
	// each under its own key. At least one.
	Effects []string `yaml:"effects"`
}

// Defaults of a pipeline.
const (
	DefaultWindowTTL      = 10 * time.Minute
	DefaultWindowCapacity = 1_000_000
	DefaultAckWait        = 30 * time.Second
	DefaultMaxDeliver     = 5
	DefaultMaxAckPending  = 1000
	DefaultConcurrency    = 64
)

// RetryDelay is the wait Oncegate asks for before delivery n+1 after a
// retryable failure of delivery n: the pipeline's backoff if it has one
// (the last step repeating), or 250ms doubling up to 30s.
func (p *Pipeline) RetryDelay(n int) time.Duration {
	n = max(n, 1)
	if b := p.Backoff; len(b) > 0 {
		return b[min(n, len(b))-1]
	}
	return min(250*time.Millisecond<<min(n-1, 7), 30*time.Second)
}

// DedupesEffect reports whether p's effect is a keyed JetStream publish
// that the duplicate window of the stream taking it must cover: a
// jetstream sink, or a one-shot effect's publish to its outbox.
func (p *Pipeline) DedupesEffect() bool {
	for _, e := range p.AllEffects() {
		if e.Sink == SinkJetStream || e.Class == ClassOneShot {
			return true
		}
	}
	return false
}

// pipelineDefaults fills in pipeline i: its mode, key, step, effects,
// window and delivery settings.
func (c *Config) pipelineDefaults(i int) {
	p := &c.Pipelines[i]
	at := func(field string) string { return joinPath(indexPath("pipelines", i), field) }
	mode := ModeGateLedger
	if p.Step != nil {
		mode = ModeFull
	}
	setDefault(c, at("mode"), &p.Mode, mode)
	setDefault(c, at("key.scope"), &p.Key.Scope, ScopeInput)
	setDefault(c, at("key.hash"), &p.Key.Hash, HashXXH)
	if p.Key.Status != "" {
		setDefault(c, at("key.resolve_wait"), &p.Key.ResolveWait, DefaultResolveWait)
	}
	c.stepDefaults(at, p)
	c.pipelineEffectDefaults(at, p)
	setDefault(c, at("window.ttl"), &p.Window.TTL, DefaultWindowTTL)
	setDefault(c, at("window.capacity"), &p.Window.Capacity, DefaultWindowCapacity)
	ackWait := DefaultAckWait
	if len(p.Backoff) > 0 {
		ackWait = p.Backoff[0]
	}
	setDefault(c, at("ack_wait"), &p.AckWait, ackWait)
	setDefault(c, at("max_deliver"), &p.MaxDeliver, DefaultMaxDeliver)
	setDefault(c, at("max_ack_pending"), &p.MaxAckPending, DefaultMaxAckPending)
	setDefault(c, at("concurrency"), &p.Concurrency, DefaultConcurrency)
}

// pipelines checks that there are pipelines (or the proxy alone), each
// pipeline, and that no two share a name.
func (v *validator) pipelines() {
	if len(v.c.Pipelines) == 0 {
		switch {
		case !v.c.ProxyOn():
			v.add("pipelines", missing("at least one pipeline is required (or none, with the proxy alone: proxy.listen)"))
		case v.c.IngressOn():
			v.add("ingress.listen", invalid("the ingress feeds the pipelines, and there are none: add a pipeline, or leave the ingress off"))
		case v.c.Console.Listen != "":
			v.add("console.listen", invalid("the console shows the pipelines' dead letters and records, and there are none: add a pipeline, or leave the console off"))
		}
	}
	first := make(map[string]int, len(v.c.Pipelines))
	for i := range v.c.Pipelines {
		v.pipeline(i)
		name := v.c.Pipelines[i].Name
		if j, dup := first[name]; dup && name != "" {
			v.add(joinPath(indexPath("pipelines", i), "name"), invalid("pipeline %q is defined twice (also pipelines[%d])", name, j))
		} else if !dup {
			first[name] = i
		}
	}
}

// pipeline checks pipeline i, section by section: its name and subject,
// its mode against its step and effect, its key, step and effects, its
// window and its delivery settings.
func (v *validator) pipeline(i int) {
	p := &v.c.Pipelines[i]
	at := func(field string) string { return joinPath(indexPath("pipelines", i), field) }

	if err := checkName(p.Name); err != nil {
		v.add(at("name"), err)
	}

	subjectOK := false
	if err := checkSubject(p.Subject, false); err != nil {
		v.add(at("subject"), err)
	} else {
		subjectOK = true
		covered := slices.ContainsFunc(v.c.Stream.Subjects, func(s string) bool {
			return checkSubject(s, false) == nil && subjectCovers(s, p.Subject)
		})
		if !covered {
			v.add(at("subject"), invalid("%q is not covered by the stream's subjects %s: the pipeline would never see a trigger", p.Subject, quoteSubjects(v.c.Stream.Subjects)))
		}
	}

	if v.oneOf(at("mode"), p.Mode, ModeFull, ModeGateWindow, ModeGateLedger) {
		switch {
		case p.Mode == ModeFull && p.Step == nil:
			v.add(at("step"), missing("mode full runs a step; add one, or use mode gate-ledger"))
		case p.Mode != ModeFull && p.Step != nil:
			v.add(at("step"), invalid("mode %s runs no step; remove it, or use mode full", p.Mode))
		}
		if p.Mode == ModeGateWindow {
			if p.Effect.Sink != SinkJetStream {
				v.add(at("effect.sink"), invalid("mode gate-window has no ledger and relies on the jetstream sink's Nats-Msg-Id: want sink jetstream, got %q", p.Effect.Sink))
			}
			if p.Effect.Class != ClassReplayable {
				v.add(at("effect.class"), invalid("mode gate-window has no ledger for a one-shot effect's outbox: want class replayable"))
			}
		}
	}

	v.key(at, p)
	if p.Step != nil {
		v.step(at, p.Step)
	}
	v.keyStatus(at, &p.Key)
	v.effects(at, p, subjectOK)

	v.positive(at("window.ttl"), p.Window.TTL)
	if p.Window.Capacity < 1 {
		v.add(at("window.capacity"), invalid("must be positive, got %d", p.Window.Capacity))
	}

	v.positive(at("ack_wait"), p.AckWait)
	if p.MaxDeliver < 1 {
		v.add(at("max_deliver"), invalid("must be at least 1, got %d: unlimited redelivery would never dead-letter", p.MaxDeliver))
	}
	for j, b := range p.Backoff {
		v.positive(indexPath(at("backoff"), j), b)
	}
	if p.MaxDeliver >= 1 && len(p.Backoff) > p.MaxDeliver {
		v.add(at("backoff"), invalid("%d delays for max_deliver %d: NATS allows at most max_deliver", len(p.Backoff), p.MaxDeliver))
	}
	if len(p.Backoff) > 0 && p.AckWait != p.Backoff[0] {
		v.add(at("ack_wait"), invalid("%s differs from the first backoff %s, which NATS uses as the ack wait; make them equal or drop ack_wait", formatDuration(p.AckWait), formatDuration(p.Backoff[0])))
	}
	if p.MaxAckPending < 1 {
		v.add(at("max_ack_pending"), invalid("must be positive, got %d", p.MaxAckPending))
	}
	if p.Concurrency < 1 {
		v.add(at("concurrency"), invalid("must be positive, got %d", p.Concurrency))
	} else if p.MaxAckPending >= 1 && p.Concurrency > p.MaxAckPending {
		v.add(at("concurrency"), invalid("%d workers for max_ack_pending %d: the extra workers would never get a trigger", p.Concurrency, p.MaxAckPending))
	}
}

func (x *explainer) pipeline(i int) {
	c := x.c
	p := &c.Pipelines[i]
	at := func(field string) string { return joinPath(indexPath("pipelines", i), field) }
	fmt.Fprintf(&x.b, "\npipeline %s: mode %s\n", p.Name, x.d(at("mode"), p.Mode, p.Mode))
	tw := tabwriter.NewWriter(&x.b, 0, 4, 2, ' ', 0)
	x.tw = tw
	row := func(label string, parts ...string) { x.row("  "+label, parts...) }

	row("1 subject", p.Subject+" (stream "+c.Stream.Name+")")

	row("2 key", x.key(at, &p.Key)...)

	if p.When != "" {
		row("  filter", "when "+p.When+" (else acked, counted as filtered, never claimed or paid for)")
	}
	if k := &p.Key; k.Status != "" {
		row("  status", x.keyStatus(at, k)...)
	}
	row("3 window", "ttl "+x.d(at("window.ttl"), p.Window.TTL, formatDuration(p.Window.TTL)),
		"capacity "+x.d(at("window.capacity"), p.Window.Capacity, strconv.Itoa(p.Window.Capacity)+" keys"))

	if p.Mode == ModeGateWindow {
		row("4 ledger", "none: mode gate-window trusts the window and the target stream's Nats-Msg-Id duplicate window")
	} else {
		claims := "claims written before the effect"
		if c.Ledger.Store == StoreBadger && !p.HasClass(ClassOneShot) {
			claims = "claims kept in memory (a replayable effect is redone after a crash), commits written"
		}
		row("4 ledger", c.Ledger.Store, "lease "+formatDuration(c.Ledger.Lease), claims,
			retentionCovers(c, p))
	}

	row("5 step", x.step(at, p.Step)...)

	for _, ne := range p.AllEffects() {
		label, epath := "6 effect", at("effect")
		if ne.Name != "" {
			label, epath = "6 effect "+ne.Name, keyPath(at("effects"), ne.Name)
		}
		row(label, x.effect(epath, ne.Name, ne.Effect)...)
	}
	for i, r := range p.Routes {
		label := ""
		if i == 0 {
			label = "  routes"
		}
		when := "always"
		if r.When != "" {
			when = "when " + r.When
		}
		row(label, fmt.Sprintf("%d. %s: %s → %s", i+1, r.Name, when, strings.Join(r.Effects, " + ")))
	}
	if len(p.Routes) > 0 {
		row("", "the first route that holds is taken, recorded in the ledger before any effect, and taken again by a redelivery; no route: acked, counted as filtered (rule routes); with key.status a resolve takes its firing's route")
	}

	backoff := "none (each redelivery after ack_wait)"
	if len(p.Backoff) > 0 {
		bs := make([]string, len(p.Backoff))
		for j, b := range p.Backoff {
			bs[j] = formatDuration(b)
		}
		backoff = strings.Join(bs, ", ") + " (the last repeats)"
	}
	row("7 ack", "ack_wait "+x.d(at("ack_wait"), p.AckWait, formatDuration(p.AckWait)),
		"max_deliver "+x.d(at("max_deliver"), p.MaxDeliver, strconv.Itoa(p.MaxDeliver)),
		"backoff "+backoff,
		"max_ack_pending "+x.d(at("max_ack_pending"), p.MaxAckPending, strconv.Itoa(p.MaxAckPending)),
		"concurrency "+x.d(at("concurrency"), p.Concurrency, strconv.Itoa(p.Concurrency)))
	row("  then", "dead letter to "+c.Stream.DeadLetter(p.Name))
	tw.Flush()
}
