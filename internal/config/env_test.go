package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

const envDoc = `pipelines:
  - name: alerts
    subject: triggers.alerts
    key: {fields: [/alert/fingerprint]}
    step: {name: triage, prompt: "{{.alert}}"}
    effect: {sink: jetstream, subject: effects.alerts}
  - name: my-hooks
    subject: triggers.hooks
    effect:
      sink: http
      url: https://hooks.example/in
      headers_env: {Authorization: HOOKS_AUTH}
`

func TestEnvOverrides(t *testing.T) {
	tests := []struct {
		name  string
		env   []string
		check func(c *Config) error
	}{
		{"scalar string", []string{"ONCEGATE_NATS_URL=nats://nats.internal:4222"}, func(c *Config) error {
			return want(c.NATS.URL, "nats://nats.internal:4222")
		}},
		{"enum", []string{"ONCEGATE_LEDGER_STORE=kv"}, func(c *Config) error { return want(c.Ledger.Store, StoreKV) }},
		{"duration", []string{"ONCEGATE_LLM_CACHE_TTL=90m"}, func(c *Config) error { return want(c.LLM.Cache.TTL, 90*time.Minute) }},
		{"int with underscores", []string{"ONCEGATE_PIPELINES_ALERTS_WINDOW_CAPACITY=2_000_000"}, func(c *Config) error {
			return want(c.Pipelines[0].Window.Capacity, 2_000_000)
		}},
		{"size", []string{"ONCEGATE_LLM_CACHE_MAX_ENTRY_BYTES=256KiB"}, func(c *Config) error { return want(c.LLM.Cache.MaxEntryBytes, ByteSize(256<<10)) }},
		{"sync interval", []string{"ONCEGATE_NATS_EMBEDDED_SYNC_INTERVAL=always"}, func(c *Config) error {
			return want(c.NATS.Embedded.SyncInterval, SyncAlways)
		}},
		{"string list", []string{"ONCEGATE_STREAM_SUBJECTS=triggers.>, hooks.>"}, func(c *Config) error {
			return want(strings.Join(c.Stream.Subjects, " "), "triggers.> hooks.>")
		}},
		{"duration list, and ack_wait follows the first backoff", []string{"ONCEGATE_PIPELINES_ALERTS_BACKOFF=10s,1m,5m", "ONCEGATE_STREAM_DUPLICATES=20m"}, func(c *Config) error {
			p := c.Pipelines[0]
			if err := want(len(p.Backoff), 3); err != nil {
				return err
			}
			return want(p.AckWait, 10*time.Second)
		}},
		{"per pipeline", []string{"ONCEGATE_PIPELINES_ALERTS_ACK_WAIT=45s"}, func(c *Config) error {
			return want(c.Pipelines[0].AckWait, 45*time.Second)
		}},
		{"per pipeline with a dash in its name", []string{"ONCEGATE_PIPELINES_MY_HOOKS_MAX_DELIVER=3"}, func(c *Config) error {
			return want(c.Pipelines[1].MaxDeliver, 3)
		}},
		{"nested in a step", []string{"ONCEGATE_PIPELINES_ALERTS_STEP_TEMPERATURE=0.7"}, func(c *Config) error {
			return want(c.Pipelines[0].Step.Temperature, 0.7)
		}},
		{"optional pointer", []string{"ONCEGATE_PIPELINES_ALERTS_STEP_SEED=42"}, func(c *Config) error {
			if s := c.Pipelines[0].Step.Seed; s == nil || *s != 42 {
				return errors.New("seed not 42")
			}
			return nil
		}},
		{"map entry", []string{"ONCEGATE_LLM_PRICES_GPT_4O_MINI_COMPLETION_PER_MTOK=0.5"}, func(c *Config) error {
			p := c.LLM.Prices["gpt-4o-mini"]
			if err := want(p.CompletionPerMTok, 0.5); err != nil {
				return err
			}
			return want(p.PromptPerMTok, 0.15) // the other field keeps its default
		}},
		{"string map entry", []string{"ONCEGATE_PIPELINES_MY_HOOKS_EFFECT_HEADERS_ENV_AUTHORIZATION=OTHER_VAR"}, func(c *Config) error {
			return want(c.Pipelines[1].Effect.HeadersEnv["Authorization"], "OTHER_VAR")
		}},
		{"derived default follows", []string{"ONCEGATE_DATA_DIR=/srv/oncegate"}, func(c *Config) error {
			return want(c.NATS.Embedded.StoreDir, "/srv/oncegate/nats")
		}},
		{"step model follows llm.model", []string{"ONCEGATE_LLM_MODEL=llama3"}, func(c *Config) error {
			return want(c.Pipelines[0].Step.Model, "llama3")
		}},
		{"empty value disables metrics", []string{"ONCEGATE_METRICS_LISTEN="}, func(c *Config) error { return want(c.Metrics.Listen, "") }},
		{"last of duplicates wins", []string{"ONCEGATE_LOG_LEVEL=warn", "ONCEGATE_LOG_LEVEL=debug"}, func(c *Config) error {
			return want(c.Log.Level, "debug")
		}},
		{"allowlisted and foreign variables are ignored", []string{
			"ONCEGATE_NATS_PASSWORD=hunter2", "ONCEGATE_NATS_TOKEN=s3cr3t", "HOME=/root", "ONCEGATE_MALFORMED",
		}, func(c *Config) error { return nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseEnv([]byte(envDoc), "env.yaml", tt.env)
			if err != nil {
				t.Fatalf("ParseEnv(env %q) error = %v", tt.env, err)
			}
			if err := tt.check(c); err != nil {
				t.Errorf("env %q: %v", tt.env, err)
			}
		})
	}
}

func want[T comparable](got, want T) error {
	if got != want {
		return fmt.Errorf("got %v; want %v", got, want)
	}
	return nil
}

func TestEnvErrors(t *testing.T) {
	tests := []struct {
		name     string
		env      []string
		wantEnv  string
		wantPath string
		wantErr  error
		wantMsg  string
	}{
		{"unknown variable", []string{"ONCEGATE_NATS_ULR=nats://x"}, "ONCEGATE_NATS_ULR", "", ErrUnknownKey, "did you mean ONCEGATE_NATS_URL?"},
		{"unknown pipeline", []string{"ONCEGATE_PIPELINES_ALARMS_ACK_WAIT=1s"}, "ONCEGATE_PIPELINES_ALARMS_ACK_WAIT", "", ErrUnknownKey, "ONCEGATE_PIPELINES_ALERTS_ACK_WAIT"},
		{"a section is not a field", []string{"ONCEGATE_LEDGER=kv"}, "ONCEGATE_LEDGER", "", ErrUnknownKey, ""},
		{"map entry the file does not have", []string{"ONCEGATE_LLM_PRICES_GPT_5_PROMPT_PER_MTOK=1"}, "ONCEGATE_LLM_PRICES_GPT_5_PROMPT_PER_MTOK", "", ErrUnknownKey, ""},
		{"bad duration", []string{"ONCEGATE_LEDGER_RETENTION=forever"}, "ONCEGATE_LEDGER_RETENTION", "ledger.retention", ErrInvalid, "invalid duration"},
		{"bad int", []string{"ONCEGATE_PIPELINES_ALERTS_MAX_DELIVER=many"}, "ONCEGATE_PIPELINES_ALERTS_MAX_DELIVER", "pipelines[alerts].max_deliver", ErrInvalid, "whole number"},
		{"bad float", []string{"ONCEGATE_PIPELINES_ALERTS_STEP_TEMPERATURE=NaN"}, "ONCEGATE_PIPELINES_ALERTS_STEP_TEMPERATURE", "pipelines[alerts].step.temperature", ErrInvalid, "finite"},
		{"bad list item", []string{"ONCEGATE_PIPELINES_ALERTS_BACKOFF=1s,soon"}, "ONCEGATE_PIPELINES_ALERTS_BACKOFF", "pipelines[alerts].backoff", ErrInvalid, "item 2"},
		{"step the file does not have", []string{"ONCEGATE_PIPELINES_MY_HOOKS_STEP_MODEL=x"}, "ONCEGATE_PIPELINES_MY_HOOKS_STEP_MODEL", "pipelines[my-hooks].step.model", ErrInvalid, "not configured"},
		{"invalid value reported against the variable", []string{"ONCEGATE_PIPELINES_ALERTS_ACK_WAIT=0s"}, "ONCEGATE_PIPELINES_ALERTS_ACK_WAIT", "pipelines[alerts].ack_wait", ErrInvalid, "positive"},
		{"invalid enum reported against the variable", []string{"ONCEGATE_LEDGER_STORE=redis"}, "ONCEGATE_LEDGER_STORE", "ledger.store", ErrInvalid, "badger, kv"},
		// Fault switches are allowed only in oncegate_faults builds (cmd/consumer), and benchmark switches nowhere.
		{"fault clock switch in a normal build", []string{"ONCEGATE_CLOCK_JUMP=10s"}, "ONCEGATE_CLOCK_JUMP", "", ErrUnknownKey, ""},
		{"fault ledger switch in a normal build", []string{"ONCEGATE_FAULTS_LEDGER_OUTAGE=1s"}, "ONCEGATE_FAULTS_LEDGER_OUTAGE", "", ErrUnknownKey, ""},
		{"deliberate bug in a normal build", []string{"ONCEGATE_BROKEN=ack-early"}, "ONCEGATE_BROKEN", "", ErrUnknownKey, ""},
		{"crash point in a normal build", []string{"ONCEGATE_CRASH_AT=after-effect:1"}, "ONCEGATE_CRASH_AT", "", ErrUnknownKey, ""},
		{"benchmark switch", []string{"ONCEGATE_BENCH_FULL=1"}, "ONCEGATE_BENCH_FULL", "", ErrUnknownKey, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseEnv([]byte(envDoc), "env.yaml", tt.env)
			if err == nil {
				t.Fatalf("ParseEnv(env %q) error = nil; want %v", tt.env, tt.wantErr)
			}
			fes := fieldErrors(t, err)
			i := slices.IndexFunc(fes, func(fe *FieldError) bool { return fe.Env == tt.wantEnv })
			if i < 0 {
				t.Fatalf("ParseEnv error = %v; want one for %s", err, tt.wantEnv)
			}
			fe := fes[i]
			if fe.Path != tt.wantPath || !errors.Is(fe, tt.wantErr) || fe.Line != 0 {
				t.Errorf("error %v: path %q, line %d; want path %q, no line, wrapping %v", fe, fe.Path, fe.Line, tt.wantPath, tt.wantErr)
			}
			if !strings.HasPrefix(fe.Error(), "env "+tt.wantEnv+": ") || !strings.Contains(fe.Error(), tt.wantMsg) {
				t.Errorf("error %q; want it to start with the variable and contain %q", fe.Error(), tt.wantMsg)
			}
		})
	}
}

func TestEnvAmbiguous(t *testing.T) {
	doc := `pipelines:
  - name: a
    subject: triggers.a
    step: {name: s, prompt: x}
    effect: {sink: jetstream, subject: effects.a}
  - name: a-step
    subject: triggers.b
    effect: {sink: jetstream, subject: effects.b}
`
	// pipelines[a].step.name and pipelines[a-step].name spell alike.
	_, err := ParseEnv([]byte(doc), "amb.yaml", []string{"ONCEGATE_PIPELINES_A_STEP_NAME=x"})
	fes := fieldErrors(t, err)
	if len(fes) != 1 || !errors.Is(fes[0], ErrInvalid) || !strings.Contains(fes[0].Error(), "ambiguous") {
		t.Fatalf("ParseEnv error = %v; want one ambiguity error", err)
	}
}

// TestLoadEnvOnDefault covers the demo's path: Default, then the
// environment.
func TestLoadEnvOnDefault(t *testing.T) {
	c := Default()
	if err := c.LoadEnv([]string{"ONCEGATE_DATA_DIR=/data", "ONCEGATE_PIPELINES_ALERTS_MAX_DELIVER=7"}); err != nil {
		t.Fatalf("LoadEnv error = %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate error = %v", err)
	}
	if c.NATS.Embedded.StoreDir != "/data/nats" || c.Pipelines[0].MaxDeliver != 7 {
		t.Errorf("after LoadEnv: store dir %q, max_deliver %d; want /data/nats, 7", c.NATS.Embedded.StoreDir, c.Pipelines[0].MaxDeliver)
	}
	// A value set in Go is not a default: LoadEnv leaves it alone.
	c = Default()
	c.NATS.Embedded.StoreDir = "/elsewhere"
	if err := c.LoadEnv([]string{"ONCEGATE_DATA_DIR=/data"}); err != nil {
		t.Fatal(err)
	}
	if c.NATS.Embedded.StoreDir != "/elsewhere" {
		t.Errorf("LoadEnv replaced a store dir set in Go with %q", c.NATS.Embedded.StoreDir)
	}
	// A Config built in Go takes variables too.
	g := &Config{}
	if err := g.LoadEnv([]string{"ONCEGATE_LOG_LEVEL=warn"}); err != nil {
		t.Fatal(err)
	}
	if g.Log.Level != "warn" || g.LLM.Model != DefaultModel {
		t.Errorf("Config{}.LoadEnv: level %q, model %q", g.Log.Level, g.LLM.Model)
	}
}

// TestEnvNameMatchesIndex checks that EnvName spells every variable as
// LoadEnv looks it up, and that every scalar field has one.
func TestEnvNameMatchesIndex(t *testing.T) {
	c, err := Parse([]byte(envDoc), "env.yaml")
	if err != nil {
		t.Fatal(err)
	}
	idx := c.envIndex()
	for name, ls := range idx {
		for _, l := range ls {
			if got := EnvName(c.displayPath(l.path)); got != name {
				t.Errorf("EnvName(%q) = %s; LoadEnv reads %s", c.displayPath(l.path), got, name)
			}
		}
	}
	for _, name := range []string{
		"ONCEGATE_DATA_DIR", "ONCEGATE_NATS_URL", "ONCEGATE_NATS_TLS_CA_FILE", "ONCEGATE_NATS_EMBEDDED_STORE_DIR",
		"ONCEGATE_LEDGER_KV_REPLICAS", "ONCEGATE_LLM_API_KEY_ENV", "ONCEGATE_STREAM_DEAD_LETTER_SUBJECT",
		"ONCEGATE_PIPELINES_ALERTS_KEY_FIELDS", "ONCEGATE_PIPELINES_ALERTS_EFFECT_APPROVAL_SUBJECT",
		"ONCEGATE_PIPELINES_MY_HOOKS_WINDOW_TTL", "ONCEGATE_PIPELINES_ALERTS_STEP_PROMPT",
	} {
		if len(idx[name]) != 1 {
			t.Errorf("no field for %s", name)
		}
	}
	if got := len(idx); got < 90 {
		t.Errorf("%d variables; want one for each of the ~100 scalar fields", got)
	}
}

// TestEnvListPositions checks that a problem inside a list set by a
// variable is reported against the variable, not the file's old line.
func TestEnvListPositions(t *testing.T) {
	doc := "stream:\n  subjects:\n    - triggers.>\n    - hooks.>\n" + envDoc
	_, err := ParseEnv([]byte(doc), "env.yaml", []string{"ONCEGATE_STREAM_SUBJECTS=triggers.>,triggers.*.x"})
	fe := findError(t, err, "stream.subjects[1]", ErrInvalid)
	if fe.Env != "ONCEGATE_STREAM_SUBJECTS" || fe.Line != 0 {
		t.Errorf("error %v: env %q, line %d; want ONCEGATE_STREAM_SUBJECTS, no line", fe, fe.Env, fe.Line)
	}
}

// TestNATSConventions: NATS_URL and NATS_CREDS, as the nats CLI reads
// them, apply when neither the file nor an ONCEGATE_* variable sets the
// field.
func TestNATSConventions(t *testing.T) {
	c, err := parseDefault([]string{"NATS_URL=nats://a:4222", "NATS_CREDS=/etc/nats/app.creds"})
	if err != nil {
		t.Fatal(err)
	}
	if c.NATS.URL != "nats://a:4222" || c.NATS.CredsFile != "/etc/nats/app.creds" {
		t.Errorf("nats %+v; want NATS_URL and NATS_CREDS applied", c.NATS)
	}
	c, err = parseDefault([]string{"NATS_URL=nats://a:4222", "ONCEGATE_NATS_URL=nats://b:4222"})
	if err != nil {
		t.Fatal(err)
	}
	if c.NATS.URL != "nats://b:4222" {
		t.Errorf("nats.url %q; want ONCEGATE_NATS_URL to win over NATS_URL", c.NATS.URL)
	}
	c, err = Parse([]byte("nats: {url: nats://file:4222}\npipelines: [{name: p, subject: triggers.p, effect: {sink: jetstream, subject: effects.p}}]\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.LoadEnv([]string{"NATS_URL=nats://a:4222"}); err != nil {
		t.Fatal(err)
	}
	if c.NATS.URL != "nats://file:4222" {
		t.Errorf("nats.url %q; want the file's value to win over NATS_URL", c.NATS.URL)
	}
}
