//go:build oncegate_nocounter

package window

import (
	"testing"
	"time"
)

// TestNoCounterBuild checks that a build with -tags oncegate_nocounter
// keeps a window on the monotonic clock where it would read the counter.
func TestNoCounterBuild(t *testing.T) {
	if hasCounter {
		t.Fatal("hasCounter is true in an oncegate_nocounter build")
	}
	w, err := New(Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if src := w.clockSource(); src != "monotonic" {
		t.Fatalf("in an oncegate_nocounter build the window reads the %s clock", src)
	}
}
