//go:build !race

package dedupe_test

const raceEnabled = false
