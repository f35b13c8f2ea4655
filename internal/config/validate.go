package config

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/tmpl"
	"github.com/oncegate/oncegate/pkg/canon"
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
	if p.Key.ResolveWait < 0 {
		v.add(at("key.resolve_wait"), invalid("must be 0 or positive, got %s", formatDuration(p.Key.ResolveWait)))
	} else if p.Key.ResolveWait > 0 && p.Key.Status == "" {
		v.add(at("key.resolve_wait"), invalid("orders a firing and its resolve: it needs key.status"))
	}
	if p.Key.Status != "" {
		if _, err := canon.ParsePointer(p.Key.Status); err != nil {
			v.add(at("key.status"), invalid("%q is not a JSON Pointer: %v", p.Key.Status, err))
		} else if slices.Contains(p.Key.Fields, p.Key.Status) || p.Key.Version == p.Key.Status {
			v.add(at("key.status"), invalid("%q is also a key field: the identity a firing and its resolve share must not hold the status", p.Key.Status))
		} else if len(p.Key.Fields) == 0 && !slices.Contains(p.Key.Volatile, p.Key.Status) {
			v.add(at("key.status"), invalid("the key is the whole payload, status included: add %q to key.volatile, so that the identity leaves it out", p.Key.Status))
		}
	}
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

func (v *validator) key(at func(string) string, p *Pipeline) {
	k := &p.Key
	pointer := func(path, s string) {
		if _, err := canon.ParsePointer(s); err != nil {
			v.add(path, invalid("%q is not a JSON Pointer: %v", s, err))
		}
	}
	for j, f := range k.Fields {
		pointer(indexPath(at("key.fields"), j), f)
	}
	for j, f := range k.Volatile {
		pointer(indexPath(at("key.volatile"), j), f)
	}
	if len(k.Fields) > 0 && len(k.Volatile) > 0 {
		v.add(at("key.volatile"), invalid("volatile members are dropped only from the whole payload, when no fields are named: set fields or volatile, not both"))
	}
	if k.Version != "" {
		pointer(at("key.version"), k.Version)
	}
	if v.oneOf(at("key.scope"), k.Scope, ScopeInput, ScopeRun) {
		switch {
		case k.Scope == ScopeRun && k.RunIDField == "":
			v.add(at("key.run_id_field"), missing("scope run needs the JSON Pointer of the run id"))
		case k.Scope == ScopeRun:
			pointer(at("key.run_id_field"), k.RunIDField)
		case k.RunIDField != "":
			v.add(at("key.run_id_field"), invalid("only used with scope run"))
		}
	}
	v.oneOf(at("key.hash"), k.Hash, HashXXH, HashSHA256)
	seen := map[string]bool{}
	for j, h := range k.Headers {
		if !validHeaderName(h) {
			v.add(indexPath(at("key.headers"), j), invalid("%q is not a header name", h))
			continue
		}
		// Header names are not case-sensitive: the key reads each once.
		if c := http.CanonicalHeaderKey(h); seen[c] {
			v.add(at("key"), invalid("header %q is named twice", h))
		} else {
			seen[c] = true
		}
	}
}

func (v *validator) step(at func(string) string, s *Step) {
	if err := checkName(s.Name); err != nil {
		v.add(at("step.name"), err)
	}
	if s.Model == "" {
		v.add(at("step.model"), missing("a model is required"))
	}
	if s.Prompt == "" {
		v.add(at("step.prompt"), missing("a prompt template is required"))
	}
	for _, t := range []struct{ key, text string }{{"system", s.System}, {"prompt", s.Prompt}} {
		if _, err := tmpl.Parse(t.key, t.text); err != nil {
			v.add(at("step."+t.key), invalid("%v", errors.Unwrap(err)))
		}
	}
	v.schema(at("step.schema"), s.Schema)
	if s.AnswerAttempts < 1 {
		v.add(at("step.answer_attempts"), invalid("must be at least 1, got %d", s.AnswerAttempts))
	}
	if s.Temperature < 0 || s.Temperature > 2 || math.IsNaN(s.Temperature) {
		v.add(at("step.temperature"), invalid("must be 0 to 2, got %v", s.Temperature))
	}
	if s.MaxTokens < 0 {
		v.add(at("step.max_tokens"), invalid("must be 0 (the model's default) or positive, got %d", s.MaxTokens))
	}
	if s.BudgetTokens < 0 {
		v.add(at("step.budget_tokens"), invalid("must be 0 (no cap) or positive, got %d", s.BudgetTokens))
	}
}

// reservedHeaders are set by the http sink itself.
var reservedHeaders = []string{"Idempotency-Key", "Content-Type", "Content-Length", "Host"}

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
