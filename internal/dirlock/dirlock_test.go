//go:build unix

package dirlock

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLock checks that a second Lock on one file fails with a HeldError
// naming this process while the first is held, and succeeds once it is
// released; and that Held tells Badger's directory lock apart from none.
func TestLock(t *testing.T) {
	dir := t.TempDir()
	f, err := Lock(dir, "test.lock")
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	_, err = Lock(dir, "test.lock")
	he, ok := errors.AsType[*HeldError](err)
	if !ok {
		t.Fatalf("second Lock error = %v; want a *HeldError", err)
	}
	if he.PID != os.Getpid() || he.Dir != dir || he.Holder() != "another holder in this process" {
		t.Errorf("HeldError = %+v (%q); want pid %d, dir %s, a holder in this process", *he, he.Holder(), os.Getpid(), dir)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f, err = Lock(dir, "test.lock")
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	f.Close()

	if Held(dir) {
		t.Error("Held reports an unlocked directory held")
	}
	if Held(dir + "/missing") {
		t.Error("Held reports a missing directory held")
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if !Held(dir) {
		t.Error("Held reports a directory locked as Badger locks it free")
	}
}
