//go:build unix

// Package dirlock tells whether another process holds a data directory,
// the way Badger locks it (an exclusive flock on the directory), so that
// callers can say so with a typed error instead of reading Badger's text.
package dirlock

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Held reports whether another process holds the lock Badger takes on
// dir. It is false if dir cannot be opened.
func Held(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return false
	}
	return errors.Is(err, unix.EWOULDBLOCK)
}
