package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

func runCmd(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), err
}

func TestKeyCommand(t *testing.T) {
	args := []string{"key", "-pipeline", "alerts", "-step", "open-incident", "-fields", "/alert/fingerprint", "-version", "/alert/occurrence"}
	keys := map[string]bool{}
	for _, f := range []string{"alert.json", "alert-retry.json"} {
		payload, err := os.ReadFile("../../examples/" + f)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := runCmd(t, string(payload), args...)
		if err != nil {
			t.Fatalf("consumer %s < %s: %v", strings.Join(args, " "), f, err)
		}
		for _, line := range strings.Split(out, "\n") {
			if k, ok := strings.CutPrefix(line, "key:"); ok {
				keys[strings.TrimSpace(k)] = true
			}
		}
	}
	if len(keys) != 1 {
		t.Errorf("the alert and its retry gave keys %v; want one key", keys)
	}
}

func TestKeyCommandErrors(t *testing.T) {
	for _, tt := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"duplicate member", `{"a":1,"a":2}`, []string{"key"}, "duplicate object member name"},
		{"not json", `alert!`, []string{"key"}, "canon:"},
		{"oversized", `{"a":"` + strings.Repeat("x", 2000) + `"}`, []string{"key", "-max-bytes", "1000"}, "too large"},
		{"missing field", `{"alert":{"occurrence":1}}`, []string{"key", "-fields", "/alert/id"}, "/alert/id"},
		{"run scope without run", `{}`, []string{"key", "-scope", "run"}, "run id"},
		{"bad scope", `{}`, []string{"key", "-scope", "forever"}, "-scope"},
		{"unknown command", ``, []string{"frobnicate"}, "unknown command"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCmd(t, tt.stdin, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("consumer %v: error = %v; want it to mention %q", tt.args, err, tt.want)
			}
		})
	}
}

// TestVersionCommand: "consumer version" and "consumer -version" print the
// build's version, commit and Go version.
func TestVersionCommand(t *testing.T) {
	for _, arg := range []string{"version", "-version", "--version"} {
		out, _, err := runCmd(t, "", arg)
		if err != nil || !strings.HasPrefix(out, "oncegate ") || !strings.Contains(out, runtime.Version()) {
			t.Errorf("consumer %s = %q, %v; want the version line", arg, out, err)
		}
	}
}

// TestBadFlagNamesTheFlag: a bad flag value is blamed on the flag, not on
// the file or the built-in defaults.
func TestBadFlagNamesTheFlag(t *testing.T) {
	for _, args := range [][]string{
		{"run", "-log-level", "loud"},
		{"run", "-log-format", "xml"},
		{"run", "-metrics", "not an address"},
		{"run", "-listen", "nowhere"},
	} {
		_, _, err := runCmd(t, "", args...)
		if err == nil || !strings.Contains(err.Error(), "flag "+args[1]) || strings.Contains(err.Error(), "built-in default") {
			t.Errorf("consumer %s = %v; want an error naming flag %s", strings.Join(args, " "), err, args[1])
		}
	}
}

// TestHelpAndUsage: help is asked for and given (exit 0), everywhere the
// same way; a command line that does not parse is a usage error (exit 2)
// with a message.
func TestHelpAndUsage(t *testing.T) {
	var stdout, stderr strings.Builder
	cases := []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		{[]string{"help", "run"}, 0, "usage: consumer run"},
		{[]string{"run", "-h"}, 0, "usage: consumer run"},
		{[]string{"demo", "-h"}, 0, "usage: consumer demo"},
		{[]string{"config", "-h"}, 0, "usage: consumer config check"},
		{[]string{"help"}, 0, "commands:"},
		{[]string{}, 2, "a command is required"},
		{[]string{"nosuch"}, 2, `unknown command "nosuch"`},
		{[]string{"config", "lint", "x"}, 2, `unknown subcommand "lint"`},
		{[]string{"demo", "-alerts", "-5"}, 2, "must not be negative"},
		{[]string{"run", "-nosuchflag"}, 2, "flag provided but not defined"},
		{[]string{"run", "extra"}, 2, "unexpected argument"},
	}
	for _, tc := range cases {
		stdout.Reset()
		stderr.Reset()
		err := run(context.Background(), tc.args, strings.NewReader(""), &stdout, &stderr)
		code := exitCode(err, &stderr)
		if code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.want) {
			t.Errorf("consumer %s: exit %d (%v), output %q; want exit %d and %q", strings.Join(tc.args, " "), code, err, stdout.String()+stderr.String(), tc.code, tc.want)
		}
	}
}

// TestDemoReportAddsUp: the demo's rows add up. The duplicate rows add up
// to their total, the triggers published to NATS and those that came
// through the ingress to the triggers in, and the triggers in, with those
// a redrive republished, to the unique intents, the duplicates suppressed
// and the dead letters: each trigger is one of the three.
func TestDemoReportAddsUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo")
	}
	out, _, err := runCmd(t, "", "demo", "-alerts", "20", "-webhooks", "10", "-seed", "7")
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	field := func(label string) int {
		for _, line := range strings.Split(out, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), label); ok {
				var n int
				if _, err := fmt.Sscan(rest, &n); err == nil {
					return n
				}
			}
		}
		t.Fatalf("no %q in the report:\n%s", label, out)
		return 0
	}
	total := field("duplicate triggers suppressed")
	sum := field("by the trigger stream (Nats-Msg-Id)") + field("by the in-memory window") + field("by the durable ledger")
	if total != sum || total == 0 {
		t.Errorf("duplicate triggers suppressed %d; its rows add up to %d", total, sum)
	}
	in, nats, ingress := field("triggers in"), field("published to NATS"), field("through the webhook ingress")
	if in != nats+ingress || ingress == 0 {
		t.Errorf("triggers in %d; published to NATS %d and through the ingress %d add up to %d", in, nats, ingress, nats+ingress)
	}
	redriven, unique, dead := field("redriven after the fix"), field("unique intents"), field("dead letters")
	if in+redriven != unique+total+dead {
		t.Errorf("triggers in %d + redriven %d = %d; unique intents %d + suppressed %d + dead letters %d = %d",
			in, redriven, in+redriven, unique, total, dead, unique+total+dead)
	}
}

// TestKeyCommandUsesConfig checks that consumer key derives the key of a
// pipeline the configuration has: by default the built-in configuration's
// first pipeline (alerts), the same key the consumer gives the trigger;
// with -config, that file's pipelines; a pipeline the configuration lacks
// is an error that names those it has.
func TestKeyCommandUsesConfig(t *testing.T) {
	payload, err := os.ReadFile("../../examples/alert.json")
	if err != nil {
		t.Fatal(err)
	}
	keyOf := func(out string) string {
		for _, line := range strings.Split(out, "\n") {
			if k, ok := strings.CutPrefix(line, "key:"); ok {
				return strings.TrimSpace(k)
			}
		}
		t.Fatalf("no key line in %q", out)
		return ""
	}
	wantKey := func(cfg *config.Config, name string) string {
		for _, p := range cfg.Pipelines {
			if p.Name == name {
				k, err := dedupe.NewKeyer(consumer.KeySpec(&p))
				if err != nil {
					t.Fatal(err)
				}
				in, err := k.Intent(payload)
				if err != nil {
					t.Fatal(err)
				}
				return in.Key.String()
			}
		}
		t.Fatalf("no pipeline %s", name)
		return ""
	}

	out, _, err := runCmd(t, string(payload), "key")
	if err != nil {
		t.Fatalf("consumer key: %v", err)
	}
	if got, want := keyOf(out), wantKey(config.Default(), "alerts"); got != want {
		t.Errorf("consumer key < alert.json = %s; want %s, the built-in alerts pipeline's key", got, want)
	}

	file := filepath.Join(t.TempDir(), "oncegate.yaml")
	yaml := "pipelines:\n  - name: orders\n    subject: triggers.orders\n    key:\n      fields: [/alert/labels/alertname]\n    effect:\n      sink: jetstream\n      subject: effects.orders\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err = runCmd(t, string(payload), "key", "-config", file)
	if err != nil {
		t.Fatalf("consumer key -config: %v", err)
	}
	if got, want := keyOf(out), wantKey(cfg, "orders"); got != want {
		t.Errorf("consumer key -config %s = %s; want %s, the orders pipeline's key", file, got, want)
	}
	if !strings.Contains(out, "pipeline:    orders (step gate)") {
		t.Errorf("consumer key -config output %q; want it to name the orders pipeline", out)
	}

	_, _, err = runCmd(t, string(payload), "key", "-config", file, "-pipeline", "alerts")
	if err == nil || !strings.Contains(err.Error(), `no pipeline "alerts"`) || !strings.Contains(err.Error(), "orders") {
		t.Errorf("consumer key -pipeline alerts with a file of orders only: %v; want an error naming orders", err)
	}
}
