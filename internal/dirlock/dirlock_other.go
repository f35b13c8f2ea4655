//go:build !unix

package dirlock

import "os"

// Held cannot tell on this platform: it reports false.
func Held(string) bool { return false }

// Lock does nothing where flock is not available: it returns a nil file and
// no error, and two holders of one directory are not detected.
func Lock(dir, name string) (*os.File, error) { return nil, nil }
