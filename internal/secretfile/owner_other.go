//go:build !unix

package secretfile

import "io/fs"

// fileOwner cannot tell on this platform: files have no Unix owner.
func fileOwner(fs.FileInfo) (int, bool) { return 0, false }
