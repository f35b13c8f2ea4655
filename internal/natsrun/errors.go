package natsrun

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"
)

// ErrNotLoopback is returned by StartEmbedded when the listen address is
// not a loopback address. The embedded server has no authentication, so it
// listens on 127.0.0.1, ::1 or localhost only.
var ErrNotLoopback = errors.New("natsrun: embedded server listens on loopback only")

// ErrStoreInUse is returned by StartEmbedded when another embedded server,
// in this process or another, holds the lock of the store directory.
var ErrStoreInUse = errors.New("natsrun: store directory in use")

// NotReadyError is returned by StartEmbedded when the embedded server
// could not start (a port already taken, a store that fails to recover) or
// did not accept connections within Timeout.
type NotReadyError struct {
	// Listen is the address the server was to listen on.
	Listen string
	// Timeout is how long StartEmbedded waited.
	Timeout time.Duration
	// Reason is what the server reported, or that it timed out.
	Reason string
}

func (e *NotReadyError) Error() string {
	return fmt.Sprintf("natsrun: embedded server on %s not ready: %s", e.Listen, e.Reason)
}

// FileError is returned by Connect when a file the configuration names (a
// credentials, nkey seed, password, token or TLS file) is missing,
// unreadable, empty or malformed, or when a secret one of them (all but
// the TLS CA and certificate files) is open to others, as package
// secretfile's rule says (errors.Is(err, secretfile.ErrMode)). Its text names the file and never holds
// the file's content. Err is the cause: errors.Is(err, fs.ErrNotExist)
// reports a missing file.
type FileError struct {
	// What says which file: "password file", "TLS CA file", ...
	What string
	// Path is the file's path as configured.
	Path string
	// Err is the cause.
	Err error
}

func (e *FileError) Error() string {
	cause := e.Err
	var pe *fs.PathError
	switch {
	case errors.As(cause, &pe):
		cause = pe.Err // the path is already in the message
	case strings.Contains(cause.Error(), e.Path):
		// secretfile's refusals name the file and the fix.
		return fmt.Sprintf("natsrun: %s: %v", e.What, cause)
	}
	return fmt.Sprintf("natsrun: %s %s: %v", e.What, e.Path, cause)
}

func (e *FileError) Unwrap() error { return e.Err }
