package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/config"
)

func TestConfigCheck(t *testing.T) {
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
