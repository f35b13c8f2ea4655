// Package windowclock lets Oncegate's benchmarks choose and see the clock of
// a window (package window), which the window's public API leaves to the
// window: bench/window compares the window on the CPU's time-stamp counter
// with the window on the monotonic clock.
package windowclock

import "sync/atomic"

// NoCounter, when set, keeps the windows made after it on the monotonic
// clock (time.Since) where they would read the CPU's time-stamp counter.
var NoCounter atomic.Bool

// Source names the clock a *window.Window reads: "counter", "monotonic" or
// "option" (Options.Now). Package window sets it.
var Source func(w any) string
