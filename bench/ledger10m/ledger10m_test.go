package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	maybeChild() // the children the program starts are this binary
	os.Exit(m.Run())
}

// TestShort runs the short form (10⁵ records) and checks that every figure
// is printed; the verdicts are the program's to report, not the test's.
func TestShort(t *testing.T) {
	var out bytes.Buffer
	if _, err := run(&out, []string{"-short"}); err != nil {
		t.Fatalf("run -short: %v\n%s", err, out.String())
	}
	for _, want := range []string{"per record", "p99 ratio", "readiness after a restart", "value-log GC pass", "full compaction"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in the report:\n%s", want, out.String())
		}
	}
}
