package llmcache_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoBadger checks that a program that keeps its cache on JetStream KV
// (or brings its own store) compiles no Badger in: only package
// badgerstore imports it.
func TestNoBadger(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list dependencies with")
	}
	args := []string{"list", "-deps", ".", "./jsstore", "./ratelimit", "./llmtest"}
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/dgraph-io/") {
			t.Errorf("go %s includes %s", strings.Join(args, " "), dep)
		}
	}
}
