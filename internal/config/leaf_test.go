package config_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLowLevelPackagesDoNotImportConfig checks that the configuration
// stays a leaf the low-level packages do not import: the NATS runner, the
// webhook ingress (and its scheme package) and the sinks take their own
// Options, which internal/app fills in from a Config. A package that
// imports config again, directly or through another package, fails here.
func TestLowLevelPackagesDoNotImportConfig(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list dependencies with")
	}
	const (
		module = "github.com/oncegate/oncegate/"
		config = module + "internal/config"
	)
	for _, pkg := range []string{"internal/natsrun", "internal/ingress", "internal/ingress/spec", "internal/sink"} {
		out, err := exec.Command("go", "list", "-deps", module+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == config {
				t.Errorf("go list -deps %s includes %s; give the package its own Options and fill them in in internal/app", pkg, config)
			}
		}
	}
}
