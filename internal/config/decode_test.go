package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// minimal is the smallest valid document, for tests to extend. Line 1 is
// "pipelines:".
const minimal = `pipelines:
  - name: p
    subject: triggers.p
    effect:
      sink: jetstream
      subject: effects.p
`

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name     string
		doc      string
		wantPath string
		wantLine int
		wantErr  error
		wantMsg  string // a substring of the message
	}{
		{
			name:     "unknown top-level key",
			doc:      "data_dir: x\nbogus: 1\n" + minimal,
			wantPath: "bogus", wantLine: 2, wantErr: ErrUnknownKey, wantMsg: `unknown key "bogus"`,
		},
		{
			name:     "misspelt top-level key suggests the right one",
			doc:      minimal + "pipeline: []\n",
			wantPath: "pipeline", wantLine: 7, wantErr: ErrUnknownKey, wantMsg: `did you mean "pipelines"?`,
		},
		{
			name:     "unknown nested key",
			doc:      "ledger:\n  store: badger\n  retension: 200h\n" + minimal,
			wantPath: "ledger.retension", wantLine: 3, wantErr: ErrUnknownKey, wantMsg: `did you mean "retention"?`,
		},
		{
			name:     "unknown key two levels down",
			doc:      "llm:\n  cache:\n    ttl: 1h\n    size: 3\n" + minimal,
			wantPath: "llm.cache.size", wantLine: 4, wantErr: ErrUnknownKey,
		},
		{
			name:     "unknown key in a pipeline is reported by pipeline name",
			doc:      minimal + "    retries: 3\n",
			wantPath: "pipelines[p].retries", wantLine: 7, wantErr: ErrUnknownKey,
		},
		{
			name:     "unknown key in a pipeline's effect",
			doc:      minimal + "    effect2: {}\n",
			wantPath: "pipelines[p].effect2", wantLine: 7, wantErr: ErrUnknownKey,
		},
		{
			name:     "unknown key in a map entry",
			doc:      "llm:\n  prices:\n    m:\n      prompt: 1\n" + minimal,
			wantPath: "llm.prices[m].prompt", wantLine: 4, wantErr: ErrUnknownKey,
		},
		{
			name:     "password key refused",
			doc:      "nats:\n  url: nats://h:4222\n  user: u\n  password: hunter2\n" + minimal,
			wantPath: "nats.password", wantLine: 4, wantErr: ErrInvalid, wantMsg: "ONCEGATE_NATS_PASSWORD",
		},
		{
			name:     "token key refused",
			doc:      "nats:\n  token: s3cr3t\n" + minimal,
			wantPath: "nats.token", wantLine: 2, wantErr: ErrInvalid, wantMsg: "token_file",
		},
		{
			name:     "api key refused",
			doc:      "llm:\n  api_key: sk-123\n" + minimal,
			wantPath: "llm.api_key", wantLine: 2, wantErr: ErrInvalid, wantMsg: "api_key_env",
		},
		{
			name:     "string for an int",
			doc:      minimal + "    max_deliver: five\n",
			wantPath: "pipelines[p].max_deliver", wantLine: 7, wantErr: ErrInvalid, wantMsg: "want a whole number",
		},
		{
			name:     "fraction for an int is not truncated",
			doc:      minimal + "    max_deliver: 1.5\n",
			wantPath: "pipelines[p].max_deliver", wantLine: 7, wantErr: ErrInvalid, wantMsg: "the number 1.5",
		},
		{
			name:     "int out of range",
			doc:      minimal + "    max_deliver: 9223372036854775808\n",
			wantPath: "pipelines[p].max_deliver", wantLine: 7, wantErr: ErrInvalid, wantMsg: "out of range",
		},
		{
			name:     "bare number for a duration",
			doc:      minimal + "    ack_wait: 30\n",
			wantPath: "pipelines[p].ack_wait", wantLine: 7, wantErr: ErrInvalid, wantMsg: `"30s"`,
		},
		{
			name:     "bad duration",
			doc:      "ledger:\n  retention: 7days\n" + minimal,
			wantPath: "ledger.retention", wantLine: 2, wantErr: ErrInvalid, wantMsg: "invalid duration",
		},
		{
			name:     "mapping for a string",
			doc:      "data_dir: {a: 1}\n" + minimal,
			wantPath: "data_dir", wantLine: 1, wantErr: ErrInvalid, wantMsg: "want a string, got a mapping",
		},
		{
			name:     "boolean for a string",
			doc:      "nats:\n  url: true\n" + minimal,
			wantPath: "nats.url", wantLine: 2, wantErr: ErrInvalid, wantMsg: "boolean",
		},
		{
			name:     "scalar for a list",
			doc:      "stream:\n  subjects: triggers.>\n" + minimal,
			wantPath: "stream.subjects", wantLine: 2, wantErr: ErrInvalid, wantMsg: "want a list",
		},
		{
			name:     "list for a section",
			doc:      "ledger: [badger]\n" + minimal,
			wantPath: "ledger", wantLine: 1, wantErr: ErrInvalid, wantMsg: "want a mapping",
		},
		{
			name:     "non-finite float",
			doc:      "llm:\n  prices:\n    m: {prompt_per_mtok: .inf}\n" + minimal,
			wantPath: "llm.prices[m].prompt_per_mtok", wantLine: 3, wantErr: ErrInvalid, wantMsg: "finite",
		},
		{
			name:     "bad size",
			doc:      "llm:\n  cache:\n    max_entry_bytes: 1 MB and a bit\n" + minimal,
			wantPath: "llm.cache.max_entry_bytes", wantLine: 3, wantErr: ErrInvalid, wantMsg: "invalid size",
		},
		{
			name:     "bad sync interval",
			doc:      "nats:\n  embedded:\n    sync_interval: sometimes\n" + minimal,
			wantPath: "nats.embedded.sync_interval", wantLine: 3, wantErr: ErrInvalid, wantMsg: `"always"`,
		},
		{
			name:     "null list item",
			doc:      "stream:\n  subjects:\n    - triggers.>\n    -\n" + minimal,
			wantPath: "stream.subjects[1]", wantErr: ErrInvalid, wantMsg: "null",
		},
		{
			name:     "duplicate key",
			doc:      "data_dir: a\ndata_dir: b\n" + minimal,
			wantLine: 2, wantErr: ErrInvalid, wantMsg: "already defined",
		},
		{
			name:    "syntax error",
			doc:     "stream:\n  subjects: [a, b\n" + minimal,
			wantErr: ErrInvalid, wantMsg: "yaml:",
		},
		{
			name:     "two documents",
			doc:      minimal + "---\n" + minimal,
			wantLine: 7, wantErr: ErrInvalid, wantMsg: "one document",
		},
		{
			name:    "a document after an empty one",
			doc:     "---\n---\n" + minimal,
			wantErr: ErrInvalid, wantMsg: "no document found",
		},
		{
			name:     "top level is a list",
			doc:      "- a\n- b\n",
			wantLine: 1, wantErr: ErrInvalid, wantMsg: "want a mapping",
		},
		{
			name:     "alias to no anchor",
			doc:      "data_dir: *nowhere\n" + minimal,
			wantPath: "data_dir", wantLine: 1, wantErr: ErrInvalid, wantMsg: "names no anchor",
		},
		{
			name:    "too large",
			doc:     minimal + "# " + strings.Repeat("x", maxFileBytes) + "\n",
			wantErr: ErrInvalid, wantMsg: "limit",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.doc), "test.yaml")
			if err == nil {
				t.Fatalf("Parse(%q) error = nil; want %v", tt.doc, tt.wantErr)
			}
			if c != nil {
				t.Errorf("Parse returned a Config with a decoding error")
			}
			var fe *FieldError
			for _, e := range fieldErrors(t, err) {
				if e.Path == tt.wantPath {
					fe = e
					break
				}
			}
			if fe == nil {
				t.Fatalf("Parse error = %v; want one at path %q", err, tt.wantPath)
			}
			if !errors.Is(fe, tt.wantErr) {
				t.Errorf("error %v does not wrap %v", fe, tt.wantErr)
			}
			if tt.wantLine != 0 && fe.Line != tt.wantLine {
				t.Errorf("error %v is at line %d; want %d", fe, fe.Line, tt.wantLine)
			}
			if fe.File != "test.yaml" {
				t.Errorf("error %v names file %q; want test.yaml", fe, fe.File)
			}
			if !strings.Contains(fe.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", fe.Error(), tt.wantMsg)
			}
		})
	}
}

// TestDecodeReportsEveryProblem checks that decoding does not stop at the
// first problem, as yaml.Strict() does.
func TestDecodeReportsEveryProblem(t *testing.T) {
	doc := "one: 1\nledger:\n  two: 2\n  retention: 5\n" + minimal + "    three: 3\n"
	_, err := Parse([]byte(doc), "t.yaml")
	want := map[string]int{"one": 1, "ledger.two": 3, "ledger.retention": 4, "pipelines[p].three": 11}
	fes := fieldErrors(t, err)
	if len(fes) != len(want) {
		t.Fatalf("Parse error has %d problems; want %d:\n%v", len(fes), len(want), err)
	}
	for _, fe := range fes {
		if line, ok := want[fe.Path]; !ok || line != fe.Line {
			t.Errorf("unexpected problem %v", fe)
		}
	}
}

func TestDecodeValues(t *testing.T) {
	c, err := Parse([]byte(`data_dir: /var/lib/oncegate
nats:
  url: nats://a:4222, nats://b:4222
  embedded:
    sync_interval: always
  user: u
  password_file: /run/pw
  connect_timeout: 2s
ledger:
  store: kv
  kv: {bucket: led, replicas: 3}
  mismatch: reject
llm:
  cache:
    max_entry_bytes: 512KiB
    budget_tokens: 20_000
metrics:
  listen: ""
pipelines:
  - &p
    name: a
    subject: triggers.a
    step:
      name: s
      prompt: "{{.x}}"
      seed: 0
      temperature: 1
    effect: {sink: jetstream, subject: effects.a}
    backoff: [1s, 5s, 30s]
  - <<: *p
    name: b
    subject: triggers.b
    step: ~
    effect: {sink: http, url: "https://h.example/x", headers_env: {Authorization: H_AUTH}}
`), "t.yaml")
	if err != nil {
		t.Fatalf("Parse error = %v", err)
	}
	if c.NATS.Embedded.SyncInterval != SyncAlways {
		t.Errorf("SyncInterval = %v; want always", c.NATS.Embedded.SyncInterval)
	}
	if c.LLM.Cache.MaxEntryBytes != 512<<10 || c.LLM.Cache.BudgetTokens != 20000 {
		t.Errorf("Cache = %+v", c.LLM.Cache)
	}
	if c.Metrics.Listen != "" {
		t.Errorf("Metrics.Listen = %q; an explicit empty string must disable metrics, not take the default", c.Metrics.Listen)
	}
	if c.Ledger.Mismatch != MismatchReject || c.Ledger.KV.Replicas != 3 {
		t.Errorf("Ledger = %+v", c.Ledger)
	}
	a, b := c.Pipelines[0], c.Pipelines[1]
	if a.Step == nil || a.Step.Seed == nil || *a.Step.Seed != 0 || a.Step.Temperature != 1 || a.Step.Model != DefaultModel {
		t.Errorf("pipeline a step = %+v", a.Step)
	}
	if a.Mode != ModeFull || a.AckWait != time.Second {
		t.Errorf("pipeline a: mode %q, ack_wait %v; want full, the first backoff", a.Mode, a.AckWait)
	}
	if b.Name != "b" || b.Step != nil || b.Mode != ModeGateLedger || len(b.Backoff) != 3 || b.Effect.HeadersEnv["Authorization"] != "H_AUTH" {
		t.Errorf("pipeline b (merged from a) = %+v", b)
	}
	if a.Step.BudgetTokens != 20000 {
		t.Errorf("step budget = %d; want the cache's 20000", a.Step.BudgetTokens)
	}
}

func TestDocumentMarkers(t *testing.T) {
	for _, doc := range []string{"---\n" + minimal + "---\n", "%YAML 1.2\n---\n" + minimal + "...\n"} {
		if _, err := Parse([]byte(doc), "t.yaml"); err != nil {
			t.Errorf("Parse(%q) error = %v; want nil", doc, err)
		}
	}
}

func TestEmptyDocument(t *testing.T) {
	for _, doc := range []string{"", "# nothing\n", "---\n", "%YAML 1.2\n---\n...\n"} {
		_, err := Parse([]byte(doc), "e.yaml")
		findError(t, err, "pipelines", ErrMissing)
	}
}
