//go:build unix

package natsrun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockDir takes an exclusive, non-blocking flock on dir/lockFile and writes
// the process id into it. The lock is released by closing the file, and by
// the kernel when the process dies, so a crash leaves no stale lock. Each
// call opens the file anew, so two servers in one process exclude each
// other too.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("natsrun: locking store directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			who := "another process"
			if b, err := os.ReadFile(path); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
					who = fmt.Sprintf("another process (pid %d)", pid)
					if pid == os.Getpid() {
						who = "another embedded server in this process"
					}
				}
			}
			return nil, fmt.Errorf("%w: %s uses %s", ErrStoreInUse, who, dir)
		}
		return nil, fmt.Errorf("natsrun: locking store directory %s: %w", dir, err)
	}
	// The pid is for the message above; failing to write it is harmless.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
