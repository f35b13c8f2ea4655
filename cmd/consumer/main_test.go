package main

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
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
		{"missing field", `{"a":1}`, []string{"key", "-fields", "/alert/id"}, "/alert/id"},
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
