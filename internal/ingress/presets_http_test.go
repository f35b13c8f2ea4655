package ingress_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/ingress"
	"github.com/oncegate/oncegate/internal/ingress/spec"
)

func init() {
	for k, v := range map[string]string{
		"GITLAB_TOKEN":     "gitlab-secret-token",
		"SLACK_SECRET":     "8f742231b10e8888abcd99yyyzzz85a5",
		"SHOPIFY_SECRET":   "shopify-app-client-secret",
		"PAGERDUTY_SECRET": "pagerduty-v3-signing-secret",
		"LINEAR_SECRET":    "lin_wh_signing_secret",
		"JIRA_SECRET":      "jira-admin-webhook-secret",
		"TWILIO_TOKEN":     "12345",
		"GRAFANA_SECRET":   "grafana-hmac-secret",
		"GRAFANA_TOKEN":    "grafana-bearer-token",
	} {
		secrets[k] = v
	}
}

// presetSources are a source of each preset the tests of the built-in
// kinds did not cover, as a user writes them: the kind and a secret.
var presetSources = []spec.Source{
	{Name: "gitlab", Kind: "gitlab", Subject: "triggers.webhooks", SecretEnv: "GITLAB_TOKEN"},
	{Name: "slack", Kind: "slack", Subject: "triggers.webhooks", SecretEnv: "SLACK_SECRET"},
	{Name: "shopify", Kind: "shopify", Subject: "triggers.webhooks", SecretEnv: "SHOPIFY_SECRET"},
	{Name: "pagerduty", Kind: "pagerduty", Subject: "triggers.webhooks", SecretEnv: "PAGERDUTY_SECRET"},
	{Name: "linear", Kind: "linear", Subject: "triggers.webhooks", SecretEnv: "LINEAR_SECRET"},
	{Name: "jira", Kind: "jira", Subject: "triggers.webhooks", SecretEnv: "JIRA_SECRET"},
	{Name: "twilio", Kind: "twilio", Subject: "triggers.webhooks", SecretEnv: "TWILIO_TOKEN", PublicURL: "https://hooks.example.com"},
	{Name: "grafana", Kind: "grafana", Subject: "triggers.alerts", SecretEnv: "GRAFANA_SECRET"},
	{Name: "grafana-ts", Kind: "grafana", Subject: "triggers.alerts", SecretEnv: "GRAFANA_SECRET",
		Signature: spec.Signature{Timestamp: "header:X-Grafana-Alerting-Timestamp"}},
	{Name: "grafana-bearer", Kind: "grafana", Subject: "triggers.alerts", SecretEnv: "GRAFANA_TOKEN", Auth: spec.AuthBearer},
}

func withPresets(c *ingress.Options) {
	c.Sources = append(append([]spec.Source(nil), sources...), presetSources...)
}

func anySource(name string) spec.Source {
	for _, s := range append(append([]spec.Source(nil), sources...), presetSources...) {
		if s.Name == name {
			return s
		}
	}
	panic("no source " + name)
}

// signFor signs body for the named source as its provider would, at at.
func signFor(t *testing.T, name string, secret string, body []byte, at time.Time, id, event string) http.Header {
	t.Helper()
	s := anySource(name)
	if secret == "" {
		secret = secrets[s.SecretEnv]
	}
	h, err := ingress.SignDelivery(s, ingress.Delivery{Secret: []byte(secret), Body: body, Time: at, ID: id, Event: event})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestPresetFixtures sends each provider's documented payload to a source
// of its preset, signed (or authenticated) as the provider does, then:
// the captured request replayed as it was, the body tampered with under
// the captured headers, the payload signed with another secret, and for a
// provider that signs a timestamp, the captured request replayed past the
// tolerance. Each is asserted: stored once; a duplicate, stored nothing;
// refused 401 bad_signature (or, for a provider that authenticates with a
// token and does not sign, taken as another delivery: a token does not
// cover the body); refused 401 bad_signature; refused 401 stale.
func TestPresetFixtures(t *testing.T) {
	tests := []struct {
		source, fixture, id, event string
		// at is when the provider signs, when the fixture carries its own
		// signed timestamp (Linear's webhookTimestamp).
		at          time.Time
		tamper      [2]string // a replacement in the body
		wantN       int       // triggers
		wantEvent   string
		wantID      string // the delivery id of the first trigger
		bound       bool   // Nats-Msg-Id binds the body
		timestamped bool
		unsigned    bool // a token or bearer, no signature
	}{
		{source: "gitlab", fixture: "gitlab-push.json", id: "c3a2f1d4-1b1e-4a8e-9c3f-9b2f0f1d2e3a", tamper: [2]string{"fixed readme", "fixed README"},
			wantN: 1, wantEvent: "push", wantID: "c3a2f1d4-1b1e-4a8e-9c3f-9b2f0f1d2e3a", bound: true, unsigned: true},
		{source: "slack", fixture: "slack-event.json", tamper: [2]string{"pearl", "PEARL"},
			wantN: 1, wantEvent: "app_mention", wantID: "Ev08MFMKH6", timestamped: true},
		{source: "slack", fixture: "slack-interactivity.form", tamper: [2]string{"approve_request", "reject_request"},
			wantN: 1, wantEvent: "block_actions", wantID: "12466734323.1395872398.0c5ad6a2e0b8f4e8b6bf5a9e1d4b0c11", timestamped: true},
		{source: "slack", fixture: "slack-command.form", tamper: [2]string{"roadrunner", "coyote"},
			wantN: 1, wantEvent: "/webhook-collect", wantID: "398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c", timestamped: true},
		{source: "shopify", fixture: "shopify-order.json", id: "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043", event: "orders/create", tamper: [2]string{"403.00", "4.03"},
			wantN: 1, wantEvent: "orders/create", wantID: "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043", bound: true},
		{source: "pagerduty", fixture: "pagerduty-incident.json", tamper: [2]string{"A little bump", "A large bump"},
			wantN: 1, wantEvent: "incident.triggered", wantID: "5ac64822-4adc-4fda-ade0-410becf0de4f"},
		{source: "linear", fixture: "linear-issue.json", id: "5d3e9f6a-2b1c-4d7e-8f9a-0b1c2d3e4f5a", at: time.UnixMilli(1796023263000),
			tamper: [2]string{"Safari", "Firefox"}, wantN: 1, wantEvent: "Issue", wantID: "5d3e9f6a-2b1c-4d7e-8f9a-0b1c2d3e4f5a", bound: true, timestamped: true},
		{source: "jira", fixture: "jira-issue.json", id: "9d5c1e7b-4f21-4c4a-a1e3-2c7b8d9e0f11", tamper: [2]string{"db-2", "db-3"},
			wantN: 1, wantEvent: "jira:issue_created", wantID: "9d5c1e7b-4f21-4c4a-a1e3-2c7b8d9e0f11", bound: true},
		{source: "twilio", fixture: "twilio-status.form", id: "f0c3b5b8-9e5d-4d2b-b0a1-3b1e2c4d5f60", tamper: [2]string{"delivered", "undelivered"},
			wantN: 1, wantEvent: "delivered", wantID: "f0c3b5b8-9e5d-4d2b-b0a1-3b1e2c4d5f60", bound: true},
		{source: "grafana", fixture: "grafana-alert.json", tamper: [2]string{"web-1", "web-9"},
			wantN: 2, wantEvent: "firing", wantID: "0d5c0b7b4a0f2b61/2026-11-29T07:00:00Z/firing"},
		{source: "grafana-ts", fixture: "grafana-alert.json", tamper: [2]string{"web-1", "web-9"},
			wantN: 2, wantEvent: "firing", wantID: "0d5c0b7b4a0f2b61/2026-11-29T07:00:00Z/firing", timestamped: true},
		{source: "grafana-bearer", fixture: "grafana-alert.json", tamper: [2]string{"web-1", "web-9"},
			wantN: 2, wantEvent: "firing", wantID: "0d5c0b7b4a0f2b61/2026-11-29T07:00:00Z/firing", unsigned: true},
		// The built-in kinds, through the same steps.
		{source: "github", fixture: "github-push.json", id: "72d3162e-cc78-11e3-81ab-4c9367dc0958", event: "push", tamper: [2]string{"refs/heads/main", "refs/heads/evil"},
			wantN: 1, wantEvent: "push", wantID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", bound: true},
		{source: "stripe", fixture: "stripe-event.json", tamper: [2]string{"invoice.paid", "invoice.void"},
			wantN: 1, wantEvent: "invoice.paid", wantID: "evt_1NG8Du2eZvKYlo2CUI79vXWy", timestamped: true},
		{source: "svix", fixture: "standard-event.json", id: "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", tamper: [2]string{"contact.created", "contact.deleted"},
			wantN: 1, wantEvent: "contact.created", wantID: "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", timestamped: true},
		{source: "sentry", fixture: "sentry-issue.json", id: "6f4d7b0e-4a1c-4f9e-9a7a-0c2b1f8e5d33", event: "issue", tamper: [2]string{"created", "resolved"},
			wantN: 1, wantEvent: "issue", wantID: "6f4d7b0e-4a1c-4f9e-9a7a-0c2b1f8e5d33", bound: true},
		{source: "alertmanager", fixture: "alertmanager-group.json", tamper: [2]string{"db-2", "db-9"},
			wantN: 2, wantEvent: "firing", wantID: "c1d7b5e2a9f04417/2026-11-29T07:09:03.118Z/firing", unsigned: true},
		{source: "billing", fixture: "stripe-event.json", id: "bill-0001", event: "invoice.paid", tamper: [2]string{"invoice.paid", "invoice.void"},
			wantN: 1, wantEvent: "invoice.paid", wantID: "bill-0001", bound: true},
	}
	for _, tt := range tests {
		t.Run(tt.source+"/"+tt.fixture, func(t *testing.T) {
			e := newEnv(t, withPresets)
			if !tt.at.IsZero() {
				e.now = tt.at.Add(20 * time.Second)
			}
			at := tt.at
			if at.IsZero() {
				at = e.now
			}
			body := fixture(t, tt.fixture)
			h := signFor(t, tt.source, "", body, at, tt.id, tt.event)

			// The delivery.
			status, _, answer := e.post(tt.source, h, body)
			if status != http.StatusOK || !strings.Contains(answer, `"stored":`+strconv.Itoa(tt.wantN)) {
				t.Fatalf("the delivery: %d %s; want 200 with %d stored", status, answer, tt.wantN)
			}
			msgs := e.messages()
			if len(msgs) != tt.wantN {
				t.Fatalf("the stream holds %d triggers; want %d", len(msgs), tt.wantN)
			}
			m := msgs[0]
			if got := m.Header.Get(ingress.HeaderEvent); got != tt.wantEvent {
				t.Errorf("%s = %q; want %q", ingress.HeaderEvent, got, tt.wantEvent)
			}
			if got := m.Header.Get(ingress.HeaderDelivery); got != tt.wantID {
				t.Errorf("%s = %q; want %q", ingress.HeaderDelivery, got, tt.wantID)
			}
			msgID := m.Header.Get(nats.MsgIdHdr)
			wantPrefix := tt.source + ":" + tt.wantID
			if tt.bound {
				wantPrefix += ":"
			}
			if !strings.HasPrefix(msgID, wantPrefix) || !tt.bound && msgID != wantPrefix {
				t.Errorf("Nats-Msg-Id = %q; want %q%s", msgID, wantPrefix, map[bool]string{true: "<digest of the event and body>"}[tt.bound])
			}
			if !json.Valid(m.Data) {
				t.Errorf("the trigger's body is not JSON: %s", m.Data)
			}

			// The captured request, replayed as it was.
			status, _, answer = e.post(tt.source, h, body)
			if status != http.StatusOK || !strings.Contains(answer, `"stored":0,"duplicates":`+strconv.Itoa(tt.wantN)) {
				t.Errorf("the captured request replayed: %d %s; want 200, all duplicates", status, answer)
			}

			// The body tampered with, under the captured headers.
			tampered := bytes.Replace(body, []byte(tt.tamper[0]), []byte(tt.tamper[1]), 1)
			if bytes.Equal(tampered, body) {
				t.Fatalf("the fixture has no %q to tamper with", tt.tamper[0])
			}
			status, _, answer = e.post(tt.source, h, tampered)
			switch {
			case tt.unsigned && status != http.StatusOK:
				t.Errorf("a tampered body under a token: %d %s; want 200 (a token does not cover the body)", status, answer)
			case !tt.unsigned && (status != http.StatusUnauthorized || !strings.Contains(answer, `"code":"bad_signature"`)):
				t.Errorf("a tampered body: %d %s; want 401 bad_signature", status, answer)
			}
			if tt.unsigned && tt.bound && len(e.messages()) != tt.wantN+1 {
				t.Errorf("a tampered body under a token: the stream holds %d triggers; want %d, the tampered body a message of its own", len(e.messages()), tt.wantN+1)
			}

			// Signed with another secret.
			wrong := signFor(t, tt.source, "whsec_c3RyYW5nZXJzIHNlY3JldA==", body, at, tt.id, tt.event)
			status, _, answer = e.post(tt.source, wrong, body)
			if status != http.StatusUnauthorized || !strings.Contains(answer, `"code":"bad_signature"`) {
				t.Errorf("another secret: %d %s; want 401 bad_signature", status, answer)
			}

			// The captured request, replayed past the tolerance.
			if tt.timestamped {
				e.now = at.Add(e.cfg.Tolerance + time.Minute)
				status, _, answer = e.post(tt.source, h, body)
				if status != http.StatusUnauthorized || !strings.Contains(answer, `"code":"stale"`) || !strings.Contains(answer, " ago") {
					t.Errorf("replayed past the tolerance: %d %s; want 401 stale, saying how long ago", status, answer)
				}
			}
		})
	}
}
