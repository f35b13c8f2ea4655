package history_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/ledger/history"
)

// TestKilledMidOperation kills a real process in the middle of a recorded
// Commit (after the store has done it, before the response is recorded),
// then has a second process append to the same history: the Commit reads
// back as invoked and unanswered, everything else as it happened.
func TestKilledMidOperation(t *testing.T) {
	if dir := os.Getenv("HISTORY_TEST_CHILD"); dir != "" {
		child(dir, os.Getenv("HISTORY_TEST_STEP"))
		return
	}
	dir := t.TempDir()
	for _, step := range []string{"first", "second"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKilledMidOperation$")
		cmd.Env = append(os.Environ(), "HISTORY_TEST_CHILD="+dir, "HISTORY_TEST_STEP="+step)
		out, err := cmd.CombinedOutput()
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		switch {
		case step == "first" && !(ws.Signaled() && ws.Signal() == syscall.SIGKILL):
			t.Fatalf("the first process was not killed: %v\n%s", err, out)
		case step == "second" && err != nil:
			t.Fatalf("the second process: %v\n%s", err, out)
		}
	}
	ops, st, err := history.ReadFile(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Processes != 2 || st.Ops != 4 || st.Unanswered != 1 || st.Torn != 0 {
		t.Fatalf("stats %+v; want 2 processes, 4 operations (the last a Close), 1 unanswered", st)
	}
	if o := ops[0]; o.Call.Op != history.OpBegin || o.Return.Status != "new" {
		t.Errorf("first operation %+v; want a Begin answered new", o)
	}
	if o := ops[1]; o.Call.Op != history.OpCommit || o.Answered() || o.Known() || o.ReturnTime() != history.Unanswered {
		t.Errorf("second operation %+v; want a Commit with no response", o)
	}
	if o := ops[2]; o.Call.Op != history.OpBegin || o.Return.Status != "committed" || o.Call.Time < ops[1].Call.Time {
		t.Errorf("third operation %+v; want the second process's Begin, answered committed (the killed Commit had taken effect)", o)
	}
}

// child is a process of TestKilledMidOperation.
func child(dir, step string) {
	db, err := badgerstore.Open(filepath.Join(dir, "ledger"), badgerstore.OpenOptions{SyncWrites: true})
	if err != nil {
		panic(err)
	}
	l, err := badgerstore.New(db, badgerstore.Options{})
	if err != nil {
		panic(err)
	}
	calls := 0
	now := func() time.Time {
		calls++
		if step == "first" && calls == 5 { // the open, Begin's two, the Commit's call, then its return
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return time.Now()
	}
	rec, err := history.Open(filepath.Join(dir, "history.jsonl"), l, history.Options{Now: now, FlushEvery: time.Hour})
	if err != nil {
		panic(err)
	}
	if step == "first" {
		c, err := rec.Begin(ctx, key(1), ledger.BeginOptions{Owner: "first", Lease: time.Minute})
		if err != nil {
			panic(err)
		}
		rec.Commit(ctx, key(1), c.Lease.Token, ledger.Result{DownstreamID: "done"})
		panic("not killed")
	}
	if _, err := rec.Begin(ctx, key(1), ledger.BeginOptions{Owner: "second", Lease: time.Minute}); err != nil {
		panic(err)
	}
	rec.Close()
	db.Close()
}
