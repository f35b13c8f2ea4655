//go:build !amd64 || !linux || purego || oncegate_nocounter

// No time-stamp counter: off amd64 Linux, in purego builds, and in
// builds with -tags oncegate_nocounter, which keep every window on the
// monotonic clock (bench/window builds so to measure what the counter is
// worth).

package window

const hasCounter = false

func readCounter() uint64 { return 0 }

func kernelKeepsTimeWithCounter() bool { return false }
