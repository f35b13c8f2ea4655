//go:build !oncegate_nocounter && !purego

package main

// noCounterBuild is false: windows here read the CPU's time-stamp counter
// where window.Options.Now says they do.
const noCounterBuild = false
