package config

import (
	"strings"
	"testing"
)

// TestExplainHidesSecrets sets canary secrets everywhere a secret can come
// from and checks that Explain prints none of them, only where they come
// from.
func TestExplainHidesSecrets(t *testing.T) {
	const canary = "CANARY-7f3a9c"
	doc := `nats:
  url: nats://nats.internal:4222
  user: oncegate
  password_file: /run/secrets/nats-password
  tls: {ca_file: /etc/ca.pem, cert_file: /etc/c.pem, key_file: /etc/k.pem}
llm:
  base_url: https://api.example/v1?api-key=` + canary + `
  api_key_env: MODEL_KEY
pipelines:
  - name: tickets
    subject: triggers.tickets
    step: {name: draft, prompt: "{{.issue.title}}"}
    effect:
      sink: http
      url: https://tickets.example/api?token=` + canary + `
      headers_env: {Authorization: TICKETS_AUTH}
      class: one-shot
      delay: 5m
      approval_subject: approvals.tickets
`
	env := []string{
		"ONCEGATE_NATS_PASSWORD=" + canary,
		"ONCEGATE_NATS_TOKEN=" + canary,
		"MODEL_KEY=" + canary,
		"OPENAI_API_KEY=" + canary,
		"TICKETS_AUTH=Bearer " + canary,
	}
	c, err := ParseEnv([]byte(doc), "secrets.yaml", env)
	if err != nil {
		t.Fatalf("ParseEnv error = %v", err)
	}
	var b strings.Builder
	if err := c.Explain(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, canary) {
		t.Fatalf("Explain printed a secret:\n%s", out)
	}
	for _, want := range []string{
		"password from file /run/secrets/nats-password", "$MODEL_KEY", "header Authorization from $TICKETS_AUTH",
		"https://tickets.example/api?token=REDACTED", "one-shot (through the ledger's outbox)", "approval on approvals.tickets",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Explain output lacks %q:\n%s", want, out)
		}
	}
}

func TestExplainFlowAndDefaults(t *testing.T) {
	doc := `ledger:
  retention: 240h
pipelines:
  - name: alerts
    subject: triggers.alerts
    key: {fields: [/alert/fingerprint], version: /alert/occurrence}
    step: {name: triage, prompt: "{{.alert}}", model: gpt-4.1}
    effect: {sink: jetstream, subject: effects.alerts}
    backoff: [10s, 1m]
    max_deliver: 4
  - name: fast
    subject: triggers.fast
    mode: gate-window
    effect: {sink: jetstream, subject: effects.fast}
`
	c, err := ParseEnv([]byte(doc), "flow.yaml", []string{"ONCEGATE_LOG_LEVEL=debug"})
	if err != nil {
		t.Fatalf("ParseEnv error = %v", err)
	}
	var b strings.Builder
	if err := c.Explain(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Oncegate configuration (flow.yaml)",
		"retention 240h;",     // set in the file: no mark
		"lease 30s (default)", // not set: marked
		"level debug",         // set by the environment: no mark
		"embedded server with JetStream on 127.0.0.1:4222 (default)",
		"pipeline alerts: mode full (default)",
		"fields /alert/fingerprint; version /alert/occurrence",
		"triage on model gpt-4.1;",
		"jetstream publish to effects.alerts with Nats-Msg-Id = intent key",
		"ack_wait 10s (default)", // derived from the backoff
		"backoff 10s, 1m (the last repeats)",
		"redelivery horizon 3m30s", // 10s + 1m × 3
		"dead letter to oncegate.dead.alerts",
		"pipeline fast: mode gate-window",
		"none: mode gate-window",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Explain output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "level debug (default)") || strings.Contains(out, "retention 240h (default)") {
		t.Errorf("Explain marks a value set in the file or environment as a default:\n%s", out)
	}
	// The flow is in order.
	sec := out[strings.Index(out, "pipeline alerts"):]
	last := -1
	for _, step := range []string{"1 subject", "2 key", "3 window", "4 ledger", "5 step", "6 effect", "7 ack", "then"} {
		i := strings.Index(sec, step)
		if i < last {
			t.Errorf("Explain: %q out of order", step)
		}
		last = i
	}
}
