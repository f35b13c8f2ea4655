package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
)

// command matches a `consumer …` command quoted in a runbook.
var command = regexp.MustCompile("`consumer ([^`]+)`")

// runbookVars stand in for the alert's labels in a runbook's command.
var runbookVars = strings.NewReplacer("{{ $labels.pipeline }}", "alerts", "{{ $labels.source }}", "github", "{{ $labels.reason }}", "exhausted")

// TestRunbookCommands: every consumer command that the alert rules and
// the dashboard tell an operator to run works: run as written (labels
// filled in, "< payload.json" fed a webhook payload) against a fresh data
// directory with the built-in configuration, it succeeds.
func TestRunbookCommands(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, config.EnvPrefix) || strings.HasPrefix(k, "NATS_") {
			t.Setenv(k, v)
			os.Unsetenv(k)
		}
	}
	dir := t.TempDir()
	t.Setenv("ONCEGATE_DATA_DIR", dir)
	// A data directory as a consumer leaves it: its Badger ledger.
	cfg, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	db, err := badgerstore.Open(cfg.BadgerDir(), badgerstore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GITHUB_WEBHOOK_SECRET", "runbook-secret")
	// The built-in configuration stands for the operator's, whose model
	// steps have a model: here the stand-in, asked for by name.
	t.Setenv("ONCEGATE_LLM_STANDIN", "true")
	payload, err := os.ReadFile(filepath.Join(repoRoot, "examples", "github-push.json"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, file := range []string{"deploy/oncegate.rules.yml", "deploy/grafana/oncegate.json"} {
		data, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range command.FindAllStringSubmatch(string(data), -1) {
			line := runbookVars.Replace(m[1])
			if seen[line] || strings.Contains(line, "SEQ") {
				// SEQ is a dead letter's sequence, from `consumer dead`'s
				// list: a fresh directory has none (TestRedriveCommand
				// shows one).
				continue
			}
			seen[line] = true
			args, stdin := strings.Fields(line), []byte(nil)
			if i := strings.Index(line, "<"); i >= 0 {
				args, stdin = strings.Fields(line[:i]), payload
			}
			t.Run(line, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				if err := run(context.Background(), args, bytes.NewReader(stdin), &stdout, &stderr); err != nil {
					t.Errorf("%s: consumer %s: %v\n%s", file, line, err, stderr.String())
				}
			})
		}
	}
	if len(seen) == 0 {
		t.Fatal("no consumer command in the runbooks")
	}
}
