//go:build !unix

package natsrun

import "os"

// lockDir does nothing where flock is not available: two servers on one
// store directory are not detected there.
func lockDir(dir string) (*os.File, error) { return nil, nil }
