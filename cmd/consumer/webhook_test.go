package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ingress"
	"github.com/oncegate/oncegate/internal/ingress/spec"
	"github.com/oncegate/oncegate/internal/natstest"
)

// The headers `webhook sign` prints are the ones GitHub would send: the
// signature is checked here with crypto/hmac, independently of the
// ingress's code.
func TestWebhookSign(t *testing.T) {
	t.Setenv("GITHUB_WEBHOOK_SECRET", "It's a Secret to Everybody")
	out, stderr, err := runCmd(t, "Hello, World!", "webhook", "sign", "-source", "github", "-id", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	if err != nil {
		t.Fatalf("webhook sign: %v\n%s", err, stderr)
	}
	h := map[string]string{}
	for line := range strings.Lines(out) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok {
			t.Fatalf("line %q is not a header", line)
		}
		h[strings.ToLower(k)] = v
	}
	m := hmac.New(sha256.New, []byte("It's a Secret to Everybody"))
	m.Write([]byte("Hello, World!"))
	if want := "sha256=" + hex.EncodeToString(m.Sum(nil)); h["x-hub-signature-256"] != want {
		t.Errorf("X-Hub-Signature-256 = %q; want %q", h["x-hub-signature-256"], want)
	}
	if h["x-github-delivery"] != "72d3162e-cc78-11e3-81ab-4c9367dc0958" || h["x-github-event"] != "push" || h["content-type"] != "application/json" {
		t.Errorf("headers = %v", h)
	}

	t.Setenv("GITHUB_WEBHOOK_SECRET", "")
	if _, _, err := runCmd(t, "{}", "webhook", "sign", "-source", "github"); err == nil || !strings.Contains(err.Error(), "GITHUB_WEBHOOK_SECRET is not set") {
		t.Errorf("without the secret: %v; want it to name the variable", err)
	}
	if _, _, err := runCmd(t, "{}", "webhook", "sign", "-source", "gitlab"); err == nil || !strings.Contains(err.Error(), "github, alertmanager") {
		t.Errorf("an unknown source: %v; want the sources listed", err)
	}
}

// TestWebhookSignEveryPreset: `webhook sign` signs for a source of every
// preset, and what it prints is accepted by the ingress: the fixture of
// each provider, posted with the printed headers, is stored.
func TestWebhookSignEveryPreset(t *testing.T) {
	fixtures := map[string]string{
		"github": "github-push.json", "stripe": "stripe-event.json", "standard": "standard-event.json", "sentry": "sentry-issue.json",
		"alertmanager": "alertmanager-group.json", "hmac": "stripe-event.json", "gitlab": "gitlab-push.json", "slack": "slack-interactivity.form",
		"shopify": "shopify-order.json", "pagerduty": "pagerduty-incident.json", "linear": "linear-issue.json", "jira": "jira-issue.json",
		"twilio": "twilio-status.form", "grafana": "grafana-alert.json",
	}
	var yaml strings.Builder
	yaml.WriteString("pipelines:\n  - {name: hooks, subject: triggers.webhooks, effect: {sink: jetstream, subject: effects.webhooks}}\ningress:\n  sources:\n")
	for _, k := range spec.Kinds() {
		if _, ok := fixtures[k]; !ok {
			t.Fatalf("no fixture for the %s preset", k)
		}
		secret := "secret-of-" + k
		if k == "standard" {
			secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		}
		env := "SIGN_TEST_" + strings.ToUpper(k)
		t.Setenv(env, secret)
		fmt.Fprintf(&yaml, "    - {name: %s, kind: %s, subject: triggers.webhooks, secret_env: %s, public_url: \"https://hooks.example.com\"}\n", k, k, env)
	}
	file := filepath.Join(t.TempDir(), "oncegate.yaml")
	if err := os.WriteFile(file, []byte(yaml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	ns := natstest.RunServer(t)
	_, js := natstest.Connect(t, ns)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "T", Subjects: []string{"triggers.>"}}); err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	o := app.IngressOptions(&cfg.Ingress)
	o.JetStream, o.Getenv = js, os.Getenv
	o.Now = func() time.Time { return time.UnixMilli(now.Load()) }
	srv, err := ingress.New(o)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	for _, k := range spec.Kinds() {
		body, err := os.ReadFile("../../internal/ingress/testdata/" + fixtures[k])
		if err != nil {
			t.Fatal(err)
		}
		now.Store(time.Now().UnixMilli())
		if k == "linear" {
			now.Store(1796023263000) // the fixture's webhookTimestamp, which Linear signs
		}
		out, stderr, err := runCmd(t, string(body), "webhook", "sign", "-config", file, "-source", k)
		if err != nil {
			t.Errorf("webhook sign -source %s: %v\n%s", k, err, stderr)
			continue
		}
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/hooks/"+k, bytes.NewReader(body))
		for line := range strings.Lines(out) {
			name, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
			if !ok {
				t.Fatalf("webhook sign -source %s printed %q, not a header", k, line)
			}
			req.Header.Add(name, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || bytes.Contains(answer, []byte(`"stored":0`)) {
			t.Errorf("%s: the signed fixture got %d %s; want 200, stored", k, resp.StatusCode, answer)
		}
	}
}
