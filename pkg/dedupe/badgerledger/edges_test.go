package badgerledger_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
)

// The tests in this file try Ledger.Do at its edges, as a Go user would
// (issue 21); each failed before its fix.

func open(t *testing.T) *badgerledger.Ledger {
	t.Helper()
	l, err := badgerledger.Open(t.TempDir(), badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestDoZeroKey: the zero Key names nothing (an unset key would gate all
// work on one key); Do once ran it. It is refused with ErrInvalidKey, and
// the work does not run.
func TestDoZeroKey(t *testing.T) {
	l := open(t)
	_, ran, err := l.Do(context.Background(), dedupe.Intent{Key: dedupe.Key{}}, func(context.Context) (dedupe.Result, error) {
		t.Error("the work ran under the zero key")
		return dedupe.Result{}, nil
	}, dedupe.DoOptions{})
	if !errors.Is(err, dedupe.ErrInvalidKey) || ran {
		t.Errorf("Do(zero key) = ran %v, %v; want ErrInvalidKey, not run", ran, err)
	}
}

// TestDoResultTooLarge: a result over MaxResultBytes. The work ran, the
// commit failed, Do said ran=false, and every retry ran the effect again.
// Now Do reports ran with ErrResultTooLarge, the work is recorded done
// (with its DownstreamID), and a retry does not run it.
func TestDoResultTooLarge(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	key := dedupe.Key{1}
	runs := 0
	fn := func(context.Context) (dedupe.Result, error) {
		runs++
		return dedupe.Result{DownstreamID: "ch_1", Response: bytes.Repeat([]byte("x"), dedupe.MaxResultBytes+1)}, nil
	}
	res, ran, err := l.Do(ctx, dedupe.Intent{Key: key}, fn, dedupe.DoOptions{})
	if !ran || !errors.Is(err, dedupe.ErrResultTooLarge) || res.DownstreamID != "ch_1" {
		t.Errorf("Do = %+v (%d bytes), ran %v, %v; want ran, ErrResultTooLarge, the result", res.DownstreamID, len(res.Response), ran, err)
	}
	for range 3 {
		res, ran, err = l.Do(ctx, dedupe.Intent{Key: key}, fn, dedupe.DoOptions{})
		if ran || err != nil || res.DownstreamID != "ch_1" || len(res.Response) != 0 {
			t.Errorf("retry Do = %+v (%d bytes), ran %v, %v; want the DownstreamID kept, not run", res.DownstreamID, len(res.Response), ran, err)
		}
	}
	if runs != 1 {
		t.Errorf("the work ran %d times; want once", runs)
	}
}

// TestDoPanic: a panic in the work left the claim held for the whole lease
// (30s by default), so a retry waited that long. Do now releases the claim,
// as for an error, and panics again with the same value: a retry runs the
// work at once.
func TestDoPanic(t *testing.T) {
	l := open(t)
	ctx := context.Background()
	key := dedupe.Key{2}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v; want the work's own panic value", r)
			}
		}()
		l.Do(ctx, dedupe.Intent{Key: key}, func(context.Context) (dedupe.Result, error) { panic("boom") }, dedupe.DoOptions{})
		t.Error("Do returned after its work panicked")
	}()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, ran, err := l.Do(rctx, dedupe.Intent{Key: key}, func(ctx context.Context) (dedupe.Result, error) {
		return dedupe.Result{DownstreamID: "retried"}, nil
	}, dedupe.DoOptions{})
	if err != nil || !ran || res.DownstreamID != "retried" {
		t.Errorf("retry after the panic: %+v, ran %v, %v; want it run at once", res, ran, err)
	}
}

const killDirEnv = "ONCEGATE_BADGERLEDGER_KILL_DIR"

// TestDoKillChild is the body of TestDoAfterKill's child process.
func TestDoKillChild(t *testing.T) {
	dir := os.Getenv(killDirEnv)
	if dir == "" {
		t.Skip("run by TestDoAfterKill")
	}
	l, err := badgerledger.Open(dir, badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Do(context.Background(), dedupe.Intent{Key: dedupe.Key{3}}, func(context.Context) (dedupe.Result, error) {
		os.Stdout.WriteString("effect\n")
		syscall.Kill(os.Getpid(), syscall.SIGKILL) // mid-effect
		select {}
	}, dedupe.DoOptions{})
}

// TestDoAfterKill: a process is killed with SIGKILL in the middle of its
// work. The next process on the directory waited out the whole lease (30s
// by default) before it could run the work, though the directory's lock
// proves the holder dead. It now takes the work over at once, and tells
// the work it was taken over.
func TestDoAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDoKillChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), killDirEnv+"="+dir)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	effect := false
	for sc.Scan() {
		effect = effect || strings.TrimSpace(sc.Text()) == "effect"
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !effect || !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: effect %v, %v; want it killed mid-effect", effect, err)
	}
	l, err := badgerledger.Open(dir, badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t0 := time.Now()
	var takenOver bool
	res, ran, err := l.Do(ctx, dedupe.Intent{Key: dedupe.Key{3}}, func(ctx context.Context) (dedupe.Result, error) {
		takenOver = dedupe.TakenOver(ctx)
		return dedupe.Result{DownstreamID: "reconciled"}, nil
	}, dedupe.DoOptions{})
	if err != nil || !ran || res.DownstreamID != "reconciled" {
		t.Fatalf("Do after the kill = %+v, ran %v, %v (after %v); want it run at once", res, ran, err, time.Since(t0))
	}
	if !takenOver {
		t.Error("the work after the kill was not told it took the work over")
	}
}
