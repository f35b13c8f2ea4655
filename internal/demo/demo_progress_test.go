package demo

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/logbuf"
)

// TestDemoProgress: after a quiet spell the demo prints where it is; a
// line of its own restarts the spell; nothing is printed after Stop.
func TestDemoProgress(t *testing.T) {
	var out logbuf.Buffer
	const quiet = 60 * time.Millisecond
	p := startDemoProgress(&out, quiet)
	p.total.Store(10)
	p.setPhase("publishing")
	p.published.Add(3)
	fmt.Fprintln(p, "publishing 10 triggers")

	waitOutput := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the output after 10s:\n%s", want, out.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitOutput("publishing: 3 of 10 triggers published")
	p.setPhase("settling")
	p.unsettled.Store(4)
	waitOutput("settling: 4 triggers not yet acked")
	p.Stop()
	p.Stop() // again: harmless

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if lines[0] != "publishing 10 triggers" {
		t.Errorf("first line %q; want the demo's own", lines[0])
	}
	// Each progress line comes a quiet spell after the line before it:
	// never two in one spell.
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l, "  ... ") {
			t.Errorf("line %q; want a progress line", l)
		}
	}
	// Stop returns once the goroutine that prints progress has ended:
	// nothing can come after it.
	select {
	case <-p.done:
	default:
		t.Errorf("Stop returned with the progress goroutine running")
	}
}
