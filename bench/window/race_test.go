//go:build race

package main

// raceOn reports whether the race detector is on: tests do less under it.
const raceOn = true
