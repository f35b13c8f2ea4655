package ingress_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/ingress"
	"github.com/oncegate/oncegate/internal/ingress/spec"
)

// TestTenants: a per-tenant source is served at /hooks/<source>/<tenant>
// with each tenant's own secret, from a directory of files or from
// environment variables; the trigger carries Oncegate-Tenant, and its
// Nats-Msg-Id the tenant, so that two tenants' delivery ids never meet;
// one tenant's signature is refused at another's path; an unknown
// tenant, or the source's path without a tenant, is 404 before the body
// is read.
func TestTenants(t *testing.T) {
	dir := t.TempDir()
	for name, secret := range map[string]string{"acme": "acme-secret\n", "globex": "globex-secret", "globex.previous": "globex-old-secret",
		".hidden": "x", "..data": "x"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	secrets["INITECH_SECRET"] = "initech-secret"
	e := newEnv(t, func(c *ingress.Options) {
		c.Sources = []spec.Source{
			{Name: "shops", Kind: "shopify", Subject: "triggers.webhooks", TenantSecretDir: dir},
			{Name: "envs", Kind: "github", Subject: "triggers.webhooks", TenantSecretEnv: map[string]string{"initech": "INITECH_SECRET", "hooli": "HOOLI_UNSET"}},
		}
	})
	body := fixture(t, "shopify-order.json")
	shops := spec.Source{Name: "shops", Kind: "shopify"}
	sign := func(src spec.Source, secret, id string) http.Header {
		h, err := ingress.SignDelivery(src, ingress.Delivery{Secret: []byte(secret), Body: body, Time: e.now, ID: id, Event: "orders/create"})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for _, tt := range []struct {
		path   string
		h      http.Header
		status int
		code   string
	}{
		{"shops/acme", sign(shops, "acme-secret", "same-id"), 200, ""},
		{"shops/globex", sign(shops, "globex-secret", "same-id"), 200, ""},
		{"shops/globex", sign(shops, "globex-old-secret", "rotated"), 200, ""},
		{"shops/globex", sign(shops, "acme-secret", "crossed"), 401, "bad_signature"},
		{"shops/initech", sign(shops, "acme-secret", "x"), 404, "unknown_source"},
		{"shops/.hidden", sign(shops, "x", "x"), 404, "unknown_source"},
		{"shops", sign(shops, "acme-secret", "x"), 404, "unknown_source"},
		{"envs/initech", sign(spec.Source{Name: "envs", Kind: "github"}, "initech-secret", "gh-1"), 200, ""},
		{"envs/hooli", sign(spec.Source{Name: "envs", Kind: "github"}, "", "gh-2"), 503, "no_secret"},
		{"github/acme", sign(shops, "acme-secret", "x"), 404, "unknown_source"},
	} {
		status, _, answer := e.post(tt.path, tt.h, body)
		if status != tt.status || tt.code != "" && !strings.Contains(answer, `"code":"`+tt.code+`"`) {
			t.Errorf("POST /hooks/%s = %d %s; want %d %s", tt.path, status, answer, tt.status, tt.code)
		}
	}
	got := map[string]string{}
	for _, m := range e.messages() {
		got[m.Header.Get(nats.MsgIdHdr)[:strings.IndexByte(m.Header.Get(nats.MsgIdHdr), ':')]+" "+m.Header.Get(ingress.HeaderDelivery)] = m.Header.Get(ingress.HeaderTenant)
	}
	want := map[string]string{"shops/acme same-id": "acme", "shops/globex same-id": "globex", "shops/globex rotated": "globex", "envs/initech gh-1": "initech"}
	if len(got) != len(want) {
		t.Errorf("the stream holds %v; want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("trigger %s: %s = %q; want %q", k, ingress.HeaderTenant, got[k], v)
		}
	}

	// An unknown tenant is answered before its body is read: the body
	// never comes.
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest(http.MethodPost, e.url+"/hooks/shops/initech", pr)
	req.Header = sign(shops, "acme-secret", "x")
	done := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case status := <-done:
		if status != http.StatusNotFound {
			t.Errorf("an unknown tenant with a body still to come = %d; want 404", status)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an unknown tenant was not answered before its body came")
	}
}

// TestAnswersAndRefusalLog: refusals are JSON with a code, a stale
// timestamp says how far it is, and each refusal is logged at debug with
// the source, the reason and the remote address, never the body or a
// secret.
func TestAnswersAndRefusalLog(t *testing.T) {
	e := newEnv(t, nil)
	e.now = time.Unix(e.now.Unix(), 0) // whole seconds, as timestamps are signed
	var logs lockedBuffer
	srv, err := ingress.New(e.options(ingress.Options{
		JetStream: e.js, Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Getenv: func(k string) string { return secrets[k] }, Now: func() time.Time { return e.now },
	}))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	e.url = hs.URL
	body := fixture(t, "stripe-event.json")
	at := e.now
	e.now = at.Add(-10*time.Minute - time.Second)
	stale := e.sign("stripe", body, "", "")
	e.now = at.Add(9*time.Minute + 59*time.Second)
	future := e.sign("stripe", body, "", "")
	e.now = at
	for _, tt := range []struct {
		name, source string
		h            http.Header
		status       int
		code, says   string
	}{
		{"stale", "stripe", stale, 401, "stale", "signed 10m1s ago, and the tolerance is 5m"},
		{"future", "stripe", future, 401, "stale", "signed 9m59s in the future, and the tolerance is 5m"},
		{"forged", "stripe", http.Header{"Content-Type": {"application/json"}, "Stripe-Signature": {"t=1,v1=00"}}, 401, "bad_signature", "no well-formed v1= signature"},
		{"unknown", "nope", e.sign("stripe", body, "", ""), 404, "unknown_source", "no such webhook source"},
		{"not json", "stripe", http.Header{"Content-Type": {"text/plain"}}, 415, "content_type", "application/json"},
	} {
		status, h, answer := e.post(tt.source, tt.h, body)
		var a struct{ Error, Code string }
		if err := json.Unmarshal([]byte(answer), &a); err != nil || h.Get("Content-Type") != "application/json" {
			t.Errorf("%s: the answer %q (%s) is not JSON: %v", tt.name, answer, h.Get("Content-Type"), err)
		}
		if status != tt.status || a.Code != tt.code || !strings.Contains(a.Error, tt.says) {
			t.Errorf("%s: %d %+v; want %d, code %s, saying %q", tt.name, status, a, tt.status, tt.code, tt.says)
		}
	}
	out := logs.String()
	for _, want := range []string{`"msg":"webhook refused"`, `"source":"stripe"`, `"code":"stale"`, `"reason":"ingress: timestamp outside the tolerance: signed 10m1s ago`, `"remote":"127.0.0.1:`, `"source":"unknown"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the debug log lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "evt_1NG8Du2eZvKYlo2CUI79vXWy") || strings.Contains(out, secrets["STRIPE_SECRET"]) {
		t.Errorf("the log holds the body or the secret:\n%s", out)
	}
}

// TestUnsetSecretReportedAtStart: a source whose secret is not set is
// reported when the ingress is made, before any request, naming the
// variable and never a value.
func TestUnsetSecretReportedAtStart(t *testing.T) {
	e := newEnv(t, nil)
	var logs lockedBuffer
	if _, err := ingress.New(e.options(ingress.Options{JetStream: e.js, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Getenv: func(k string) string { return secrets[k] }})); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); !strings.Contains(out, "webhook source has no secret") || !strings.Contains(out, "source=unset") || !strings.Contains(out, "NOT_SET_ANYWHERE") {
		t.Errorf("at start the log says:\n%s\nwant the unset source reported, naming its variable", out)
	}
	got := ingress.CheckSecrets(e.options(ingress.Options{Getenv: func(k string) string { return secrets[k] }, ReadFile: os.ReadFile}))
	if len(got) != 1 || !strings.Contains(got[0], "source unset: environment variable NOT_SET_ANYWHERE is not set") {
		t.Errorf("CheckSecrets = %q; want the unset source, naming its variable", got)
	}
}

// TestCredentialsOnAnySource: token, bearer and basic auth work on any
// source (here GitHub's scheme for ids, checked with a bearer token), and
// a source copies the headers it declares onto the trigger.
func TestCredentialsOnAnySource(t *testing.T) {
	secrets["PROXY_TOKEN"] = "proxy-token"
	e := newEnv(t, func(c *ingress.Options) {
		c.Sources = []spec.Source{{Name: "gh-behind-proxy", Kind: "github", Auth: spec.AuthBearer, SecretEnv: "PROXY_TOKEN",
			Subject: "triggers.webhooks", CopyHeaders: []string{"X-GitHub-Hook-ID"}}}
	})
	body := fixture(t, "github-push.json")
	h := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer proxy-token"},
		"X-Github-Delivery": {"d-1"}, "X-Github-Event": {"push"}, "X-Github-Hook-Id": {"292430182"}}
	if status, _, answer := e.post("gh-behind-proxy", h, body); status != http.StatusOK {
		t.Fatalf("with the bearer token: %d %s", status, answer)
	}
	h.Set("Authorization", "Bearer another")
	if status, _, _ := e.post("gh-behind-proxy", h, body); status != http.StatusUnauthorized {
		t.Errorf("with another token: %d; want 401", status)
	}
	msgs := e.messages()
	if len(msgs) != 1 || msgs[0].Header.Get("X-GitHub-Hook-ID") != "292430182" {
		t.Fatalf("triggers: %d, the copied header %q", len(msgs), msgs[0].Header.Get("X-GitHub-Hook-ID"))
	}
}

// TestSlackHandshakeAndForms: Slack's url_verification is answered with
// its challenge and stores nothing; an interactivity form publishes the
// JSON of its payload field.
func TestSlackHandshakeAndForms(t *testing.T) {
	e := newEnv(t, withPresets)
	hello := fixture(t, "slack-url-verification.json")
	status, _, answer := e.post("slack", signFor(t, "slack", "", hello, e.now, "", ""), hello)
	if status != http.StatusOK || strings.TrimSpace(answer) != `{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}` {
		t.Errorf("url_verification: %d %s; want 200 with the challenge", status, answer)
	}
	forged := bytes.Replace(hello, []byte("3eZb"), []byte("XXXX"), 1)
	if status, _, _ := e.post("slack", signFor(t, "slack", "", hello, e.now, "", ""), forged); status != http.StatusUnauthorized {
		t.Errorf("a forged url_verification: %d; want 401", status)
	}
	form := fixture(t, "slack-interactivity.form")
	if status, _, answer := e.post("slack", signFor(t, "slack", "", form, e.now, "", ""), form); status != http.StatusOK {
		t.Fatalf("interactivity: %d %s", status, answer)
	}
	msgs := e.messages()
	if len(msgs) != 1 {
		t.Fatalf("%d triggers; want the interactivity only", len(msgs))
	}
	var p struct {
		Type    string `json:"type"`
		Actions []struct {
			ActionID string `json:"action_id"`
		} `json:"actions"`
	}
	if err := json.Unmarshal(msgs[0].Data, &p); err != nil || p.Type != "block_actions" || len(p.Actions) != 1 || p.Actions[0].ActionID != "approve_request" {
		t.Errorf("the trigger is %s; want the payload's JSON (%v)", msgs[0].Data, err)
	}
}
