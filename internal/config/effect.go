package config

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"time"
)

// Effect sinks and classes.
const (
	SinkJetStream = "jetstream"
	SinkHTTP      = "http"
	SinkFile      = "file"

	// ClassReplayable effects are safe to send twice (the sink dedupes by
	// the intent key) and are sent directly.
	ClassReplayable = "replayable"
	// ClassOneShot effects must not be sent twice; they go through the
	// ledger's outbox, may wait Delay, and may need approval.
	ClassOneShot = "one-shot"
)

// Effect is what a pipeline does once per intent: a request to a sink,
// rendered from the trigger, the model's answer and the key by templates
// (package tmpl's data value) or a preset. Secrets — an incoming-webhook
// URL, a routing key, a token — come from the environment or a file
// (the *_env and *_file fields), never from the configuration file; see
// Effect.Secrets.
type Effect struct {
	// Preset names a request shape: PresetSlack, PresetPagerDuty,
	// PresetJira or PresetWebhook (Oncegate's envelope). Its fields (Text,
	// Summary, Link, EventAction, DedupKey, Severity, Source, Project,
	// IssueType) have defaults, each overridable; Body replaces the whole
	// body. A preset other than webhook implies sink http. The default is
	// none.
	Preset string `yaml:"preset"`
	// Sink is SinkJetStream, SinkHTTP or SinkFile. Required, unless a
	// preset implies it.
	Sink string `yaml:"sink"`
	// Subject is the subject a jetstream sink publishes to, with header
	// Nats-Msg-Id set to the effect's key. A literal subject.
	Subject string `yaml:"subject"`
	// SubjectSuffix, for a jetstream sink, is a template whose output (one
	// or more subject tokens) is appended to Subject after a dot.
	SubjectSuffix string `yaml:"subject_suffix"`
	// URL is where an http sink sends, with header Idempotency-Key set to
	// the effect's key; URLEnv or URLFile name where to read a URL that is
	// a secret (a Slack incoming webhook's). Set one of the three. The
	// pagerduty preset's default is the Events API v2 endpoint; the jira
	// preset's is the site (https://acme.atlassian.net), to which it adds
	// /rest/api/3/issue.
	URL     string `yaml:"url"`
	URLEnv  string `yaml:"url_env"`
	URLFile string `yaml:"url_file"`
	// Method is POST (the default), PUT or PATCH.
	Method string `yaml:"method"`
	// Headers are static headers of an http sink. Values that are secrets
	// do not belong here: Authorization, Cookie and names ending in Token,
	// Key, Secret or Password are refused; use HeadersEnv.
	Headers map[string]string `yaml:"headers"`
	// HeadersEnv maps an HTTP header to the environment variable holding
	// its value, for secrets such as Authorization: values never come from
	// the file.
	HeadersEnv map[string]string `yaml:"headers_env"`
	// Body is the template of the request body (of the published message,
	// for a jetstream sink). Without a body or a preset, an effect sends
	// what it always has: the trigger as it arrived (a gate pipeline), or
	// Oncegate's envelope (a pipeline with a model step).
	Body string `yaml:"body"`

	// Preset fields: templates, with the preset's defaults.
	Text        string `yaml:"text"`         // slack: the message; jira: the description (ADF)
	Summary     string `yaml:"summary"`      // pagerduty, jira: the summary
	Link        string `yaml:"link"`         // slack, pagerduty: a link back
	EventAction string `yaml:"event_action"` // pagerduty: trigger, acknowledge or resolve; the default by status
	DedupKey    string `yaml:"dedup_key"`    // pagerduty: the default is the alert's identity
	Severity    string `yaml:"severity"`     // pagerduty: mapped to critical, error, warning or info
	Source      string `yaml:"source"`       // pagerduty: payload.source
	Project     string `yaml:"project"`      // jira: the project key; required for jira
	IssueType   string `yaml:"issue_type"`   // jira: the issue type's name; the default is Task

	// RoutingKeyEnv or RoutingKeyFile name where the pagerduty preset
	// reads its integration key; one is required for it.
	RoutingKeyEnv  string `yaml:"routing_key_env"`
	RoutingKeyFile string `yaml:"routing_key_file"`
	// UserEnv or UserFile, and TokenEnv or TokenFile, name where the jira
	// preset reads its account's email and API token (basic auth).
	UserEnv   string `yaml:"user_env"`
	UserFile  string `yaml:"user_file"`
	TokenEnv  string `yaml:"token_env"`
	TokenFile string `yaml:"token_file"`

	// Dir is the directory a file sink writes to.
	Dir string `yaml:"dir"`
	// Class is ClassReplayable or ClassOneShot. The default is one-shot
	// for the slack and jira presets (neither honours an idempotency key),
	// else replayable.
	Class string `yaml:"class"`
	// Delay holds a one-shot effect this long, collapsing duplicates and
	// allowing cancellation. Only for a pipeline's single effect. The
	// default is 0.
	Delay time.Duration `yaml:"delay"`
	// ApprovalSubject, for a one-shot effect, is the subject on which the
	// effect waits for approval before it goes out. An effect waiting for
	// approval is parked: it holds none of the dispatcher's
	// max_ack_pending, so approved effects go out past any number of
	// waiting ones. Only for a pipeline's single effect.
	ApprovalSubject string `yaml:"approval_subject"`
	// ApprovalTimeout is how long a parked effect waits for its approval
	// before it is dead-lettered with reason not_approved (and a late
	// approval answered so). The default is 24h (DefaultApprovalTimeout) when
	// ApprovalSubject is set.
	ApprovalTimeout time.Duration `yaml:"approval_timeout"`

	// Retry is how the effect is tried again after a failure that may
	// pass (a 5xx, a 408 or 409, a timeout, no answer): on its own
	// schedule, whatever the pipeline's ack_wait and backoff.
	Retry EffectRetry `yaml:"retry"`
	// RateLimit holds an http effect's requests within its receiver's
	// quota: they wait for room instead of being refused.
	RateLimit EffectRateLimit `yaml:"rate_limit"`
	// Digest sends the one-shot messages of one group that go out within
	// a short window as one message (the slack preset's: their texts, one
	// a line). Off unless Window is set.
	Digest EffectDigest `yaml:"digest"`
}

// EffectDigest gathers a one-shot effect's messages: the first of a group
// waits Window for others of its group, and they go out as one message
// (one request, under the first's key), each entry recorded sent with it.
// The dispatcher then sends several entries at once, so a dispatcher that
// dies while a digest goes out leaves each of its entries of unknown
// outcome (dead-lettered unknown_outcome, never resent). Only for the
// slack preset.
type EffectDigest struct {
	// Window is how long the first message of a group waits for others.
	// 0 (the default) sends each message alone.
	Window time.Duration `yaml:"window"`
	// Group is a template over the effect's data whose output names the
	// group: messages with the same output go out together. The default is
	// the trigger's groupKey (an Alertmanager notification's, which each
	// of its alerts' triggers keeps), else the pipeline.
	Group string `yaml:"group"`
}

// EffectRetry is an effect's retry schedule. A failed request is tried
// again within one delivery (http: up to 5 attempts) after Backoff, then
// twice that, and so on up to MaxBackoff, each wait drawn at random from
// its upper half; a delivery whose attempts all failed is put back for
// the same schedule, counted from the intent's tries (max_deliver), not
// for the pipeline's ack_wait or backoff, which pace work whose process
// stopped.
type EffectRetry struct {
	// Backoff is the first wait. The default is 500ms.
	Backoff time.Duration `yaml:"backoff"`
	// MaxBackoff caps the waits, a Retry-After's included (but not a
	// rate limit's, whose 429s are waited out). The default is 5s.
	MaxBackoff time.Duration `yaml:"max_backoff"`
}

// The defaults of an effect's retry schedule (Effect.Retry).
const (
	DefaultEffectBackoff    = 500 * time.Millisecond
	DefaultEffectMaxBackoff = 5 * time.Second
)

// Delay is the wait before try n+1 (n ≥ 1) of a delivery that failed:
// Backoff doubled n-1 times, capped at MaxBackoff, drawn at random from
// its upper half.
func (r EffectRetry) Delay(n int) time.Duration {
	d := r.Backoff
	for i := 1; i < n && d < r.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, r.MaxBackoff)
	if half := d / 2; half > 0 {
		d = half + rand.N(d-half+1)
	}
	return d
}

// EffectRateLimit is a receiver's quota, which an http effect's requests
// keep within: at most Requests in any window of Per (with a little to
// spare, for the network's jitter), so a burst up to the quota goes at
// once and the rest wait their turn; a 429 pauses them all until its
// Retry-After and is tried again; and trigger events of the pagerduty
// preset waiting with one dedup_key collapse into one (PagerDuty would add
// them to one alert). Waiting keeps the trigger's lease and message: it is
// not a try. The pagerduty preset's default is 120 a minute (the Events
// API's limit per routing key), the slack preset's 20 in 20s (an incoming
// webhook's one a second, in short bursts).
type EffectRateLimit struct {
	// Requests is how many requests the receiver takes in each Per; 0 is
	// no limit. The default is 0, but for the presets above.
	Requests int `yaml:"requests"`
	// Per is the quota's window. The default is 1m (20s for slack).
	Per time.Duration `yaml:"per"`
}

// DefaultApprovalTimeout is how long a one-shot effect waits for approval
// when Effect.ApprovalTimeout is not set.
const DefaultApprovalTimeout = 24 * time.Hour

// IsSet reports whether the effect was given (a pipeline has Effect or
// Effects).
func (e *Effect) IsSet() bool { return e.Sink != "" || e.Preset != "" }

// NamedEffect is one of a pipeline's effects with its name: "" for the
// single Effect.
type NamedEffect struct {
	Name string
	*Effect
}

// AllEffects lists the pipeline's effects: its single Effect (named ""),
// or its Effects sorted by name.
func (p *Pipeline) AllEffects() []NamedEffect {
	if len(p.Effects) == 0 {
		return []NamedEffect{{"", &p.Effect}}
	}
	out := make([]NamedEffect, 0, len(p.Effects))
	for _, name := range slices.Sorted(mapKeys(p.Effects)) {
		e := p.Effects[name]
		out = append(out, NamedEffect{name, &e})
	}
	return out
}

// HasClass reports whether one of the pipeline's effects is of class.
func (p *Pipeline) HasClass(class string) bool {
	for _, e := range p.AllEffects() {
		if e.Class == class {
			return true
		}
	}
	return false
}

// effectDefaults fills in what the preset implies.
func (c *Config) effectDefaults(path string, e *Effect) {
	sink, class := "", ClassReplayable
	switch e.Preset {
	case PresetSlack, PresetJira:
		sink, class = SinkHTTP, ClassOneShot
	case PresetPagerDuty:
		sink = SinkHTTP
		if e.URL == "" && e.URLEnv == "" && e.URLFile == "" {
			setDefault(c, joinPath(path, "url"), &e.URL, PagerDutyURL)
		}
	}
	if sink != "" {
		setDefault(c, joinPath(path, "sink"), &e.Sink, sink)
	}
	setDefault(c, joinPath(path, "class"), &e.Class, class)
	setDefault(c, joinPath(path, "delay"), &e.Delay, 0)
	setDefault(c, joinPath(path, "retry.backoff"), &e.Retry.Backoff, DefaultEffectBackoff)
	setDefault(c, joinPath(path, "retry.max_backoff"), &e.Retry.MaxBackoff, max(DefaultEffectMaxBackoff, e.Retry.Backoff))
	if e.Digest.Window > 0 {
		setDefault(c, joinPath(path, "digest.group"), &e.Digest.Group, DefaultDigestGroup)
	}
	q, preset := PresetQuotas[e.Preset]
	if preset {
		setDefault(c, joinPath(path, "rate_limit.requests"), &e.RateLimit.Requests, q.Requests)
	} else {
		q.Per = time.Minute
	}
	if e.RateLimit.Requests > 0 {
		setDefault(c, joinPath(path, "rate_limit.per"), &e.RateLimit.Per, q.Per)
	}
	if e.ApprovalSubject != "" {
		setDefault(c, joinPath(path, "approval_timeout"), &e.ApprovalTimeout, DefaultApprovalTimeout)
	}
}

// pipelineEffectDefaults fills in the defaults of a pipeline's effects.
func (c *Config) pipelineEffectDefaults(at func(string) string, p *Pipeline) {
	c.effectDefaults(at("effect"), &p.Effect)
	for _, name := range slices.Sorted(mapKeys(p.Effects)) {
		e := p.Effects[name]
		c.effectDefaults(keyPath(at("effects"), name), &e)
		p.Effects[name] = e
	}
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

// An effect's secret-looking keys are refused with their reason: secrets are not read from the file.
func init() {
	refused[reflect.TypeFor[Effect]()] = map[string]string{
		"routing_key": "the routing key is a secret and is not read from the config file: use routing_key_env or routing_key_file",
		"token":       "a token is a secret and is not read from the config file: use token_env or token_file",
		"password":    "a password is a secret and is not read from the config file: use headers_env, or token_env for the jira preset",
	}
}
