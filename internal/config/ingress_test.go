package config

import (
	"errors"
	"strings"
	"testing"
)

func TestIngressDefaultIsOff(t *testing.T) {
	c := Default()
	if c.IngressOn() {
		t.Fatalf("the built-in configuration serves the ingress on %q; want it off", c.Ingress.Listen)
	}
	got := map[string]string{}
	for _, s := range c.Ingress.Sources {
		got[s.Name] = s.Kind + " " + s.Subject + " " + s.Auth
	}
	want := map[string]string{"github": "github triggers.webhooks ", "alertmanager": "alertmanager triggers.alerts bearer"}
	if len(got) != len(want) || got["github"] != want["github"] || got["alertmanager"] != want["alertmanager"] {
		t.Errorf("built-in sources = %v; want %v", got, want)
	}
	if err := c.LoadEnv([]string{"ONCEGATE_INGRESS_LISTEN=127.0.0.1:8080", "ONCEGATE_INGRESS_SOURCES_GITHUB_SUBJECT=triggers.gh"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !c.IngressOn() || c.Ingress.Sources[0].Subject != "triggers.gh" {
		t.Errorf("after the environment: listen %q, github subject %q", c.Ingress.Listen, c.Ingress.Sources[0].Subject)
	}
}

func TestIngressValidation(t *testing.T) {
	const base = `
pipelines:
  - name: hooks
    subject: triggers.webhooks
    effect: {sink: jetstream, subject: effects.webhooks}
ingress:
  listen: 127.0.0.1:8080
  sources:
`
	tests := []struct {
		name, sources string
		wantPath      string
		wantErr       error
	}{
		{"no secret", `    - {name: gh, kind: github, subject: triggers.webhooks}`, "ingress.sources[0].secret_env", ErrMissing},
		{"unsigned must be written", `    - {name: gh, kind: github, subject: triggers.webhooks, auth: none, secret_env: X}`, "ingress.sources[0].auth", ErrInvalid},
		{"unknown kind", `    - {name: gh, kind: gitlab, subject: triggers.webhooks, secret_env: X}`, "ingress.sources[0].kind", ErrInvalid},
		{"subject outside the stream", `    - {name: gh, kind: github, subject: elsewhere.x, secret_env: X}`, "ingress.sources[0].subject", ErrInvalid},
		{"wildcard subject", `    - {name: gh, kind: github, subject: "triggers.*", secret_env: X}`, "ingress.sources[0].subject", ErrInvalid},
		{"defined twice", "    - {name: gh, kind: github, subject: triggers.webhooks, secret_env: X}\n    - {name: gh, kind: sentry, subject: triggers.webhooks, secret_env: Y}", "ingress.sources[1].name", ErrInvalid},
		{"secret in the file", `    - {name: gh, kind: github, subject: triggers.webhooks, secret: hunter2}`, "ingress.sources[0].secret", ErrInvalid},
		{"env and file", `    - {name: gh, kind: github, subject: triggers.webhooks, secret_env: X, secret_file: /x}`, "ingress.sources[0].secret_file", ErrInvalid},
		{"basic without user", `    - {name: am, kind: alertmanager, subject: triggers.webhooks, auth: basic, secret_env: X}`, "ingress.sources[0].user", ErrMissing},
		{"bearer on github", `    - {name: gh, kind: github, subject: triggers.webhooks, auth: bearer, secret_env: X}`, "ingress.sources[0].auth", ErrInvalid},
		{"header on github", `    - {name: gh, kind: github, subject: triggers.webhooks, secret_env: X, header: X-Sig}`, "ingress.sources[0].header", ErrInvalid},
		{"bad header name", `    - {name: b, kind: hmac, subject: triggers.webhooks, secret_env: X, header: "X Sig"}`, "ingress.sources[0].header", ErrInvalid},
		{"override variable", `    - {name: gh, kind: github, subject: triggers.webhooks, secret_env: ONCEGATE_SECRET}`, "ingress.sources[0].secret_env", ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(base+tt.sources+"\n"), "oncegate.yaml")
			var fe *FieldError
			found := false
			for _, e := range unjoin(err) {
				if errors.As(e, &fe) && fe.Path == tt.wantPath && errors.Is(e, tt.wantErr) {
					found = true
				}
			}
			if !found {
				t.Errorf("Parse(%s) = %v; want a %v at %s", tt.name, err, tt.wantErr, tt.wantPath)
			}
		})
	}
	if _, err := Parse([]byte(base+"    - {name: gh, kind: github, subject: triggers.webhooks, secret_env: GH, previous_secret_file: /run/old}\n"+
		"    - {name: am, kind: alertmanager, subject: triggers.webhooks, auth: basic, user: am, secret_file: /run/am}\n"+
		"    - {name: open, kind: hmac, subject: triggers.webhooks, auth: none}\n"), "ok.yaml"); err != nil {
		t.Errorf("a valid ingress: %v", err)
	}
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestIngressExplainNamesNoSecret(t *testing.T) {
	c := Default()
	var b strings.Builder
	if err := c.Explain(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "/hooks/github: github → triggers.webhooks; secret from $GITHUB_WEBHOOK_SECRET") {
		t.Errorf("Explain does not describe the github source:\n%s", b.String())
	}
}

// TestIngressSubjectsOnlyWhenServing: the built-in sources' subjects need
// not be captured by a stream that a configuration without the ingress
// names; once the ingress serves, they must be.
func TestIngressSubjectsOnlyWhenServing(t *testing.T) {
	c := Default()
	c.Stream.Subjects = []string{"events.>"}
	for i := range c.Pipelines {
		c.Pipelines[i].Subject = "events." + c.Pipelines[i].Name
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("ingress off, stream on events.>: Validate() = %v; want nil", err)
	}
	c.Ingress.Listen = "127.0.0.1:8080"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "is not captured by the stream") {
		t.Errorf("ingress on: Validate() = %v; want the sources' subjects refused", err)
	}
}
