//go:build amd64 && linux && !purego && !oncegate_nocounter

package window

import (
	"bytes"
	"os"
)

const hasCounter = true

// readCounter returns the CPU's time-stamp counter (RDTSC). It does not
// wait for earlier instructions, as the fenced read of the vDSO does.
//
//go:noescape
func readCounter() uint64

// kernelKeepsTimeWithCounter reports whether the kernel's clocksource is
// the time-stamp counter: it then found the counter invariant and in step
// on every CPU, and keeps watching it.
func kernelKeepsTimeWithCounter() bool {
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && string(bytes.TrimSpace(b)) == "tsc"
}
