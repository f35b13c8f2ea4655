package main

import (
	"strings"
	"testing"
)

// TestConfigCheckSecrets: an effect secret left unset is the same error
// for config check as for run, which refuses to start.
func TestConfigCheckSecrets(t *testing.T) {
	t.Setenv("ALERTMANAGER_WEBHOOK_TOKEN", "t0ken")
	t.Setenv("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T0/B0/s3cr3tpath0123456789")
	t.Setenv("ONCEGATE_LLM_STANDIN", "true")
	const want = "pipelines[alerts].effects[pagerduty].routing_key_env: environment variable PAGERDUTY_ROUTING_KEY is not set"
	_, _, err := runCmd(t, "", "config", "check", "../../examples/recipes/alertmanager.yaml")
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("config check = %v; want %q", err, want)
	}
	_, _, err = runCmd(t, "", "run", "-config", "../../examples/recipes/alertmanager.yaml", "-data", t.TempDir(), "-listen", "127.0.0.1:0", "-metrics", "off")
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("run = %v; want %q", err, want)
	}
}

// TestConfigCheckSample shows a firing and its resolve of the
// Alertmanager recipe: the firing routed by the answer to PagerDuty, with
// the triage's severity; the resolve where its firing went (each route it
// may have taken: PagerDuty's resolve with the same dedup_key, or a Slack
// note), without a step; no secret printed.
func TestConfigCheckSample(t *testing.T) {
	const routingKey, slackURL = "R0123456789abcdef0123456789abcde", "https://hooks.slack.com/services/T0/B0/s3cr3tpath0123456789"
	t.Setenv("PAGERDUTY_ROUTING_KEY", routingKey)
	t.Setenv("SLACK_WEBHOOK_URL", slackURL)
	t.Setenv("ALERTMANAGER_WEBHOOK_TOKEN", "t0ken")
	t.Setenv("ONCEGATE_LLM_STANDIN", "true")
	firing, _, err := runCmd(t, "", "config", "check", "../../examples/recipes/alertmanager.yaml",
		"-sample", "../../examples/recipes/alertmanager-firing.json", "-answer", "../../examples/recipes/alertmanager-answer.json")
	if err != nil {
		t.Fatalf("config check -sample firing: %v\n%s", err, firing)
	}
	resolved, _, err := runCmd(t, "", "config", "check", "../../examples/recipes/alertmanager.yaml",
		"-sample", "../../examples/recipes/alertmanager-resolved.json")
	if err != nil {
		t.Fatalf("config check -sample resolved: %v\n%s", err, resolved)
	}
	for _, tt := range []struct {
		out  string
		want []string
	}{
		{firing, []string{"route     critical → pagerduty", `"event_action":"trigger"`, `"severity":"critical"`, "Alert: DiskAlmostFull on db-2:9100", "configuration is valid"}},
		{resolved, []string{"a resolve goes where its firing went", "if its firing took critical → pagerduty", "if its firing took rest → slack", "step      triage skipped", `"event_action":"resolve"`, "REDACTED (the URL in $SLACK_WEBHOOK_URL)", "Resolved: *DiskAlmostFull*"}},
	} {
		for _, w := range tt.want {
			if !strings.Contains(tt.out, w) {
				t.Errorf("output lacks %q:\n%s", w, tt.out)
			}
		}
		if strings.Contains(tt.out, routingKey) || strings.Contains(tt.out, "s3cr3tpath") {
			t.Errorf("output shows a secret:\n%s", tt.out)
		}
	}
	// The firing and its resolve share PagerDuty's dedup_key.
	dedup := func(out string) string {
		_, after, _ := strings.Cut(out, `"dedup_key":"`)
		key, _, _ := strings.Cut(after, `"`)
		return key
	}
	if a, b := dedup(firing), dedup(resolved); a == "" || a != b {
		t.Errorf("dedup_key of the firing %q, of the resolve %q; want the same", a, b)
	}
}

// TestConfigCheckAlertmanagerNotification: -sample takes what
// Alertmanager really posts — a webhook body with several alerts of one
// group, firing and resolved — and shows each alert's trigger as the
// ingress publishes it, with its key and each effect's rendered request.
// The help text names only flags that exist.
func TestConfigCheckAlertmanagerNotification(t *testing.T) {
	t.Setenv("PAGERDUTY_ROUTING_KEY", "R0123456789abcdef0123456789abcde")
	t.Setenv("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T0/B0/s3cr3tpath0123456789")
	t.Setenv("ALERTMANAGER_WEBHOOK_TOKEN", "t0ken")
	t.Setenv("ONCEGATE_LLM_STANDIN", "true")
	out, _, err := runCmd(t, "", "config", "check", "../../examples/recipes/alertmanager.yaml",
		"-sample", "../../examples/recipes/alertmanager-notification.json", "-answer", "../../examples/recipes/alertmanager-answer.json")
	if err != nil {
		t.Fatalf("config check -sample notification: %v\n%s", err, out)
	}
	for _, want := range []string{
		"an Alertmanager notification of 3 alerts",
		"alert 1 of 3", "db-2:9100", "alert 2 of 3", "db-3:9100", "alert 3 of 3", "db-1:9100",
		`"event_action":"trigger"`, `"event_action":"resolve"`, "status resolved",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\npipeline alerts\n"); n != 3 {
		t.Errorf("%d triggers previewed; want 3, one per alert:\n%s", n, out)
	}
	help, _, _ := runCmd(t, "", "config", "check", "-h")
	if strings.Contains(help, "-subject") {
		t.Errorf("config check's help names -subject, which does not exist:\n%s", help)
	}
}
