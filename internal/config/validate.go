package config

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Validate reports every problem with c, joined with errors.Join; each is a
// *FieldError naming the field's path and, for a Config from a file, the
// line (or the environment variable) its value came from. It does not
// touch the file system: files named in c are opened when they are used.
//
// Besides the checks of each field on its own, Validate enforces:
//   - the ledger's retention exceeds every pipeline's redelivery horizon
//     (Config.RedeliveryHorizon), and the stream's max_age when set, so that
//     a late redelivery always finds its record; the stream's max_age, when
//     set, exceeds every horizon too, and the duplicate window of the
//     effect streams covers the horizon of every pipeline whose effect is
//     a keyed JetStream publish;
//   - on a work-queue stream (the default) no two pipelines share a
//     subject; a limits stream has a max_age;
//   - each pipeline's subject is covered by the stream's subjects, and
//     neither its effect nor the dead letters feed back into it;
//   - no reply prefix reaches a subject Oncegate reads or writes
//     (ReplyOverlapError);
//   - backoff has at most max_deliver entries and ack_wait equals its first
//     (NATS replaces ack_wait with it);
//   - a gate-window pipeline has no step and a replayable jetstream effect,
//     a gate-ledger pipeline no step, a full pipeline a step;
//   - credentials only with a NATS URL, and never in the URL itself;
//   - a signed webhook timestamp is accepted for no longer than the
//     trigger stream's duplicate window, and, while the ingress serves, no
//     pipeline keys on a header the ingress takes from unsigned request
//     data.
func (c *Config) Validate() error {
	v := &validator{c: c}
	v.top()
	v.nats()
	v.ledger()
	v.llm()
	v.stream()
	v.pipelines()
	v.retention()
	v.horizons()
	v.ingress()
	v.recovery()
	v.tolerance()
	v.unsignedKeys()
	v.tracing()
	v.proxy()
	v.spend()
	return c.fieldErrors(v.issues)
}

type validator struct {
	c      *Config
	issues []issue
}

func (v *validator) add(path string, err error) {
	v.issues = append(v.issues, issue{path: path, err: err})
}

func (v *validator) positive(path string, d time.Duration) {
	if d <= 0 {
		v.add(path, invalid("must be positive, got %s", formatDuration(d)))
	}
}

func (v *validator) oneOf(path, s string, allowed ...string) bool {
	if slices.Contains(allowed, s) {
		return true
	}
	if s == "" {
		v.add(path, missing("want one of %s", strings.Join(allowed, ", ")))
	} else {
		v.add(path, invalid("%q is not one of %s", s, strings.Join(allowed, ", ")))
	}
	return false
}

// horizons checks every window that dedupes a redo of a pipeline's work
// against its redelivery horizon (Config.RedeliveryHorizon): the effect
// streams' duplicate window for a keyed JetStream publish, and the trigger
// stream's max age.
func (v *validator) horizons() {
	s := &v.c.Stream
	for i := range v.c.Pipelines {
		p := &v.c.Pipelines[i]
		if p.MaxDeliver <= 0 || p.AckWait <= 0 || s.Duplicates <= 0 {
			continue // reported already
		}
		h := v.c.RedeliveryHorizon(p)
		at := joinPath(indexPath("pipelines", i), "max_deliver")
		if p.DedupesEffect() && s.Duplicates < h {
			v.add(at, invalid("pipeline %q can redo its effect up to %s after the first attempt (%s), past the effect stream's duplicate window stream.duplicates %s: a redo after a crash would be a second effect; raise stream.duplicates, or lower max_deliver, ack_wait, backoff or ledger.lease",
				p.Name, formatDuration(h), horizonTerms(p), formatDuration(s.Duplicates)))
		}
		if s.MaxAge > 0 && s.MaxAge <= h {
			v.add("stream.max_age", invalid("%s does not exceed the redelivery horizon %s of pipeline %q (%s): a trigger could age out between two deliveries and be lost without a dead letter",
				formatDuration(s.MaxAge), formatDuration(h), p.Name, horizonTerms(p)))
		}
	}
}

// retention checks the ledger's retention against the redelivery horizon
// of every pipeline that uses the ledger.
func (v *validator) retention() {
	ret := v.c.Ledger.Retention
	if ret <= 0 {
		return // reported already
	}
	worst, horizon := -1, time.Duration(0)
	for i := range v.c.Pipelines {
		p := &v.c.Pipelines[i]
		if p.Mode == ModeGateWindow || p.AckWait <= 0 {
			continue
		}
		if h := v.c.RedeliveryHorizon(p); worst < 0 || h > horizon {
			worst, horizon = i, h
		}
	}
	if worst < 0 {
		return
	}
	p := &v.c.Pipelines[worst]
	if maxAge := v.c.Stream.MaxAge; maxAge > horizon {
		if ret <= maxAge {
			v.add("ledger.retention", invalid("%s does not exceed the stream's max_age %s: a trigger redelivered late in its life would find no record and run its effect again",
				formatDuration(ret), formatDuration(maxAge)))
		}
		return
	}
	if ret <= horizon {
		v.add("ledger.retention", invalid("%s does not exceed the redelivery horizon %s of pipeline %q (%s): a late redelivery would find no record and run its effect again; raise the retention, or lower max_deliver, ack_wait or backoff",
			formatDuration(ret), formatDuration(horizon), p.Name, horizonTerms(p)))
	}
}

// horizonTerms explains a pipeline's horizon: "5 deliveries × ack_wait 30s".
func horizonTerms(p *Pipeline) string {
	if len(p.Backoff) == 0 {
		return fmt.Sprintf("%d deliveries × ack_wait %s", p.MaxDeliver, formatDuration(p.AckWait))
	}
	bs := make([]string, len(p.Backoff))
	for i, b := range p.Backoff {
		bs[i] = formatDuration(b)
	}
	return fmt.Sprintf("%d deliveries with backoff [%s], the last repeating", p.MaxDeliver, strings.Join(bs, " "))
}

// RedeliveryHorizon is the longest that work on one trigger of p can keep
// being retried after its first delivery: over MaxDeliver deliveries, each
// waits the longest of its ack deadline (Pipeline.Horizon), its retry
// delay, and, when a ledger holds the work, the lease a crashed holder
// leaves behind. (It is the one formula of the horizon: Config.Validate and
// the consumer's stream checks use it.) Every window that dedupes a redo of
// the effect (the effect stream's duplicate window, the ledger's retention,
// the trigger stream's max age) must cover it.
//
// A taker waits ledger.max_clock_skew past a crashed holder's lease, which
// the horizon does not count: a redo that lands past the duplicate window
// all the same is caught by the consumer's guard on the work's age, which
// allows for the skew, and is dead-lettered unknown_outcome, not redone.
func (c *Config) RedeliveryHorizon(p *Pipeline) time.Duration {
	var h time.Duration
	waits := p.Backoff
	if len(waits) == 0 {
		waits = []time.Duration{p.AckWait}
	}
	for i := 1; i <= max(p.MaxDeliver, 0); i++ {
		w := max(waits[min(i, len(waits))-1], p.RetryDelay(i))
		if p.Mode != ModeGateWindow {
			w = max(w, c.Ledger.Lease)
		}
		h = addSat(h, w)
		if h == maxDuration {
			break
		}
	}
	return h
}

const maxDuration = time.Duration(math.MaxInt64)

// addSat adds the non-negative part of d to h, saturating at maxDuration.
func addSat(h, d time.Duration) time.Duration {
	d = max(d, 0)
	if h > maxDuration-d {
		return maxDuration
	}
	return h + d
}

// tolerance checks the ingress's timestamp tolerance against the trigger
// stream's duplicate window. A signed timestamp t is accepted while the
// ingress's clock reads t-Tolerance to t+Tolerance: for twice the
// tolerance, and a request replayed at its end may come that long after
// the real one was stored. Past the duplicate window the replay would be a
// second trigger (for a gate-window pipeline, whose own window a restart
// empties, a second effect), so the window must cover both sides.
func (v *validator) tolerance() {
	in, dup := &v.c.Ingress, v.c.Stream.Duplicates
	if in.Tolerance <= 0 || dup <= 0 || 2*in.Tolerance <= dup {
		return
	}
	for _, s := range in.Sources {
		if r := s.Resolved(); r.SignsTimestamp() {
			what := cmp.Or(s.Kind, "source "+s.Name)
			v.add("ingress.tolerance", invalid("%s accepts a signed timestamp for %s (%s either side of the clock), longer than stream.duplicates %s: a %s delivery replayed inside the tolerance but past the trigger stream's duplicate window would be stored as a second trigger; lower ingress.tolerance to %s or raise stream.duplicates to %s",
				formatDuration(in.Tolerance), formatDuration(2*in.Tolerance), formatDuration(in.Tolerance), formatDuration(dup), what, formatDuration(dup/2), formatDuration(2*in.Tolerance)))
			return
		}
	}
}

// unsignedKeys refuses, while the ingress serves, a pipeline that keys on
// a header an ingress source feeding it takes from unsigned request data
// (see spec.Source.UnsignedHeader). Anyone who holds one signed body (a log, a proxy,
// a delivery seen once) can post it again with any value there; the
// ingress stores it as another message (it cannot be told from a real
// delivery of that value), and a key that depends on the value would make
// it new work. A key on the body, which the signature covers, finds the
// replay's intent committed. Without the ingress the built-in sources are
// not served (-ingress validates again), so the check waits for Listen.
func (v *validator) unsignedKeys() {
	in := &v.c.Ingress
	if in.Listen == "" {
		return
	}
	for i := range v.c.Pipelines {
		p := &v.c.Pipelines[i]
		if checkSubject(p.Subject, false) != nil {
			continue
		}
		for j, h := range p.Key.Headers {
			for k := range in.Sources {
				s := &in.Sources[k]
				from := s.UnsignedHeader(h)
				if from == "" || checkSubject(s.Subject, true) != nil || !subjectsCollide(p.Subject, s.Subject) {
					continue
				}
				v.add(indexPath(joinPath(indexPath("pipelines", i), "key.headers"), j),
					invalid("%s is set by the ingress from %s, which a %s provider does not sign (source %q publishes to %s, which pipeline %q consumes): anyone holding one signed body could post it again under another value, as new work; key on fields of the body, which the signature covers",
						h, from, cmp.Or(s.Kind, s.Name), s.Name, s.Subject, p.Name))
				break
			}
		}
	}
}
