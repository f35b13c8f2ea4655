//go:build !race

package dedupe

const raceEnabled = false
