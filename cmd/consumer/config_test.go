package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/config"
)

func TestConfigCheck(t *testing.T) {
	t.Setenv("ONCEGATE_LLM_STANDIN", "true") // the built-in configuration's triage, offline
	out, _, err := runCmd(t, "", "config", "check", "../../examples/oncegate.yaml")
	if err != nil {
		t.Fatalf("config check examples/oncegate.yaml: %v", err)
	}
	for _, want := range []string{"alerts", "webhooks", "configuration is valid"} {
		if !strings.Contains(out, want) {
			t.Errorf("config check output lacks %q:\n%s", want, out)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("pipelines:\n  - name: alerts\n    subject: triggers.alerts\n    efect: {sink: jetstream}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = runCmd(t, "", "config", "check", bad)
	if !errors.Is(err, config.ErrUnknownKey) || !strings.Contains(err.Error(), ":4:") {
		t.Errorf("config check of a file with a typo: %v; want ErrUnknownKey naming line 4", err)
	}
}

// TestConfigCheckKeyFilePermissions: config check refuses a key file that
// others can read, saying how to fix it.
func TestConfigCheckKeyFilePermissions(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "oncegate.key")
	if err := os.WriteFile(key, make([]byte, 32), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ONCEGATE_ENCRYPTION_KEY_FILE", key)
	t.Setenv("ONCEGATE_LLM_STANDIN", "true")
	_, _, err := runCmd(t, "", "config", "check")
	if err == nil || !strings.Contains(err.Error(), "chmod 600 "+key) {
		t.Errorf("config check with a key file of mode 0644: %v; want a refusal naming chmod 600 %s", err, key)
	}
	if err := os.Chmod(key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCmd(t, "", "config", "check"); err != nil {
		t.Errorf("config check with a key file of mode 0600: %v", err)
	}
}

// TestConfigCheckUnsetWebhookSecret: config check refuses a webhook
// source whose secret is not set, naming its variable, as run does,
// before any request finds it out; marked optional, it is a warning.
func TestConfigCheckUnsetWebhookSecret(t *testing.T) {
	file := filepath.Join(t.TempDir(), "oncegate.yaml")
	if err := os.WriteFile(file, []byte(`
pipelines:
  - {name: hooks, subject: triggers.webhooks, effect: {sink: jetstream, subject: effects.webhooks}}
ingress:
  listen: 127.0.0.1:8089
  sources:
    - {name: gh, kind: github, subject: triggers.webhooks, secret_env: CHECK_UNSET_WEBHOOK_SECRET}
    - {name: lab, kind: gitlab, subject: triggers.webhooks, secret_env: CHECK_SET_WEBHOOK_SECRET}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CHECK_SET_WEBHOOK_SECRET", "set")
	_, _, err := runCmd(t, "", "config", "check", file)
	if err == nil || !strings.Contains(err.Error(), "ingress.sources[gh]: environment variable CHECK_UNSET_WEBHOOK_SECRET is not set") || strings.Contains(err.Error(), "sources[lab]") {
		t.Errorf("config check = %v; want the unset secret of gh alone refused", err)
	}
	t.Setenv("ONCEGATE_INGRESS_SOURCES_GH_OPTIONAL", "true")
	_, stderr, err := runCmd(t, "", "config", "check", file)
	if err != nil {
		t.Fatalf("config check with gh optional: %v", err)
	}
	if !strings.Contains(stderr, "warning: ingress.sources[gh]: environment variable CHECK_UNSET_WEBHOOK_SECRET is not set") || strings.Contains(stderr, "lab") {
		t.Errorf("config check does not warn of the unset secret of gh alone:\n%s", stderr)
	}
}

// TestConfigCheckRefusesUnboundedCondition: config check refuses a
// condition whose worst case grows faster than the trigger (the issue's
// concatenation in a loop, 374 MiB in one evaluation of a 260 KB
// Alertmanager body), naming the key and line; the same condition over one
// member passes.
func TestConfigCheckRefusesUnboundedCondition(t *testing.T) {
	file := filepath.Join(t.TempDir(), "oncegate.yaml")
	write := func(when string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(`
pipelines:
  - name: alerts
    subject: triggers.alerts
    when: '`+when+`'
    effect: {sink: jetstream, subject: effects.alerts}
`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`trigger.alerts.map(a, a.labels.team + trigger.groupLabels.alertname).exists(s, s == "db")`)
	_, _, err := runCmd(t, "", "config", "check", file)
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(fmt.Sprint(err), "pipelines[alerts].when") ||
		!strings.Contains(fmt.Sprint(err), ":5:") || !strings.Contains(fmt.Sprint(err), "grows faster than the trigger") {
		t.Errorf("config check of a condition that concatenates in a loop: %v; want ErrInvalid at pipelines[alerts].when (line 5): grows faster than the trigger", err)
	}
	write(`trigger.alerts.exists(a, a.labels.team == "db")`)
	if _, _, err := runCmd(t, "", "config", "check", file); err != nil {
		t.Errorf("config check of a condition over each alert: %v", err)
	}
}
