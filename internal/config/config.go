package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"
)

// Config is the whole configuration of one consumer process. The YAML keys
// are the snake_case names in the field tags; every field's doc states its
// default. Load and Parse return a Config with the defaults filled in.
//
// A Config is a plain value: Validate and Explain only read it, and may be
// called concurrently; LoadEnv changes it.
type Config struct {
	// DataDir is the directory the embedded NATS server and the Badger
	// database (ledger and LLM cache) keep their data below. The default
	// is "./oncegate-data".
	DataDir string `yaml:"data_dir"`

	NATS      NATS       `yaml:"nats"`
	Ledger    Ledger     `yaml:"ledger"`
	LLM       LLM        `yaml:"llm"`
	Metrics   Metrics    `yaml:"metrics"`
	Log       Log        `yaml:"log"`
	Stream    Stream     `yaml:"stream"`
	Pipelines []Pipeline `yaml:"pipelines"`
	Ingress   Ingress    `yaml:"ingress"`
	Tracing   Tracing    `yaml:"tracing"`
	// Proxy configures the OpenAI-compatible proxy; see proxy.go. It is
	// off by default.
	Proxy   Proxy   `yaml:"proxy"`
	Admin   Admin   `yaml:"admin"`
	Console Console `yaml:"console"`
	// Encryption configures encryption at rest of the Badger stores; see
	// encryption.go. The default is none.
	Encryption Encryption `yaml:"encryption"`

	// meta records where each value came from: a line of the file, an
	// environment variable, or nowhere (a default). Nil for a Config built
	// in Go.
	meta *meta
}

// BadgerDir is the directory of the Badger database that holds the ledger
// (when Ledger.Store is StoreBadger) and the LLM cache: DataDir/badger.
func (c *Config) BadgerDir() string { return filepath.Join(c.DataDir, "badger") }

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

// RedeliveryHorizon is the longest that work on one trigger of p can keep
// being retried after its first delivery: over MaxDeliver deliveries, each
// waits the longest of its ack deadline (Pipeline.Horizon), its retry
// delay, and, when a ledger holds the work, the lease a crashed holder
// leaves behind. (It is the one formula of the horizon: Config.Validate and
// the consumer's stream checks use it.) Every window that dedupes a redo of the effect (the
// effect stream's duplicate window, the ledger's retention, the trigger
// stream's max age) must cover it.
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

const maxDuration = time.Duration(math.MaxInt64)

// addSat adds the non-negative part of d to h, saturating at maxDuration.
func addSat(h, d time.Duration) time.Duration {
	d = max(d, 0)
	if h > maxDuration-d {
		return maxDuration
	}
	return h + d
}

// Key scopes and hashes; see dedupe.KeySpec.PerRun and dedupe.KeySpec.SHA256.
const (
	ScopeInput = "input"
	ScopeRun   = "run"
	HashXXH    = "xxh"
	HashSHA256 = "sha256"
)

// Key is a pipeline's key spec; see dedupe.KeySpec.
type Key struct {
	// Fields are JSON Pointers to the values that identify the work. Empty
	// means the whole payload, less Volatile.
	Fields []string `yaml:"fields"`
	// Volatile are JSON Pointers to members dropped from the whole payload
	// (delivery ids, timestamps); only without Fields.
	Volatile []string `yaml:"volatile"`
	// Version is a JSON Pointer to a value that starts new work when it
	// changes (an alert's occurrence, an invoice revision).
	Version string `yaml:"version"`
	// Scope is ScopeInput (the default) or ScopeRun.
	Scope string `yaml:"scope"`
	// RunIDField is a JSON Pointer to the run id; required with ScopeRun,
	// not allowed otherwise.
	RunIDField string `yaml:"run_id_field"`
	// Hash is HashXXH (the default) or HashSHA256; choose sha256 when
	// payloads come from parties who might craft collisions.
	Hash string `yaml:"hash"`
	// Status is a JSON Pointer to the trigger's status ("firing",
	// "resolved"). The key the other fields give is the intent's identity,
	// which a firing and its resolve share (templates' .identity, the
	// pagerduty preset's default dedup_key). A trigger whose status is
	// "firing", or that has none, is keyed by its identity (the key it has
	// without key.status); any other status (a resolve) is keyed by the
	// identity and the status, so that a resolve is distinct work from its
	// firing rather than a duplicate of it.
	Status string `yaml:"status"`
	// ResolveWait orders the lifecycle of an identity with Status: a
	// resolve whose firing is still at work (its effects failing and
	// retried, its model step running) waits for the firing's outcome up
	// to this long after it reached the stream, then goes; a firing that
	// finds its resolve gone out is dropped, never sent after it. The
	// default is 1m.
	ResolveWait time.Duration `yaml:"resolve_wait"`
	// Headers are trigger headers whose values are part of the key, such
	// as Oncegate-Event, which the webhook ingress sets to the provider's
	// event type: the same payload under another event is other work. A
	// trigger without one of them is dead-lettered (missing_field).
	Headers []string `yaml:"headers"`
}

// Step is a pipeline's model call.
type Step struct {
	// Name names the step in keys and cache entries: lower-case letters,
	// digits and '-'. Required. Renaming a step changes its keys.
	Name string `yaml:"name"`
	// Model is the model to call. The default is LLM.Model.
	Model string `yaml:"model"`
	// System is the system message, a text/template like Prompt.
	System string `yaml:"system"`
	// Prompt is a text/template executed with the trigger's JSON decoded
	// into a map ({{.alert.labels.alertname}}), with the template functions
	// of docs/effects.md; a key the trigger lacks is an error. Required.
	Prompt string `yaml:"prompt"`
	// Temperature is the sampling temperature, 0 to 2. The default is 0.
	Temperature float64 `yaml:"temperature"`
	// MaxTokens caps the completion; 0 (the default) leaves it to the
	// model.
	MaxTokens int `yaml:"max_tokens"`
	// Seed, if set, is sent for reproducible sampling.
	Seed *int64 `yaml:"seed"`
	// BudgetTokens caps the tokens spent on one intent; 0 means no cap.
	// The default is LLM.Cache.BudgetTokens.
	BudgetTokens int64 `yaml:"budget_tokens"`
	// MaxBudget is the most the step's model calls may spend per
	// BudgetDuration, in US dollars at llm.prices, across every replica
	// with a shared cache; 0 (the default) means no limit. The model
	// needs a price, and a call's answer is reserved before it goes out:
	// MaxTokens, or else the price's max_output_tokens, one of which must
	// be set. See spend.go.
	MaxBudget float64 `yaml:"max_budget"`
	// BudgetDuration is the period of MaxBudget, such as "1d" or "30d";
	// 0 (the default) is one period that never ends.
	BudgetDuration Period `yaml:"budget_duration"`
	// OverBudget is what a trigger whose model call MaxBudget refuses
	// does: OverBudgetDeadLetter (the default: dead-lettered with reason
	// over_budget, to redrive once the budget allows) or OverBudgetWait
	// (put back until the period ends, for at most an hour at a time).
	OverBudget string `yaml:"over_budget"`
	// SkipWhen is a CEL condition (package cond) over the trigger, its
	// headers and status: when it holds the step is not run and nothing is
	// paid (a resolve: `status == "resolved"`). Templates then see an
	// empty answer.
	SkipWhen string `yaml:"skip_when"`
	// Schema, a JSON Schema (written in YAML or JSON), asks the model for
	// structured output (response_format json_schema, strict): the answer
	// must be JSON valid against it, and its fields are what templates
	// and routes read as .answer / answer. An answer that is not is asked
	// again, up to AnswerAttempts calls within the intent's token budget,
	// then dead-lettered (bad_answer). The schema is part of the cache key.
	Schema JSONValue `yaml:"schema"`
	// AnswerAttempts bounds the calls for one structured answer. The
	// default is 3.
	AnswerAttempts int `yaml:"answer_attempts"`
}

// JSONValue is a JSON document written in the configuration as YAML (or
// JSON, which is YAML), or given to an ONCEGATE_* variable as JSON text.
type JSONValue []byte

// UnmarshalText implements encoding.TextUnmarshaler, for environment
// variables: the text is JSON.
func (j *JSONValue) UnmarshalText(b []byte) error {
	if len(bytes.TrimSpace(b)) == 0 {
		*j = nil
		return nil
	}
	if !json.Valid(b) {
		return fmt.Errorf("not JSON")
	}
	*j = append(JSONValue(nil), b...)
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (j JSONValue) MarshalText() ([]byte, error) { return j, nil }

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

// Effect presets; see Effect.Preset.
const (
	PresetWebhook   = "webhook"
	PresetSlack     = "slack"
	PresetPagerDuty = "pagerduty"
	PresetJira      = "jira"
)

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

// DefaultApprovalTimeout is how long a one-shot effect waits for approval
// when Effect.ApprovalTimeout is not set.
const DefaultApprovalTimeout = 24 * time.Hour

// Window configures a pipeline's in-memory duplicate window.
type Window struct {
	// TTL is how long a key is remembered. The default is 10m.
	TTL time.Duration `yaml:"ttl"`
	// Capacity is how many keys fit. The default is 1000000.
	Capacity int `yaml:"capacity"`
}

// Load reads the configuration file at path and returns the effective
// configuration: the file, overridden by the ONCEGATE_* variables of the
// process environment (see Config.LoadEnv), with the defaults filled in,
// validated. An empty path means the built-in demo configuration (see
// Default).
//
// The error joins every problem found, each a *FieldError. If only
// validation failed, the Config is returned too, so that a checker can
// still explain it.
func Load(path string) (*Config, error) {
	if path == "" {
		return parseDefault(os.Environ())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseEnv(data, path, os.Environ())
}

// Parse decodes a configuration document, fills in the defaults and
// validates the result; name is the file name to report problems against.
// It does not consult the environment. Keys the Config does not have are
// errors (ErrUnknownKey) that name the key and its line.
//
// Like Load, Parse returns the Config along with the error when only
// validation failed.
func Parse(data []byte, name string) (*Config, error) {
	return ParseEnv(data, name, nil)
}

// ParseEnv is Parse with the overrides of environ (in the form of
// os.Environ) applied, as Load applies the process environment's.
func ParseEnv(data []byte, name string, environ []string) (*Config, error) {
	c, issues := decode(data, name)
	if issues != nil {
		return nil, c.fieldErrors(issues)
	}
	return c.finish(environ)
}

// finish applies environ and the defaults to a decoded c and validates it.
func (c *Config) finish(environ []string) (*Config, error) {
	if err := c.LoadEnv(environ); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// Metrics configures the Prometheus endpoint.
type Metrics struct {
	// Listen is the address of the metrics, health and readiness
	// endpoints. The default is "127.0.0.1:9464"; an explicit empty
	// string ("") disables them.
	Listen string `yaml:"listen"`
}

// Log formats and levels.
const (
	LogText = "text"
	LogJSON = "json"
)

// Log configures the structured log.
type Log struct {
	// Format is LogText (the default) or LogJSON.
	Format string `yaml:"format"`
	// Level is debug, info (the default), warn or error.
	Level string `yaml:"level"`
	// Outcomes adds an INFO line per trigger's outcome, and per one-shot
	// effect's, for people who read logs: msg=outcome with its pipeline,
	// key, route, effect and result (done, the target had it, no effect,
	// dead and the reason). Off by default: the metrics count them.
	Outcomes bool `yaml:"outcomes"`
}

// Defaults of the top-level settings.
const (
	DefaultDataDir       = "./oncegate-data"
	DefaultMetricsListen = "127.0.0.1:9464"
)

func (v *validator) top() {
	if v.c.DataDir == "" {
		v.add("data_dir", missing("a directory is required"))
	}
	if l := v.c.Metrics.Listen; l != "" {
		if err := checkListen(l, false); err != nil {
			v.add("metrics.listen", err)
		}
	}
	v.oneOf("log.format", v.c.Log.Format, LogText, LogJSON)
	v.oneOf("log.level", v.c.Log.Level, "debug", "info", "warn", "error")
}

// metrics explains the metrics section.
func (x *explainer) metrics() {
	c := x.c
	metrics := "disabled"
	if c.Metrics.Listen != "" {
		metrics = "http://" + c.Metrics.Listen + "/metrics, health and readiness endpoints"
	}
	x.row("metrics", x.d("metrics.listen", c.Metrics.Listen, metrics))
}

// log explains the log section.
func (x *explainer) log() {
	c := x.c
	x.row("log", x.d("log.format", c.Log.Format, c.Log.Format)+", level "+x.d("log.level", c.Log.Level, c.Log.Level))
}
