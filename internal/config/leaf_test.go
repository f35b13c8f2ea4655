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

// TestConfigIsALeaf checks the other direction: the configuration imports
// none of the runtime packages it configures (the ledger, the dedupe
// keys), so that it only describes and checks; internal/app and the
// consumer translate it into their Options (app.LedgerOptions,
// consumer.KeySpec).
func TestConfigIsALeaf(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list dependencies with")
	}
	const module = "github.com/oncegate/oncegate/"
	out, err := exec.Command("go", "list", "-deps", module+"internal/config").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps internal/config: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, runtime := range []string{"internal/ledger", "pkg/dedupe"} {
			if dep == module+runtime || strings.HasPrefix(dep, module+runtime+"/") {
				t.Errorf("go list -deps internal/config includes %s; translate the configuration in internal/app instead", dep)
			}
		}
	}
}
