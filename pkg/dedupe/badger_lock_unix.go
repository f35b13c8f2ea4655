//go:build unix

package dedupe

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// dirLocked reports whether another process holds the lock Badger takes on
// dir (an exclusive flock on the directory).
func dirLocked(dir string) bool {
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
