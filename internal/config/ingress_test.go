package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/ingress/spec"
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
		{"unknown kind", `    - {name: gh, kind: gitlap, subject: triggers.webhooks, secret_env: X}`, "ingress.sources[0].kind", ErrInvalid},
		{"subject outside the stream", `    - {name: gh, kind: github, subject: elsewhere.x, secret_env: X}`, "ingress.sources[0].subject", ErrInvalid},
		{"wildcard subject", `    - {name: gh, kind: github, subject: "triggers.*", secret_env: X}`, "ingress.sources[0].subject", ErrInvalid},
		{"defined twice", "    - {name: gh, kind: github, subject: triggers.webhooks, secret_env: X}\n    - {name: gh, kind: sentry, subject: triggers.webhooks, secret_env: Y}", "ingress.sources[1].name", ErrInvalid},
		{"secret in the file", `    - {name: gh, kind: github, subject: triggers.webhooks, secret: hunter2}`, "ingress.sources[0].secret", ErrInvalid},
		{"env and file", `    - {name: gh, kind: github, subject: triggers.webhooks, secret_env: X, secret_file: /x}`, "ingress.sources[0].secret_file", ErrInvalid},
		{"basic without user", `    - {name: am, kind: alertmanager, subject: triggers.webhooks, auth: basic, secret_env: X}`, "ingress.sources[0].user", ErrMissing},
		{"unknown auth", `    - {name: gh, kind: github, subject: triggers.webhooks, auth: hmac, secret_env: X}`, "ingress.sources[0].auth", ErrInvalid},
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

// TestIngressUnsignedKeyHeaders: a pipeline fed by an ingress source may
// not key on a header the ingress takes from a part of the request the
// provider does not sign (GitHub's, Sentry's and an hmac source's event
// type and delivery id, the trace context): anyone holding one signed
// body could replay it under another value as new work. Headers from
// signed content (Stripe, Standard Webhooks, Alertmanager) may be keyed on.
func TestIngressUnsignedKeyHeaders(t *testing.T) {
	const doc = `
pipelines:
  - name: hooks
    subject: triggers.webhooks
    key: {headers: [%s]}
    effect: {sink: jetstream, subject: effects.webhooks}
ingress:
  listen: %s
  sources:
    - %s
`
	tests := []struct {
		name, header, source string
		listen               string
		want                 string // a substring of the error; "" means valid
	}{
		{"github event", "Oncegate-Event", "{name: gh, kind: github, subject: triggers.webhooks, secret_env: X}", "127.0.0.1:8080", "X-GitHub-Event"},
		{"github delivery", "Oncegate-Delivery", "{name: gh, kind: github, subject: triggers.webhooks, secret_env: X}", "127.0.0.1:8080", "X-GitHub-Delivery"},
		{"sentry event, other case", "oncegate-event", "{name: se, kind: sentry, subject: triggers.webhooks, secret_env: X}", "127.0.0.1:8080", "Sentry-Hook-Resource"},
		{"hmac event header", "Oncegate-Event", "{name: b, kind: hmac, subject: triggers.webhooks, secret_env: X, event_header: X-Ev}", "127.0.0.1:8080", "X-Ev"},
		{"hmac delivery header", "Oncegate-Delivery", "{name: b, kind: hmac, subject: triggers.webhooks, secret_env: X}", "127.0.0.1:8080", "X-Delivery-Id"},
		{"trace context", "traceparent", "{name: st, kind: stripe, subject: triggers.webhooks, secret_env: X}", "127.0.0.1:8080", "traceparent"},
		{"wildcard pipeline subject", "Oncegate-Event", "{name: gh, kind: github, subject: triggers.webhooks, secret_env: X}", "127.0.0.1:8080", "X-GitHub-Event"},
		{"hmac without an event header", "Oncegate-Event", "{name: b, kind: hmac, subject: triggers.webhooks, secret_env: X}", "127.0.0.1:8080", ""},
		{"stripe event", "Oncegate-Event", "{name: st, kind: stripe, subject: triggers.webhooks, secret_env: X}", "127.0.0.1:8080", ""},
		{"standard delivery", "Oncegate-Delivery", "{name: sw, kind: standard, subject: triggers.webhooks, secret_env: X}", "127.0.0.1:8080", ""},
		{"alertmanager event", "Oncegate-Event", "{name: am, kind: alertmanager, subject: triggers.webhooks, secret_env: X}", "127.0.0.1:8080", ""},
		{"github on another pipeline's subject", "Oncegate-Event", "{name: gh, kind: github, subject: triggers.other, secret_env: X}", "127.0.0.1:8080", ""},
		{"ingress off", "Oncegate-Event", "{name: gh, kind: github, subject: triggers.webhooks, secret_env: X}", `""`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := fmt.Sprintf(doc, tt.header, tt.listen, tt.source)
			if tt.name == "wildcard pipeline subject" {
				d = strings.Replace(d, "subject: triggers.webhooks\n    key", "subject: \"triggers.*\"\n    key", 1)
			}
			_, err := Parse([]byte(d), "oncegate.yaml")
			if tt.want == "" {
				if err != nil {
					t.Fatalf("key.headers [%s] with %s: %v; want no error", tt.header, tt.source, err)
				}
				return
			}
			fe := findError(t, err, "pipelines[hooks].key.headers[0]", ErrInvalid)
			for _, w := range []string{tt.want, "not sign"} {
				if !strings.Contains(fe.Error(), w) {
					t.Errorf("error %q does not contain %q", fe.Error(), w)
				}
			}
		})
	}
}

// TestIngressToleranceWithinDuplicates: a signed timestamp is accepted
// within ingress.tolerance either side of the clock, so for twice the
// tolerance; a replay inside it but past the trigger stream's duplicate
// window would be stored as a second trigger. Refused for sources that
// sign timestamps; GitHub signs none, so has no tolerance to check.
func TestIngressToleranceWithinDuplicates(t *testing.T) {
	const doc = `
stream: {duplicates: 5m}
pipelines:
  - name: hooks
    subject: triggers.webhooks
    effect: {sink: jetstream, subject: effects.webhooks}
ingress:
  listen: 127.0.0.1:8080
  tolerance: %s
  sources:
    - {name: s, kind: %s, subject: triggers.webhooks, secret_env: X}
`
	tests := []struct {
		tolerance, kind string
		want            bool
	}{
		{"5m", "stripe", true},
		{"5m", "standard", true},
		{"2m30s", "stripe", false},
		{"5m", "github", false},
	}
	for _, tt := range tests {
		_, err := Parse(fmt.Appendf(nil, doc, tt.tolerance, tt.kind), "oncegate.yaml")
		if !tt.want {
			if err != nil {
				t.Errorf("tolerance %s, %s source: %v; want no error", tt.tolerance, tt.kind, err)
			}
			continue
		}
		fe := findError(t, err, "ingress.tolerance", ErrInvalid)
		for _, w := range []string{"stream.duplicates 5m", "2m30s", "10m"} {
			if !strings.Contains(fe.Error(), w) {
				t.Errorf("error %q does not contain %q", fe.Error(), w)
			}
		}
	}
}

// TestIngressSchemeValidation: a source's scheme, credentials, ids and
// tenants are checked as the ingress will run them, each problem at its
// path.
func TestIngressSchemeValidation(t *testing.T) {
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
		name, source string
		wantPath     string
		wantErr      error
	}{
		{"custom without a signature", `{name: c, subject: triggers.webhooks, secret_env: X}`, "ingress.sources[0].signature.header", ErrMissing},
		{"unknown placeholder", `{name: c, subject: triggers.webhooks, secret_env: X, signature: {header: X-Sig, signed: "{bdy}"}}`, "ingress.sources[0].signature.signed", ErrInvalid},
		{"body not signed", `{name: c, subject: triggers.webhooks, secret_env: X, signature: {header: X-Sig, signed: "{timestamp}", timestamp: "header:X-T"}}`, "ingress.sources[0].signature.signed", ErrInvalid},
		{"timestamp placeholder without a source", `{name: c, subject: triggers.webhooks, secret_env: X, signature: {header: X-Sig, signed: "{timestamp}.{body}"}}`, "ingress.sources[0].signature.timestamp", ErrMissing},
		{"unsigned timestamp", `{name: c, subject: triggers.webhooks, secret_env: X, signature: {header: X-Sig, timestamp: "header:X-T"}}`, "ingress.sources[0].signature.timestamp", ErrInvalid},
		{"timestamp in the header without a separator", `{name: c, subject: triggers.webhooks, secret_env: X, signature: {header: X-Sig, signed: "{timestamp}.{body}", timestamp: "signature:t="}}`, "ingress.sources[0].signature.timestamp", ErrInvalid},
		{"unknown algorithm", `{name: c, subject: triggers.webhooks, secret_env: X, signature: {header: X-Sig, algorithm: md5}}`, "ingress.sources[0].signature.algorithm", ErrInvalid},
		{"unknown encoding", `{name: c, subject: triggers.webhooks, secret_env: X, signature: {header: X-Sig, encoding: base32}}`, "ingress.sources[0].signature.encoding", ErrInvalid},
		{"url without public_url", `{name: tw, kind: twilio, subject: triggers.webhooks, secret_env: X}`, "ingress.sources[0].public_url", ErrMissing},
		{"bad delivery place", `{name: c, subject: triggers.webhooks, secret_env: X, signature: {header: X-Sig}, delivery: ["cookie:id"]}`, "ingress.sources[0].delivery[0]", ErrInvalid},
		{"bad pointer", `{name: c, subject: triggers.webhooks, secret_env: X, signature: {header: X-Sig}, delivery: ["body:id"]}`, "ingress.sources[0].delivery[0]", ErrInvalid},
		{"digest as event", `{name: c, subject: triggers.webhooks, secret_env: X, signature: {header: X-Sig}, event: [digest]}`, "ingress.sources[0].event[0]", ErrInvalid},
		{"copy an Oncegate header", `{name: gh, kind: github, subject: triggers.webhooks, secret_env: X, copy_headers: [Oncegate-Tenant]}`, "ingress.sources[0].copy_headers[0]", ErrInvalid},
		{"token without its header", `{name: c, subject: triggers.webhooks, secret_env: X, auth: token}`, "ingress.sources[0].token_header", ErrMissing},
		{"tenants and a secret", `{name: c, kind: gitlab, subject: triggers.webhooks, secret_env: X, tenant_secret_dir: /run/t}`, "ingress.sources[0].secret_env", ErrInvalid},
		{"bad tenant name", `{name: c, kind: gitlab, subject: triggers.webhooks, tenant_secret_env: {.acme: X}}`, "ingress.sources[0].tenant_secret_env[.acme]", ErrInvalid},
		{"form payload without form", `{name: c, kind: github, subject: triggers.webhooks, secret_env: X, form_payload: payload}`, "ingress.sources[0].form_payload", ErrInvalid},
		{"echo without event", `{name: c, kind: stripe, subject: triggers.webhooks, secret_env: X, handshake: {echo: /challenge}}`, "ingress.sources[0].handshake.echo", ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(base+"    - "+tt.source+"\n"), "oncegate.yaml")
			findError(t, err, tt.wantPath, tt.wantErr)
		})
	}
	// Every preset, as a user writes it, is valid.
	var srcs strings.Builder
	for _, k := range spec.Kinds() {
		extra := ""
		if k == "twilio" {
			extra = ", public_url: https://hooks.example.com"
		}
		fmt.Fprintf(&srcs, "    - {name: %s, kind: %s, subject: triggers.webhooks, secret_env: X%s}\n", k, k, extra)
	}
	srcs.WriteString("    - {name: per-tenant, kind: shopify, subject: triggers.webhooks, tenant_secret_env: {acme: ACME, globex: GLOBEX}}\n")
	srcs.WriteString("    - {name: custom, subject: triggers.webhooks, secret_env: X, signature: {header: X-Sig, algorithm: hmac-sha512, encoding: base64url, prefix: \"v1=\", separator: \",\", signed: \"{id}.{timestamp}.{header:X-Req}.{body}\", timestamp: \"signature:t=\", timestamp_unit: ms}, delivery: [\"header:X-Id\"], copy_headers: [X-Req]}\n")
	if _, err := Parse([]byte(base+srcs.String()), "oncegate.yaml"); err != nil {
		t.Errorf("every preset and a custom scheme: %v", err)
	}
}

// TestIngressKeyHeadersByScheme: whether a key may use a header follows
// from the scheme: a copied header the signature names, or the tenant, may
// be keyed on; a copied header it does not name, or any header under a
// token, may not.
func TestIngressKeyHeadersByScheme(t *testing.T) {
	const doc = `
pipelines:
  - name: hooks
    subject: triggers.webhooks
    key: {headers: [%s]}
    effect: {sink: jetstream, subject: effects.webhooks}
ingress:
  listen: 127.0.0.1:8080
  sources:
    - %s
`
	tests := []struct {
		name, header, source string
		want                 string
	}{
		{"copied, unsigned", "X-Req", `{name: c, kind: github, subject: triggers.webhooks, secret_env: X, copy_headers: [X-Req]}`, "X-Req"},
		{"copied, signed", "X-Req", `{name: c, subject: triggers.webhooks, secret_env: X, signature: {header: X-Sig, signed: "{header:x-req}.{body}"}, copy_headers: [X-Req]}`, ""},
		{"tenant", "Oncegate-Tenant", `{name: c, kind: github, subject: triggers.webhooks, tenant_secret_env: {acme: A}}`, ""},
		{"gitlab delivery under a token", "Oncegate-Delivery", `{name: gl, kind: gitlab, subject: triggers.webhooks, secret_env: X}`, "Idempotency-Key"},
		{"gitlab event from the body", "Oncegate-Event", `{name: gl, kind: gitlab, subject: triggers.webhooks, secret_env: X}`, ""},
		{"shopify topic", "Oncegate-Event", `{name: sh, kind: shopify, subject: triggers.webhooks, secret_env: X}`, "X-Shopify-Topic"},
		{"pagerduty event id", "Oncegate-Delivery", `{name: pd, kind: pagerduty, subject: triggers.webhooks, secret_env: X}`, ""},
		{"slack event id", "Oncegate-Delivery", `{name: sl, kind: slack, subject: triggers.webhooks, secret_env: X}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(fmt.Appendf(nil, doc, tt.header, tt.source), "oncegate.yaml")
			if tt.want == "" {
				if err != nil {
					t.Fatalf("key.headers [%s] with %s: %v; want no error", tt.header, tt.source, err)
				}
				return
			}
			fe := findError(t, err, "pipelines[hooks].key.headers[0]", ErrInvalid)
			if !strings.Contains(fe.Error(), tt.want) {
				t.Errorf("error %q does not name %s", fe.Error(), tt.want)
			}
		})
	}
}
