//go:build unix

package badgerstore_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
)

// TestOpenBadgerLocked: a directory another process holds is refused with
// ErrLocked. The holder is a child process, as it would be in production.
func TestOpenBadgerLocked(t *testing.T) {
	if os.Getenv("ONCEGATE_HOLD_BADGER") != "" {
		db, err := badgerstore.Open(os.Getenv("ONCEGATE_HOLD_BADGER"), badgerstore.OpenOptions{})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("holding")
		os.Stdin.Read(make([]byte, 1)) // until the parent closes stdin
		db.Close()
		os.Exit(0)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenBadgerLocked$")
	cmd.Env = append(os.Environ(), "ONCEGATE_HOLD_BADGER="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "holding\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	db, err := badgerstore.Open(dir, badgerstore.OpenOptions{})
	if err == nil {
		db.Close()
		t.Fatal("OpenBadger opened a directory another process holds")
	}
	if !errors.Is(err, badgerstore.ErrLocked) {
		t.Errorf("OpenBadger = %v; want ErrLocked", err)
	}
}
