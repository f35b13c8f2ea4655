//go:build !unix

package dedupe

// dirLocked cannot tell on this platform.
func dirLocked(string) bool { return false }
