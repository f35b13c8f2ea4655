//go:build unix

// Package dirlock holds and probes the flock-based locks that keep two
// processes off one data directory: Lock takes one on a lock file (the
// embedded NATS server's store), and Held tells whether another process
// holds the lock Badger takes on its directory, so that callers can say so
// with a typed error instead of reading Badger's text.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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

// Lock takes an exclusive, non-blocking flock on the file name in dir,
// creating it, and writes the process id into it. Closing the returned
// file releases the lock, as does the kernel when the process dies, so a
// crash leaves no stale lock. Each call opens the file anew, so two holders
// in one process exclude each other too. When another holder has the lock
// the error is a *HeldError.
func Lock(dir, name string) (*os.File, error) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("dirlock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			he := &HeldError{Dir: dir}
			if b, err := os.ReadFile(path); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
					he.PID = pid
				}
			}
			return nil, he
		}
		return nil, fmt.Errorf("dirlock: locking %s: %w", path, err)
	}
	// The pid is for HeldError; failing to write it is harmless.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
