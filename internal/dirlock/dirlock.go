package dirlock

import (
	"fmt"
	"os"
)

// HeldError is Lock's error when another holder has the lock: a process
// whose id the lock file names (PID, 0 if unknown), or another holder in
// this process.
type HeldError struct {
	Dir string
	PID int
}

// Holder names who holds the lock: "another process (pid N)", "another
// process", or "another holder in this process".
func (e *HeldError) Holder() string {
	switch {
	case e.PID == os.Getpid():
		return "another holder in this process"
	case e.PID > 0:
		return fmt.Sprintf("another process (pid %d)", e.PID)
	}
	return "another process"
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("dirlock: %s holds %s", e.Holder(), e.Dir)
}
