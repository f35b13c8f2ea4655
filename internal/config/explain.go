package config

import (
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Explain writes a summary of the effective configuration to w, for
// people: the process-wide settings, then each pipeline's flow (subject →
// key → window → ledger → step → effect → acks). Values nobody set are
// marked "(default)". Secrets are never printed: the file does not hold
// them, and Explain names only the files and environment variables they
// come from; URLs are printed without user information or query values.
func (c *Config) Explain(w io.Writer) error {
	x := &explainer{c: c}
	from := "built in code"
	if c.meta != nil && c.meta.file != "" {
		from = c.meta.file
	}
	fmt.Fprintf(&x.b, "Oncegate configuration (%s). \"(default)\" marks values set neither in the file nor by ONCEGATE_* variables.\n\n", from)
	tw := tabwriter.NewWriter(&x.b, 0, 4, 2, ' ', 0)
	x.tw = tw
	x.process()
	tw.Flush()
	for i := range c.Pipelines {
		x.pipeline(i)
	}
	_, err := io.WriteString(w, x.b.String())
	return err
}

type explainer struct {
	c  *Config
	b  strings.Builder
	tw *tabwriter.Writer
}

// d returns text, marked if the value at path is a default.
func (x *explainer) d(path string, v any, text string) string {
	if x.c.meta.isDefault(path, v) {
		return text + " (default)"
	}
	return text
}

func (x *explainer) row(label string, parts ...string) {
	fmt.Fprintf(x.tw, "%s\t%s\n", label, strings.Join(parts, "; "))
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
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

	k := &p.Key
	var key []string
	switch {
	case len(k.Fields) > 0:
		key = append(key, "fields "+strings.Join(k.Fields, ", "))
	case len(k.Volatile) > 0:
		key = append(key, "the whole payload less "+strings.Join(k.Volatile, ", "))
	default:
		key = append(key, "the whole payload")
	}
	if k.Version != "" {
		key = append(key, "version "+k.Version)
	}
	scope := x.d(at("key.scope"), k.Scope, k.Scope)
	if k.Scope == ScopeRun {
		scope += ", run id " + k.RunIDField
	}
	key = append(key, "scope "+scope, "hash "+x.d(at("key.hash"), k.Hash, k.Hash))
	row("2 key", key...)

	if p.When != "" {
		row("  filter", "when "+p.When+" (else acked, counted as filtered, never claimed or paid for)")
	}
	if k.Status != "" {
		row("  status", k.Status+" is part of the key; the key less it is the identity a firing and its resolve share",
			"a resolve waits for its firing's outcome up to resolve_wait "+x.d(at("key.resolve_wait"), k.ResolveWait, formatDuration(k.ResolveWait))+
				", goes where its firing went, and a firing whose resolve went out first is dropped")
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

	if s := p.Step; s == nil {
		row("5 step", "none")
	} else {
		maxTok := "unset (the model decides)"
		if s.MaxTokens > 0 {
			maxTok = strconv.Itoa(s.MaxTokens)
		}
		parts := []string{
			s.Name + " on model " + x.d(at("step.model"), s.Model, s.Model),
			"temperature " + x.d(at("step.temperature"), s.Temperature, strconv.FormatFloat(s.Temperature, 'g', -1, 64)),
			"max_tokens " + x.d(at("step.max_tokens"), s.MaxTokens, maxTok),
		}
		if s.Seed != nil {
			parts = append(parts, "seed "+strconv.FormatInt(*s.Seed, 10))
		}
		parts = append(parts, "token budget per intent "+x.d(at("step.budget_tokens"), s.BudgetTokens, budgetText(s.BudgetTokens)))
		if s.MaxBudget > 0 {
			parts = append(parts, spendLimit(s.MaxBudget, s.BudgetDuration)+", then "+x.d(at("step.over_budget"), s.OverBudget, s.OverBudget))
		}
		if len(s.Schema) > 0 {
			parts = append(parts, fmt.Sprintf("structured output: a JSON answer valid against the schema, %d calls at most", s.AnswerAttempts))
		}
		if s.SkipWhen != "" {
			parts = append(parts, "skipped when "+s.SkipWhen)
		}
		switch {
		case c.LLM.Standin:
			parts = append(parts, "served by the stand-in model (llm.standin)")
		case c.LLM.BaseURL == "":
			parts = append(parts, "no model to serve it: set llm.base_url, or llm.standin: true")
		}
		row("5 step", parts...)
	}

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

func budgetText(n int64) string {
	if n == 0 {
		return "unlimited"
	}
	return strconv.FormatInt(n, 10) + " tokens"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// redactURL returns s without user information or query values, which may
// carry secrets.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if i := strings.LastIndexByte(s, '@'); i >= 0 {
			return "REDACTED@" + s[i+1:]
		}
		return s
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"REDACTED"}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// retentionCovers says what the ledger's retention must outlive for a
// pipeline: its redelivery horizon, and the stream's max age when set.
func retentionCovers(c *Config, p *Pipeline) string {
	s := fmt.Sprintf("retention %s, redelivery horizon %s", formatDuration(c.Ledger.Retention), formatDuration(c.RedeliveryHorizon(p)))
	if c.Stream.MaxAge > 0 {
		s += ", stream max age " + formatDuration(c.Stream.MaxAge)
	}
	return s
}

// effect explains one effect; secrets are named by where they come from.
func (x *explainer) effect(path, name string, e *Effect) []string {
	var effect []string
	key := "intent key"
	if name != "" {
		key = "the effect's key (from the intent key and " + name + ")"
	}
	if e.Preset != "" {
		effect = append(effect, "preset "+e.Preset)
	}
	switch e.Sink {
	case SinkJetStream:
		subj := e.Subject
		if e.SubjectSuffix != "" {
			subj += ".<subject_suffix>"
		}
		effect = append(effect, "jetstream publish to "+subj+" with Nats-Msg-Id = "+key)
	case SinkHTTP:
		target := redactURL(e.URL)
		switch {
		case e.URLEnv != "":
			target = "the URL in $" + e.URLEnv
		case e.URLFile != "":
			target = "the URL in file " + e.URLFile
		}
		method := e.Method
		if method == "" {
			method = "POST"
		}
		effect = append(effect, "http "+method+" to "+target+" with Idempotency-Key = "+key)
		for _, h := range slices.Sorted(mapKeys(e.HeadersEnv)) {
			effect = append(effect, "header "+h+" from $"+e.HeadersEnv[h])
		}
		for _, h := range slices.Sorted(mapKeys(e.Headers)) {
			effect = append(effect, "header "+h+": "+e.Headers[h])
		}
		switch {
		case e.RoutingKeyEnv != "":
			effect = append(effect, "routing key from $"+e.RoutingKeyEnv)
		case e.RoutingKeyFile != "":
			effect = append(effect, "routing key from file "+e.RoutingKeyFile)
		}
		if e.Preset == PresetJira {
			effect = append(effect, "basic auth from "+orNone(e.UserEnv, e.UserFile)+" and "+orNone(e.TokenEnv, e.TokenFile))
		}
	case SinkFile:
		effect = append(effect, "file in "+e.Dir+", written under a temporary name and renamed")
	default:
		effect = append(effect, "sink "+e.Sink)
	}
	if e.Body != "" {
		effect = append(effect, "body from a template")
	}
	class := x.d(joinPath(path, "class"), e.Class, e.Class)
	if e.Class == ClassOneShot {
		class += " (through the ledger's outbox)"
	}
	effect = append(effect, "class "+class)
	if e.Delay > 0 {
		effect = append(effect, "held "+formatDuration(e.Delay)+" to collapse duplicates")
	}
	if e.ApprovalSubject != "" {
		effect = append(effect, "approval on "+e.ApprovalSubject+" within "+formatDuration(e.ApprovalTimeout)+" (else dead-lettered not_approved)")
	}
	if e.Retry.Backoff > 0 {
		effect = append(effect, "a failure retried after "+formatDuration(e.Retry.Backoff)+" doubling to "+formatDuration(e.Retry.MaxBackoff)+
			x.d(joinPath(path, "retry.backoff"), e.Retry.Backoff, ""))
	}
	if e.RateLimit.Requests > 0 {
		effect = append(effect, fmt.Sprintf("at most %d requests in any %s (rate_limit; a 429 waited out)%s", e.RateLimit.Requests, formatDuration(e.RateLimit.Per),
			x.d(joinPath(path, "rate_limit.requests"), e.RateLimit.Requests, "")))
	}
	if e.Digest.Window > 0 {
		effect = append(effect, "messages of one group within "+formatDuration(e.Digest.Window)+" sent as one (digest)")
	}
	return effect
}

func (x *explainer) process() {
	c := x.c
	x.row("data_dir", x.d("data_dir", c.DataDir, c.DataDir))
	x.encryption()
	x.nats()
	x.ledger()
	x.llm()
	x.tracing()
	x.prices()
	x.metrics()
	x.log()
	x.stream()
	x.ingress()
	x.recovery()
	x.proxy()
}
