package dedupe_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsStayLight checks that a user who imports the keys and the
// ledger contract (this package), or only the window, does not pull in a
// store: no Badger, no NATS, no OpenTelemetry, no protobuf.
func TestImportsStayLight(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list dependencies with")
	}
	heavy := []string{"github.com/dgraph-io/", "github.com/nats-io/", "go.opentelemetry.io/", "google.golang.org/protobuf"}
	for _, pkg := range []string{".", "./window"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, h := range heavy {
				if strings.HasPrefix(dep, h) {
					t.Errorf("go list -deps %s includes %s", pkg, dep)
				}
			}
		}
	}
}
