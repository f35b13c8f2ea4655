package config

import (
	"strings"
	"testing"
	"time"
)

// TestValidateRules has a failing case for every rule Validate enforces.
// Each starts from Default() (pipelines alerts, a full pipeline, and
// webhooks, a gate-ledger one) and breaks one thing.
func TestValidateRules(t *testing.T) {
	alerts := func(c *Config) *Pipeline { return &c.Pipelines[0] }
	webhooks := func(c *Config) *Pipeline { return &c.Pipelines[1] }
	remote := func(c *Config) { c.NATS.URL = "nats://nats.internal:4222" }
	tests := []struct {
		name    string
		mutate  func(c *Config)
		path    string
		kind    error
		message string // a substring of the message, if set
	}{
		// Process-wide settings.
		{"data_dir empty", func(c *Config) { c.DataDir = "" }, "data_dir", ErrMissing, ""},
		{"metrics listen not host:port", func(c *Config) { c.Metrics.Listen = "9464" }, "metrics.listen", ErrInvalid, "host:port"},
		{"metrics listen port out of range", func(c *Config) { c.Metrics.Listen = ":70000" }, "metrics.listen", ErrInvalid, "port"},
		{"log format unknown", func(c *Config) { c.Log.Format = "xml" }, "log.format", ErrInvalid, "text, json"},
		{"log level empty", func(c *Config) { c.Log.Level = "" }, "log.level", ErrMissing, ""},

		// NATS.
		{"connect timeout zero", func(c *Config) { c.NATS.ConnectTimeout = 0 }, "nats.connect_timeout", ErrInvalid, "positive"},
		{"embedded listen not loopback", func(c *Config) { c.NATS.Embedded.Listen = "0.0.0.0:4222" }, "nats.embedded.listen", ErrInvalid, "loopback"},
		{"embedded listen empty", func(c *Config) { c.NATS.Embedded.Listen = "" }, "nats.embedded.listen", ErrMissing, ""},
		{"embedded store dir empty", func(c *Config) { c.NATS.Embedded.StoreDir = "" }, "nats.embedded.store_dir", ErrMissing, ""},
		{"sync interval zero", func(c *Config) { c.NATS.Embedded.SyncInterval = 0 }, "nats.embedded.sync_interval", ErrInvalid, "always"},
		{"credentials with the embedded server", func(c *Config) { c.NATS.CredsFile = "/x.creds" }, "nats.creds_file", ErrInvalid, "nats.url"},
		{"url scheme", func(c *Config) { c.NATS.URL = "http://h:4222" }, "nats.url", ErrInvalid, "scheme"},
		{"url with password", func(c *Config) { c.NATS.URL = "nats://u:hunter2@h:4222" }, "nats.url", ErrInvalid, "credentials"},
		{"url with token", func(c *Config) { c.NATS.URL = "nats://s3cr3t@h:4222" }, "nats.url", ErrInvalid, "credentials"},
		{"url bad port", func(c *Config) { c.NATS.URL = "nats://a:4222,nats://b:99999" }, "nats.url", ErrInvalid, "port"},
		{"url without host", func(c *Config) { c.NATS.URL = "nats://" }, "nats.url", ErrInvalid, "host"},
		{"creds and nkey", func(c *Config) { remote(c); c.NATS.CredsFile, c.NATS.NKeySeedFile = "a", "b" }, "nats.nkey_seed_file", ErrInvalid, "not both"},
		{"token and user", func(c *Config) { remote(c); c.NATS.TokenFile, c.NATS.User = "t", "u" }, "nats.token_file", ErrInvalid, ""},
		{"password file without user", func(c *Config) { remote(c); c.NATS.PasswordFile = "p" }, "nats.user", ErrMissing, ""},
		{"cert without key", func(c *Config) { remote(c); c.NATS.TLS.CertFile = "c.pem" }, "nats.tls.key_file", ErrMissing, ""},
		{"key without cert", func(c *Config) { remote(c); c.NATS.TLS.KeyFile = "k.pem" }, "nats.tls.cert_file", ErrMissing, ""},

		// Ledger.
		{"store unknown", func(c *Config) { c.Ledger.Store = "redis" }, "ledger.store", ErrInvalid, "badger, kv"},
		{"retention zero", func(c *Config) { c.Ledger.Retention = 0 }, "ledger.retention", ErrInvalid, "positive"},
		{"lease negative", func(c *Config) { c.Ledger.Lease = -time.Second }, "ledger.lease", ErrInvalid, "positive"},
		{"lease not shorter than retention", func(c *Config) { c.Ledger.Lease = 200 * time.Hour }, "ledger.lease", ErrInvalid, "shorter"},
		{"mismatch unknown", func(c *Config) { c.Ledger.Mismatch = "warn" }, "ledger.mismatch", ErrInvalid, ""},
		{"replicas zero", func(c *Config) { c.Ledger.KV.Replicas = 0 }, "ledger.kv.replicas", ErrInvalid, "1 to 5"},
		{"replicas six", func(c *Config) { remote(c); c.Ledger.Store = StoreKV; c.Ledger.KV.Replicas = 6 }, "ledger.kv.replicas", ErrInvalid, "1 to 5"},
		{"replicas with the embedded server", func(c *Config) { c.Ledger.Store = StoreKV; c.Ledger.KV.Replicas = 3 }, "ledger.kv.replicas", ErrInvalid, "single node"},
		{"bucket name", func(c *Config) { c.Ledger.Store = StoreKV; c.Ledger.KV.Bucket = "my.bucket" }, "ledger.kv.bucket", ErrInvalid, ""},

		// LLM.
		{"base url scheme", func(c *Config) { c.LLM.BaseURL = "ftp://models" }, "llm.base_url", ErrInvalid, "http, https"},
		{"base url without scheme", func(c *Config) { c.LLM.BaseURL = "api.example/v1" }, "llm.base_url", ErrInvalid, "scheme"},
		{"base url with credentials", func(c *Config) { c.LLM.BaseURL = "https://k:sk-123@api.example/v1" }, "llm.base_url", ErrInvalid, "credentials"},
		{"api key env not a name", func(c *Config) { c.LLM.APIKeyEnv = "sk-123" }, "llm.api_key_env", ErrInvalid, "environment variable"},
		{"api key env in the override namespace", func(c *Config) { c.LLM.APIKeyEnv = "ONCEGATE_KEY" }, "llm.api_key_env", ErrInvalid, "ONCEGATE_"},
		{"model empty", func(c *Config) { c.LLM.Model = "" }, "llm.model", ErrMissing, ""},
		{"timeout zero", func(c *Config) { c.LLM.Timeout = 0 }, "llm.timeout", ErrInvalid, ""},
		{"cache ttl zero", func(c *Config) { c.LLM.Cache.TTL = 0 }, "llm.cache.ttl", ErrInvalid, ""},
		{"cache entry size zero", func(c *Config) { c.LLM.Cache.MaxEntryBytes = 0 }, "llm.cache.max_entry_bytes", ErrInvalid, ""},
		{"cache budget negative", func(c *Config) { c.LLM.Cache.BudgetTokens = -1 }, "llm.cache.budget_tokens", ErrInvalid, ""},
		{"price negative", func(c *Config) { c.LLM.Prices = map[string]Price{"m": {PromptPerMTok: -1}} }, "llm.prices[m].prompt_per_mtok", ErrInvalid, ""},
		{"price without model", func(c *Config) { c.LLM.Prices = map[string]Price{"": {}} }, "llm.prices[]", ErrInvalid, ""},

		// Stream.
		{"stream name with a dot", func(c *Config) { c.Stream.Name = "ONCE.GATE" }, "stream.name", ErrInvalid, ""},
		{"stream name empty", func(c *Config) { c.Stream.Name = "" }, "stream.name", ErrMissing, ""},
		{"no stream subjects", func(c *Config) { c.Stream.Subjects = nil }, "stream.subjects", ErrMissing, ""},
		{"stream subject invalid", func(c *Config) { c.Stream.Subjects = []string{"triggers.>", "a..b"} }, "stream.subjects[1]", ErrInvalid, "empty token"},
		{"stream subject '>' not last", func(c *Config) { c.Stream.Subjects = []string{"triggers.>.x"} }, "stream.subjects[0]", ErrInvalid, "last"},
		{"stream subjects overlap", func(c *Config) { c.Stream.Subjects = []string{"triggers.>", "*.alerts"} }, "stream.subjects[1]", ErrInvalid, "overlap"},
		{"duplicates zero", func(c *Config) { c.Stream.Duplicates = 0 }, "stream.duplicates", ErrInvalid, ""},
		{"retention unknown", func(c *Config) { c.Stream.Retention = "interest" }, "stream.retention", ErrInvalid, "workqueue"},
		{"limits without max_age", func(c *Config) { c.Stream.Retention, c.Stream.MaxAge = RetentionLimits, 0 }, "stream.max_age", ErrMissing, "for ever"},
		{"work queue with pipelines sharing a subject", func(c *Config) {
			c.Stream.Retention, c.Stream.MaxAge = RetentionWorkQueue, 0
			c.Pipelines[1].Subject = "triggers.*"
		}, "pipelines[webhooks].subject", ErrInvalid, "work-queue"},
		{"max_age inside the horizon", func(c *Config) {
			c.Stream.MaxAge, c.Stream.Duplicates = 2*time.Minute, time.Minute
			c.Pipelines[0].MaxDeliver = 5
		}, "stream.max_age", ErrInvalid, "lost without a dead letter"},
		{"duplicate window inside the horizon", func(c *Config) {
			c.Stream.Duplicates = 2 * time.Minute
			c.Pipelines[0].AckWait, c.Pipelines[0].Backoff = 30*time.Second, []time.Duration{30 * time.Second, time.Minute, 5 * time.Minute}
		}, "pipelines[alerts].max_deliver", ErrInvalid, "second effect"},
		{"max age negative", func(c *Config) { c.Stream.MaxAge = -1 }, "stream.max_age", ErrInvalid, ""},
		{"duplicates longer than max age", func(c *Config) { c.Stream.MaxAge = time.Minute }, "stream.duplicates", ErrInvalid, "max_age"},
		{"dead letter empty", func(c *Config) { c.Stream.DeadLetterSubject = "" }, "stream.dead_letter_subject", ErrMissing, "never dropped"},
		{"dead letter placeholder", func(c *Config) { c.Stream.DeadLetterSubject = "dead.{name}" }, "stream.dead_letter_subject", ErrInvalid, "{pipeline}"},
		{"dead letter wildcard", func(c *Config) { c.Stream.DeadLetterSubject = "dead.*" }, "stream.dead_letter_subject", ErrInvalid, "literal"},
		{"dead letters consumed", func(c *Config) { c.Stream.DeadLetterSubject = "triggers.{pipeline}" }, "stream.dead_letter_subject", ErrInvalid, "come back"},

		// Pipelines.
		{"no pipelines", func(c *Config) { c.Pipelines = nil }, "pipelines", ErrMissing, ""},
		{"name empty", func(c *Config) { alerts(c).Name = "" }, "pipelines[0].name", ErrMissing, ""},
		{"name upper case", func(c *Config) { alerts(c).Name = "Alerts" }, "pipelines[Alerts].name", ErrInvalid, "lower-case"},
		{"name twice", func(c *Config) { webhooks(c).Name = "alerts" }, "pipelines[alerts].name", ErrInvalid, "twice"},
		{"subject empty", func(c *Config) { alerts(c).Subject = "" }, "pipelines[alerts].subject", ErrMissing, ""},
		{"subject invalid", func(c *Config) { alerts(c).Subject = "triggers. alerts" }, "pipelines[alerts].subject", ErrInvalid, ""},
		{"subject not covered", func(c *Config) { alerts(c).Subject = "alerts.>" }, "pipelines[alerts].subject", ErrInvalid, "never see"},
		{"subject wider than the stream", func(c *Config) { alerts(c).Subject = ">" }, "pipelines[alerts].subject", ErrInvalid, "not covered"},
		{"mode unknown", func(c *Config) { alerts(c).Mode = "gate" }, "pipelines[alerts].mode", ErrInvalid, ""},
		{"full without step", func(c *Config) { webhooks(c).Mode = ModeFull }, "pipelines[webhooks].step", ErrMissing, ""},
		{"gate-ledger with step", func(c *Config) { alerts(c).Mode = ModeGateLedger }, "pipelines[alerts].step", ErrInvalid, "no step"},
		{"gate-window with step", func(c *Config) { alerts(c).Mode = ModeGateWindow }, "pipelines[alerts].step", ErrInvalid, "no step"},
		{"gate-window with http", func(c *Config) {
			p := webhooks(c)
			p.Mode, p.Effect = ModeGateWindow, Effect{Sink: SinkHTTP, URL: "https://h/x", Class: ClassReplayable}
		}, "pipelines[webhooks].effect.sink", ErrInvalid, "jetstream"},
		{"gate-window one-shot", func(c *Config) { p := webhooks(c); p.Mode, p.Effect.Class = ModeGateWindow, ClassOneShot }, "pipelines[webhooks].effect.class", ErrInvalid, "replayable"},

		// Keys.
		{"key field not a pointer", func(c *Config) { alerts(c).Key.Fields = []string{"alert.fingerprint"} }, "pipelines[alerts].key.fields[0]", ErrInvalid, "JSON Pointer"},
		{"volatile not a pointer", func(c *Config) { webhooks(c).Key.Volatile = []string{"/ok", "~bad"} }, "pipelines[webhooks].key.volatile[1]", ErrInvalid, "JSON Pointer"},
		{"fields and volatile", func(c *Config) { alerts(c).Key.Volatile = []string{"/sent_at"} }, "pipelines[alerts].key.volatile", ErrInvalid, "not both"},
		{"version not a pointer", func(c *Config) { alerts(c).Key.Version = "occurrence" }, "pipelines[alerts].key.version", ErrInvalid, ""},
		{"scope unknown", func(c *Config) { alerts(c).Key.Scope = "tenant" }, "pipelines[alerts].key.scope", ErrInvalid, ""},
		{"run scope without run id", func(c *Config) { alerts(c).Key.Scope = ScopeRun }, "pipelines[alerts].key.run_id_field", ErrMissing, ""},
		{"run id not a pointer", func(c *Config) { k := &alerts(c).Key; k.Scope, k.RunIDField = ScopeRun, "run" }, "pipelines[alerts].key.run_id_field", ErrInvalid, ""},
		{"run id with input scope", func(c *Config) { alerts(c).Key.RunIDField = "/run" }, "pipelines[alerts].key.run_id_field", ErrInvalid, "scope run"},
		{"hash unknown", func(c *Config) { alerts(c).Key.Hash = "md5" }, "pipelines[alerts].key.hash", ErrInvalid, ""},
		{"key header named twice", func(c *Config) { webhooks(c).Key.Headers = []string{"X-Tenant", "x-tenant"} }, "pipelines[webhooks].key", ErrInvalid, "named twice"},

		// Steps.
		{"step name empty", func(c *Config) { alerts(c).Step.Name = "" }, "pipelines[alerts].step.name", ErrMissing, ""},
		{"step model empty", func(c *Config) { alerts(c).Step.Model = "" }, "pipelines[alerts].step.model", ErrMissing, ""},
		{"prompt empty", func(c *Config) { alerts(c).Step.Prompt = "" }, "pipelines[alerts].step.prompt", ErrMissing, ""},
		{"prompt template broken", func(c *Config) { alerts(c).Step.Prompt = "Alert {{.alert.labels" }, "pipelines[alerts].step.prompt", ErrInvalid, "template"},
		{"secret static header", func(c *Config) {
			alerts(c).Effect = Effect{Sink: SinkHTTP, URL: "https://hooks.example/a", Headers: map[string]string{"Authorization": "Bearer x"}, Class: ClassReplayable}
		}, "pipelines[alerts].effect.headers[Authorization]", ErrInvalid, "headers_env"},
		{"route condition does not compile", func(c *Config) {
			p := alerts(c)
			p.Effects = map[string]Effect{"slack": {Preset: PresetSlack, Sink: SinkHTTP, URLEnv: "SLACK_URL", Class: ClassOneShot}}
			p.Effect = Effect{}
			p.Routes = []Route{{Name: "all", When: "answer.severity ==", Effects: []string{"slack"}}}
		}, "pipelines[alerts].routes[0].when", ErrInvalid, "at 1:"},
		{"route names an unknown effect", func(c *Config) {
			p := alerts(c)
			p.Effects = map[string]Effect{"slack": {Preset: PresetSlack, Sink: SinkHTTP, URLEnv: "SLACK_URL", Class: ClassOneShot}}
			p.Effect = Effect{}
			p.Routes = []Route{{Name: "all", Effects: []string{"pager"}}}
		}, "pipelines[alerts].routes[0].effects[0]", ErrInvalid, `"pager" is not one of`},
		{"filter reads the answer", func(c *Config) { alerts(c).When = `answer == "x"` }, "pipelines[alerts].when", ErrInvalid, "reads the answer"},
		{"pagerduty without a routing key", func(c *Config) {
			alerts(c).Effect = Effect{Preset: PresetPagerDuty, Sink: SinkHTTP, URL: PagerDutyURL, Class: ClassReplayable}
		}, "pipelines[alerts].effect.routing_key_env", ErrMissing, "routing_key_file"},
		{"preset field of another preset", func(c *Config) {
			alerts(c).Effect = Effect{Preset: PresetSlack, Sink: SinkHTTP, URLEnv: "SLACK_URL", Class: ClassOneShot, DedupKey: "x"}
		}, "pipelines[alerts].effect.dedup_key", ErrInvalid, "preset slack has no field dedup_key"},
		{"schema not an object", func(c *Config) { alerts(c).Step.Schema = JSONValue(`{"type":"string"}`) }, "pipelines[alerts].step.schema", ErrInvalid, "object"},
		{"body template does not parse", func(c *Config) { alerts(c).Effect.Body = "{{.key" }, "pipelines[alerts].effect.body", ErrInvalid, "unclosed action"},
		{"system template unknown function", func(c *Config) { alerts(c).Step.System = "{{nosuch .x}}" }, "pipelines[alerts].step.system", ErrInvalid, "nosuch"},
		{"temperature too high", func(c *Config) { alerts(c).Step.Temperature = 2.5 }, "pipelines[alerts].step.temperature", ErrInvalid, "0 to 2"},
		{"max tokens negative", func(c *Config) { alerts(c).Step.MaxTokens = -1 }, "pipelines[alerts].step.max_tokens", ErrInvalid, ""},
		{"step budget negative", func(c *Config) { alerts(c).Step.BudgetTokens = -5 }, "pipelines[alerts].step.budget_tokens", ErrInvalid, ""},

		// Effects.
		{"sink missing", func(c *Config) { alerts(c).Effect.Sink = "" }, "pipelines[alerts].effect.sink", ErrMissing, ""},
		{"sink unknown", func(c *Config) { alerts(c).Effect.Sink = "kafka" }, "pipelines[alerts].effect.sink", ErrInvalid, ""},
		{"http without url", func(c *Config) { alerts(c).Effect.Sink = SinkHTTP }, "pipelines[alerts].effect.url", ErrMissing, "required for sink http"},
		{"http with a subject", func(c *Config) { alerts(c).Effect.Sink = SinkHTTP }, "pipelines[alerts].effect.subject", ErrInvalid, "only used with sink jetstream"},
		{"http url scheme", func(c *Config) { e := &alerts(c).Effect; e.Sink, e.Subject, e.URL = SinkHTTP, "", "mailto:x@y" }, "pipelines[alerts].effect.url", ErrInvalid, ""},
		{"http header name", func(c *Config) {
			e := &alerts(c).Effect
			e.Sink, e.Subject, e.URL, e.HeadersEnv = SinkHTTP, "", "https://h/x", map[string]string{"Bad Header": "X"}
		}, "pipelines[alerts].effect.headers_env[Bad Header]", ErrInvalid, "header name"},
		{"http reserved header", func(c *Config) {
			e := &alerts(c).Effect
			e.Sink, e.Subject, e.URL, e.HeadersEnv = SinkHTTP, "", "https://h/x", map[string]string{"idempotency-key": "X"}
		}, "pipelines[alerts].effect.headers_env[idempotency-key]", ErrInvalid, "itself"},
		{"http header env not a name", func(c *Config) {
			e := &alerts(c).Effect
			e.Sink, e.Subject, e.URL, e.HeadersEnv = SinkHTTP, "", "https://h/x", map[string]string{"Authorization": "Bearer abc"}
		}, "pipelines[alerts].effect.headers_env[Authorization]", ErrInvalid, "environment variable"},
		{"headers for jetstream", func(c *Config) { alerts(c).Effect.HeadersEnv = map[string]string{"A": "B"} }, "pipelines[alerts].effect.headers_env", ErrInvalid, "sink http"},
		{"url for jetstream", func(c *Config) { alerts(c).Effect.URL = "https://h" }, "pipelines[alerts].effect.url", ErrInvalid, "sink http"},
		{"dir for jetstream", func(c *Config) { alerts(c).Effect.Dir = "/tmp" }, "pipelines[alerts].effect.dir", ErrInvalid, "sink file"},
		{"file without dir", func(c *Config) { e := &alerts(c).Effect; e.Sink, e.Subject = SinkFile, "" }, "pipelines[alerts].effect.dir", ErrMissing, ""},
		{"jetstream without subject", func(c *Config) { alerts(c).Effect.Subject = "" }, "pipelines[alerts].effect.subject", ErrMissing, ""},
		{"jetstream subject wildcard", func(c *Config) { alerts(c).Effect.Subject = "effects.*" }, "pipelines[alerts].effect.subject", ErrInvalid, "literal"},
		{"effect feeds its own pipeline", func(c *Config) { alerts(c).Effect.Subject = "triggers.alerts" }, "pipelines[alerts].effect.subject", ErrInvalid, "trigger it again"},
		{"class unknown", func(c *Config) { alerts(c).Effect.Class = "idempotent" }, "pipelines[alerts].effect.class", ErrInvalid, ""},
		{"delay negative", func(c *Config) { e := &alerts(c).Effect; e.Class, e.Delay = ClassOneShot, -time.Second }, "pipelines[alerts].effect.delay", ErrInvalid, ""},
		{"delay for replayable", func(c *Config) { alerts(c).Effect.Delay = time.Minute }, "pipelines[alerts].effect.delay", ErrInvalid, "one-shot"},
		{"approval for replayable", func(c *Config) { alerts(c).Effect.ApprovalSubject = "approve.x" }, "pipelines[alerts].effect.approval_subject", ErrInvalid, "one-shot"},
		{"approval subject wildcard", func(c *Config) { e := &alerts(c).Effect; e.Class, e.ApprovalSubject = ClassOneShot, "approve.>" }, "pipelines[alerts].effect.approval_subject", ErrInvalid, ""},

		// Window and acks.
		{"window ttl zero", func(c *Config) { alerts(c).Window.TTL = 0 }, "pipelines[alerts].window.ttl", ErrInvalid, ""},
		{"window capacity zero", func(c *Config) { alerts(c).Window.Capacity = 0 }, "pipelines[alerts].window.capacity", ErrInvalid, ""},
		{"ack wait zero", func(c *Config) { alerts(c).AckWait = 0 }, "pipelines[alerts].ack_wait", ErrInvalid, "positive"},
		{"max deliver unlimited", func(c *Config) { alerts(c).MaxDeliver = -1 }, "pipelines[alerts].max_deliver", ErrInvalid, "dead-letter"},
		{"backoff zero", func(c *Config) { p := alerts(c); p.Backoff, p.AckWait = []time.Duration{time.Second, 0}, time.Second }, "pipelines[alerts].backoff[1]", ErrInvalid, ""},
		{"backoff longer than max deliver", func(c *Config) {
			p := alerts(c)
			p.MaxDeliver, p.AckWait, p.Backoff = 2, time.Second, []time.Duration{time.Second, time.Second, time.Second}
		}, "pipelines[alerts].backoff", ErrInvalid, "at most max_deliver"},
		{"ack wait differs from first backoff", func(c *Config) { alerts(c).Backoff = []time.Duration{time.Second} }, "pipelines[alerts].ack_wait", ErrInvalid, "first backoff"},
		{"max ack pending zero", func(c *Config) { alerts(c).MaxAckPending = 0 }, "pipelines[alerts].max_ack_pending", ErrInvalid, ""},
		{"concurrency zero", func(c *Config) { alerts(c).Concurrency = 0 }, "pipelines[alerts].concurrency", ErrInvalid, ""},
		{"concurrency above max ack pending", func(c *Config) { alerts(c).MaxAckPending = 10 }, "pipelines[alerts].concurrency", ErrInvalid, "never get"},

		// The lifecycle and the effects' retry, rate limit and digest.
		{"resolve wait negative", func(c *Config) { alerts(c).Key.ResolveWait = -time.Second }, "pipelines[alerts].key.resolve_wait", ErrInvalid, "positive"},
		{"resolve wait without status", func(c *Config) { webhooks(c).Key.ResolveWait = time.Second }, "pipelines[webhooks].key.resolve_wait", ErrInvalid, "key.status"},
		{"retry backoff over max", func(c *Config) {
			e := &alerts(c).Effect
			e.Retry.Backoff, e.Retry.MaxBackoff = 10*time.Second, time.Second
		}, "pipelines[alerts].effect.retry.backoff", ErrInvalid, "max_backoff"},
		{"rate limit negative", func(c *Config) { alerts(c).Effect.RateLimit.Requests = -1 }, "pipelines[alerts].effect.rate_limit.requests", ErrInvalid, "positive"},
		{"rate limit off http", func(c *Config) { alerts(c).Effect.RateLimit.Requests = 10 }, "pipelines[alerts].effect.rate_limit", ErrInvalid, "http"},
		{"digest off slack", func(c *Config) { alerts(c).Effect.Digest.Window = time.Second }, "pipelines[alerts].effect.digest", ErrInvalid, "slack"},
		{"digest group without window", func(c *Config) { alerts(c).Effect.Digest.Group = "{{.pipeline}}" }, "pipelines[alerts].effect.digest.group", ErrInvalid, "window"},

		// The redelivery horizon.
		{"retention within the ack horizon", func(c *Config) {
			p := webhooks(c)
			p.AckWait, p.MaxDeliver = 2*time.Hour, 100 // 200h > 168h
		}, "ledger.retention", ErrInvalid, `pipeline "webhooks" (100 deliveries × ack_wait 2h)`},
		{"retention within the backoff horizon", func(c *Config) {
			c.Stream.Retention, c.Stream.MaxAge = RetentionWorkQueue, 0
			c.Ledger.Retention = time.Hour
			p := alerts(c)
			p.AckWait, p.MaxDeliver, p.Backoff = time.Minute, 10, []time.Duration{time.Minute, 10 * time.Minute} // 1m + 9×10m
		}, "ledger.retention", ErrInvalid, "horizon 1h31m"},
		{"retention equal to the horizon", func(c *Config) { c.Ledger.Retention = 150 * time.Second }, "ledger.retention", ErrInvalid, "does not exceed"},
		{"retention within the stream max age", func(c *Config) { c.Stream.MaxAge = 30 * 24 * time.Hour }, "ledger.retention", ErrInvalid, "max_age"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mutate(c)
			err := c.Validate()
			fe := findError(t, err, tt.path, tt.kind)
			if !strings.Contains(fe.Error(), tt.message) {
				t.Errorf("error %q does not contain %q", fe.Error(), tt.message)
			}
		})
	}
}

// TestValidateHorizonPasses checks the horizon rule's other side: a
// retention just above the horizon, and gate-window pipelines (no ledger),
// pass.
func TestValidateHorizonPasses(t *testing.T) {
	c := Default()
	c.Stream.Retention, c.Stream.MaxAge = RetentionWorkQueue, 0 // no max age for the retention to exceed
	c.Ledger.Retention = 151 * time.Second                      // horizons are 5 × 30s
	if err := c.Validate(); err != nil {
		t.Errorf("retention 151s, horizon 150s: Validate() = %v; want nil", err)
	}
	c = Default()
	c.Stream.Retention, c.Stream.MaxAge = RetentionWorkQueue, 0
	c.Pipelines = c.Pipelines[1:]
	p := &c.Pipelines[0]
	p.Mode, p.AckWait, p.MaxDeliver = ModeGateWindow, time.Hour, 1000
	c.Stream.Duplicates = 1001 * time.Hour // its publishes still need the duplicate window
	if err := c.Validate(); err != nil {
		t.Errorf("gate-window pipeline with a long horizon: Validate() = %v; want nil", err)
	}
}

// TestValidateLines checks that validation errors point at the line of the
// offending value, or of its enclosing key when the value is missing.
func TestValidateLines(t *testing.T) {
	doc := `ledger:
  retention: 1h
pipelines:
  - name: alerts
    subject: triggers.alerts
    effect:
      sink: http
    ack_wait: 0s
    max_deliver: 200
`
	_, err := Parse([]byte(doc), "lines.yaml")
	tests := []struct {
		path string
		line int
		kind error
	}{
		{"pipelines[alerts].effect.url", 6, ErrMissing}, // missing: the line of "effect:"
		{"pipelines[alerts].ack_wait", 8, ErrInvalid},
	}
	for _, tt := range tests {
		fe := findError(t, err, tt.path, tt.kind)
		if fe.Line != tt.line || fe.File != "lines.yaml" {
			t.Errorf("error %v at %s:%d; want lines.yaml:%d", fe, fe.File, fe.Line, tt.line)
		}
	}
	if want := "lines.yaml:6: pipelines[alerts].effect.url: required for sink http"; !strings.Contains(err.Error(), want) {
		t.Errorf("Parse error =\n%v\nwant a line %q", err, want)
	}
	// All problems are reported at once.
	if n := len(fieldErrors(t, err)); n != 2 {
		t.Errorf("Parse reported %d problems; want 2 (ack_wait 0 makes the horizon 0):\n%v", n, err)
	}
}

// TestValidateAccepts checks valid variations, so that the rules above do
// not reject more than they mean to.
func TestValidateAccepts(t *testing.T) {
	alerts := func(c *Config) *Pipeline { return &c.Pipelines[0] }
	tests := []struct {
		name   string
		mutate func(c *Config)
	}{
		{"schemeless NATS URLs", func(c *Config) { c.NATS.URL = "a:4222, tls://b:4443" }},
		{"remote with user and password file", func(c *Config) {
			c.NATS.URL, c.NATS.User, c.NATS.PasswordFile = "nats://h", "u", "/p"
			c.NATS.TLS = TLS{CAFile: "ca", CertFile: "c", KeyFile: "k"}
		}},
		{"IPv6 loopback listener", func(c *Config) { c.NATS.Embedded.Listen = "[::1]:4222" }},
		{"localhost listener", func(c *Config) { c.NATS.Embedded.Listen = "localhost:0" }},
		{"fsync always", func(c *Config) { c.NATS.Embedded.SyncInterval = SyncAlways }},
		{"replicated KV ledger", func(c *Config) { c.NATS.URL = "nats://h"; c.Ledger.Store, c.Ledger.KV.Replicas = StoreKV, 3 }},
		{"metrics disabled", func(c *Config) { c.Metrics.Listen = "" }},
		{"no prices", func(c *Config) { c.LLM.Prices = nil }},
		{"no API key", func(c *Config) { c.LLM.APIKeyEnv = "" }},
		{"real endpoint", func(c *Config) { c.LLM.BaseURL = "http://localhost:11434/v1" }},
		{"stream max age", func(c *Config) { c.Stream.MaxAge = 24 * time.Hour }},
		{"two stream subjects", func(c *Config) { c.Stream.Subjects = []string{"triggers.>", "hooks.*"} }},
		{"http effect", func(c *Config) {
			e := &alerts(c).Effect
			e.Sink, e.Subject, e.URL, e.HeadersEnv = SinkHTTP, "", "https://h/x?q=1", map[string]string{"Authorization": "H_AUTH"}
		}},
		{"file effect", func(c *Config) { e := &alerts(c).Effect; e.Sink, e.Subject, e.Dir = SinkFile, "", "/var/lib/x" }},
		{"one-shot with delay and approval", func(c *Config) {
			e := &alerts(c).Effect
			e.Class, e.Delay, e.ApprovalSubject = ClassOneShot, 5*time.Minute, "approvals.alerts"
		}},
		{"run scope", func(c *Config) { k := &alerts(c).Key; k.Scope, k.RunIDField, k.Hash = ScopeRun, "/run/id", HashSHA256 }},
		{"backoff", func(c *Config) {
			p := alerts(c)
			p.Backoff, p.AckWait = []time.Duration{5 * time.Second, time.Minute}, 5*time.Second
		}},
		{"backoff as long as max deliver", func(c *Config) {
			p := alerts(c)
			p.MaxDeliver, p.AckWait, p.Backoff = 2, time.Second, []time.Duration{time.Second, time.Minute}
		}},
		{"gate-window", func(c *Config) { c.Pipelines[1].Mode = ModeGateWindow }},
		{"template with json", func(c *Config) { alerts(c).Step.Prompt = "{{json .alert.labels}}" }},
		{"dead letters outside the stream", func(c *Config) { c.Stream.DeadLetterSubject = "dlq.oncegate.{pipeline}" }},
	}
	for _, tt := range tests {
		c := Default()
		tt.mutate(c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v; want nil", tt.name, err)
		}
	}
}
