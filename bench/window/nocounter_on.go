//go:build oncegate_nocounter || purego

package main

// noCounterBuild is true: windows here read the monotonic clock.
const noCounterBuild = true
