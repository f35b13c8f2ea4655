package config

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fieldErrors returns the *FieldErrors joined in err.
func fieldErrors(t *testing.T, err error) []*FieldError {
	t.Helper()
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var out []*FieldError
	for _, e := range errs {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("error %v (%T) is not a *FieldError", e, e)
		}
		out = append(out, fe)
	}
	return out
}

// findError returns the FieldError for path, failing the test if there is
// none or if it does not wrap kind.
func findError(t *testing.T, err error, path string, kind error) *FieldError {
	t.Helper()
	fes := fieldErrors(t, err)
	for _, fe := range fes {
		if fe.Path == path {
			if !errors.Is(fe, kind) {
				t.Fatalf("error for %s = %v; want one wrapping %v", path, fe, kind)
			}
			return fe
		}
	}
	t.Fatalf("no error for path %q; got %d errors:\n%v", path, len(fes), err)
	return nil
}

// stripMeta returns a copy of c without provenance, for comparisons.
func stripMeta(c *Config) Config {
	cp := *c
	cp.meta = nil
	return cp
}

func TestDefaultValidates(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v; want nil", err)
	}
	if got := len(c.Pipelines); got != 2 {
		t.Fatalf("Default() has %d pipelines; want 2", got)
	}
	a, w := c.Pipelines[0], c.Pipelines[1]
	if a.Name != "alerts" || a.Mode != ModeFull || a.Step == nil || a.Step.Name != "triage" ||
		a.Effect.Subject != "effects.alerts" || a.Effect.Class != ClassReplayable {
		t.Errorf("Default() alerts pipeline = %+v", a)
	}
	if w.Name != "webhooks" || w.Mode != ModeGateLedger || w.Step != nil || w.Effect.Subject != "effects.webhooks" {
		t.Errorf("Default() webhooks pipeline = %+v", w)
	}
	if c.NATS.URL != "" || c.LLM.BaseURL != "" {
		t.Errorf("Default() NATS.URL = %q, LLM.BaseURL = %q; want embedded server and stand-in model", c.NATS.URL, c.LLM.BaseURL)
	}
	// Each call returns a fresh value.
	c.Pipelines[0].Name = "changed"
	if Default().Pipelines[0].Name != "alerts" {
		t.Error("Default() shares state between calls")
	}
}

func TestExampleFileEqualsDefault(t *testing.T) {
	data, err := os.ReadFile("../../examples/oncegate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(data, "examples/oncegate.yaml")
	if err != nil {
		t.Fatalf("Parse(examples/oncegate.yaml) error = %v", err)
	}
	got, want := stripMeta(c), stripMeta(Default())
	if !reflect.DeepEqual(got, want) {
		t.Errorf("examples/oncegate.yaml differs from Default():\n got  %+v\n want %+v", got, want)
	}
}

// TestLoadMissingFile covers Load's own work; everything after reading the
// file is ParseEnv, tested with an injected environment.
func TestLoadMissingFile(t *testing.T) {
	if _, err := Load("testdata/does-not-exist.yaml"); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing file) error = %v; want one wrapping os.ErrNotExist", err)
	}
}

func TestParseReturnsConfigOnValidationError(t *testing.T) {
	c, err := Parse([]byte("pipelines: []\n"), "x.yaml")
	if err == nil {
		t.Fatal("Parse(no pipelines) error = nil; want ErrMissing")
	}
	findError(t, err, "pipelines", ErrMissing)
	if c == nil {
		t.Fatal("Parse returned a nil Config with a validation error")
	}
	if c.LLM.Model != DefaultModel {
		t.Errorf("defaults not applied: LLM.Model = %q", c.LLM.Model)
	}
}

func TestFieldErrorFormat(t *testing.T) {
	tests := []struct {
		fe   FieldError
		want string
	}{
		{FieldError{File: "f.yaml", Line: 3, Path: "a.b", Err: invalid("bad")}, "f.yaml:3: a.b: bad"},
		{FieldError{File: "f.yaml", Path: "a.b", Err: missing("gone")}, "f.yaml: a.b: gone"},
		{FieldError{Line: 7, Path: "a", Err: invalid("bad")}, "line 7: a: bad"},
		{FieldError{File: "f.yaml", Env: "ONCEGATE_A", Path: "a", Err: invalid("bad")}, "env ONCEGATE_A: a: bad"},
		{FieldError{Env: "ONCEGATE_X", Err: unknown("nope")}, "env ONCEGATE_X: nope"},
	}
	for _, tt := range tests {
		if got := tt.fe.Error(); got != tt.want {
			t.Errorf("FieldError%+v.Error() = %q; want %q", tt.fe, got, tt.want)
		}
	}
}

func TestProblemsAreCapped(t *testing.T) {
	var doc strings.Builder
	doc.WriteString("pipelines:\n")
	for range 2 * maxProblems {
		doc.WriteString("  - {name: BAD}\n")
	}
	_, err := Parse([]byte(doc.String()), "many.yaml")
	fes := fieldErrors(t, err)
	if len(fes) != maxProblems+1 || !strings.Contains(fes[maxProblems].Error(), "more problems not shown") {
		t.Errorf("got %d problems, the last %v; want %d and a count of the rest", len(fes), fes[len(fes)-1], maxProblems+1)
	}
}

// TestTracingConfig: tracing is off by default; an endpoint that is not an
// http(s) URL, or a ratio outside [0, 1], is refused with its field named.
func TestTracingConfig(t *testing.T) {
	c := Default()
	if c.Tracing.On() || c.Tracing.SampleRatio != 1 || c.Tracing.ServiceName != "oncegate" {
		t.Fatalf("default tracing = %+v; want off, ratio 1, service oncegate", c.Tracing)
	}
	for _, tt := range []struct {
		edit func(*Tracing)
		path string
	}{
		{func(tr *Tracing) { tr.OTLPEndpoint = "localhost:4317" }, "tracing.otlp_endpoint"},
		{func(tr *Tracing) { tr.OTLPEndpoint = "grpc://collector:4317" }, "tracing.otlp_endpoint"},
		{func(tr *Tracing) { tr.OTLPEndpoint = "http://user:pw@collector:4318" }, "tracing.otlp_endpoint"},
		{func(tr *Tracing) { tr.SampleRatio = 1.5 }, "tracing.sample_ratio"},
		{func(tr *Tracing) { tr.SampleRatio = -0.1 }, "tracing.sample_ratio"},
	} {
		c := Default()
		tt.edit(&c.Tracing)
		err := c.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Path != tt.path {
			t.Errorf("%+v: Validate() = %v; want a FieldError at %s", c.Tracing, err, tt.path)
		}
	}
	c = Default()
	c.Tracing.OTLPEndpoint = "http://collector:4318"
	if err := c.Validate(); err != nil {
		t.Errorf("an OTLP/HTTP endpoint is refused: %v", err)
	}
}

// TestMaxClockSkew: the clock skew the redo guard allows for defaults to
// 1s, and must be neither negative nor as long as the duplicate window.
func TestMaxClockSkew(t *testing.T) {
	if c := Default(); c.Ledger.MaxClockSkew != time.Second || c.Validate() != nil {
		t.Fatalf("default max_clock_skew = %v (Validate: %v); want 1s and valid", c.Ledger.MaxClockSkew, c.Validate())
	}
	for _, skew := range []time.Duration{-time.Second, 5 * time.Minute} {
		c := Default()
		c.Ledger.MaxClockSkew = skew
		var fe *FieldError
		if err := c.Validate(); !errors.As(err, &fe) || fe.Path != "ledger.max_clock_skew" {
			t.Errorf("max_clock_skew %v: Validate() = %v; want a FieldError at ledger.max_clock_skew", skew, err)
		}
	}
}
