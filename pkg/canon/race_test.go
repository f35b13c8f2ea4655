//go:build race

package canon

// The race detector makes sync.Pool drop items at random.
func init() { raceEnabled = true }
