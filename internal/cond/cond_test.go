package cond_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/cond"
	"github.com/oncegate/oncegate/internal/tmpl"
)

func vars(t *testing.T, answer *tmpl.Answer) cond.Vars {
	t.Helper()
	trig, err := tmpl.DecodeJSON([]byte(`{"status":"firing","alert":{"labels":{"severity":"critical","team":"db"},"value":0.93,"count":12},"tags":["a","b"]}`))
	if err != nil {
		t.Fatal(err)
	}
	return cond.NewVars(tmpl.Input{Trigger: trig, Headers: map[string]string{"Oncegate-Event": "firing"}, Status: "firing", Key: "k", Pipeline: "alerts", Answer: answer})
}

func TestEval(t *testing.T) {
	structured := &tmpl.Answer{Text: `{"severity":"low"}`, Fields: map[string]any{"severity": "low"}}
	for _, tt := range []struct {
		expr       string
		answer     *tmpl.Answer
		want       bool
		usesAnswer bool
		wantErr    string
	}{
		{expr: `status == "resolved"`, want: false},
		{expr: `trigger.alert.labels.severity in ["critical", "page"]`, want: true},
		{expr: `trigger.alert.value > 0.9 && trigger.alert.count >= 12`, want: true},
		{expr: `trigger.alert.count > 11.5`, want: true},
		{expr: `headers["Oncegate-Event"] == "firing"`, want: true},
		{expr: `has(trigger.alert.labels.owner)`, want: false},
		{expr: `answer.severity == "critical"`, answer: structured, want: false, usesAnswer: true},
		{expr: `answer.contains("disk")`, answer: &tmpl.Answer{Text: "the disk fills"}, want: true, usesAnswer: true},
		{expr: `trigger.alert.labels.owner == "x"`, wantErr: "no such key: owner"},
		{expr: `trigger.tags.map(x, trigger.tags.map(y, trigger.tags.map(z, x + y + z))).size() > 0 && ` + strings.Repeat("trigger.tags.exists(x, x == 'b') && ", 1) + `true`, want: true},
	} {
		c, err := cond.Compile(tt.expr)
		if err != nil {
			t.Fatalf("Compile(%q): %v", tt.expr, err)
		}
		if c.UsesAnswer() != tt.usesAnswer {
			t.Errorf("Compile(%q).UsesAnswer() = %v; want %v", tt.expr, c.UsesAnswer(), tt.usesAnswer)
		}
		got, err := c.Eval(vars(t, tt.answer))
		if tt.wantErr != "" {
			if !errors.Is(err, cond.ErrEval) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Eval(%q) = %v, %v; want an error with %q", tt.expr, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Eval(%q) = %v, %v; want %v", tt.expr, got, err, tt.want)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	for _, tt := range []struct{ expr, want string }{
		{`status == `, "at 1:"},
		{`severity == "x"`, "undeclared reference to 'severity' (in container '')"},
		{`status`, "of type string; want bool"},
		{"status == 'a' &&\n  nope(1)", "at 2:"},
	} {
		_, err := cond.Compile(tt.expr)
		if !errors.Is(err, cond.ErrCompile) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Compile(%q) = %v; want an error with %q", tt.expr, err, tt.want)
		}
	}
}

func TestCostLimit(t *testing.T) {
	// A comprehension nested four deep over a 100-element list visits 10^8
	// elements: stopped by the cost limit, not run. The deadline is long,
	// so that a slow machine cannot stop it there first.
	c, err := cond.CompileWith(`trigger.l.all(a, trigger.l.all(b, trigger.l.all(c, trigger.l.all(d, a + b + c + d >= 0))))`, cond.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	l := make([]any, 100)
	for i := range l {
		l[i] = int64(i)
	}
	_, err = c.Eval(cond.NewVars(tmpl.Input{Trigger: map[string]any{"l": l}}))
	if !errors.Is(err, cond.ErrEval) || !strings.Contains(err.Error(), "cost limit") {
		t.Fatalf("Eval = %v; want the cost limit", err)
	}
}
