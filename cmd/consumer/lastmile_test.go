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
// Alertmanager recipe: the firing routed by the answer to PagerDuty, the
// resolve to PagerDuty (resolve, same dedup_key) and Slack, without a
// step; no secret printed.
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
		{resolved, []string{"route     resolved → pagerduty + slack", "step      triage skipped", `"event_action":"resolve"`, "REDACTED (the URL in $SLACK_WEBHOOK_URL)", "Resolved: *DiskAlmostFull*"}},
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
