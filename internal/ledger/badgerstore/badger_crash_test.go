package badgerstore_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/ledger/ledgerproto"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// The crash test runs a child process (this test binary, re-executed) that
// begins (with durable or volatile claims, with or without SyncWrites) and
// commits intents in a loop and prints the index of each commit
// after Commit returns; in some runs it notes each claim (Ledger.Note)
// before its commit and prints the index after Note returns. The parent
// kills it with SIGKILL at a random moment, reopens the database, and
// checks that every commit and every note the child reported is there,
// intact (a volatile claim's note too: Note writes it to the DB, without
// the sync, which a process's crash does not undo), and that every record
// in the store decodes.

const (
	crashDirEnv   = "ONCEGATE_CRASH_DIR"
	crashStartEnv = "ONCEGATE_CRASH_START"
	crashSyncEnv  = "ONCEGATE_CRASH_SYNC_WRITES"
	crashVolEnv   = "ONCEGATE_CRASH_VOLATILE" // claims are volatile: only the commits are written
	crashKillsEnv = "ONCEGATE_CRASH_KILLS"    // default 20; the full run is 50
	crashSeedEnv  = "ONCEGATE_CRASH_SEED"
	crashNoteEnv  = "ONCEGATE_CRASH_NOTE" // each claim is noted before its commit
)

func crashKey(i int) dedupe.Key {
	var k dedupe.Key
	h := sha256.Sum256([]byte("crash/" + strconv.Itoa(i)))
	copy(k[:], h[:])
	return k
}

func crashResult(i int) ledger.Result {
	return ledger.Result{
		DownstreamID: fmt.Sprintf("ticket-%d", i),
		ModelRef:     fmt.Sprintf("llm/%x", crashKey(i)),
		Response:     bytes.Repeat([]byte(strconv.Itoa(i)+","), 20+i%50),
	}
}

func crashNote(i int) []byte {
	return fmt.Appendf(nil, `{"answer":%d,"pad":%q}`, i, strings.Repeat("n", i%70))
}

// TestBadgerCrashChild is the child's body; it does nothing unless the
// parent runs it.
func TestBadgerCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("run by TestBadgerCrash")
	}
	start, _ := strconv.Atoi(os.Getenv(crashStartEnv))
	db, err := badgerstore.Open(dir, badgerstore.OpenOptions{SyncWrites: os.Getenv(crashSyncEnv) == "1"})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	l, err := badgerstore.New(db, badgerstore.Options{})
	if err != nil {
		fmt.Println("ledger:", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	ctx := context.Background()
	fmt.Fprintln(out, "ready")
	out.Flush()
	for i := start; ; i++ {
		c, err := l.Begin(ctx, crashKey(i), ledger.BeginOptions{Owner: "child", Lease: time.Millisecond, Volatile: os.Getenv(crashVolEnv) == "1"})
		if err != nil || c.Status != ledger.StatusNew {
			fmt.Fprintf(out, "begin %d: %v %v\n", i, c.Status, err)
			out.Flush()
			os.Exit(3)
		}
		if os.Getenv(crashNoteEnv) == "1" {
			if _, err := l.Note(ctx, crashKey(i), c.Lease.Token, crashNote(i), time.Millisecond); err != nil {
				fmt.Fprintf(out, "note %d: %v\n", i, err)
				out.Flush()
				os.Exit(3)
			}
			fmt.Fprintf(out, "noted %d\n", i)
			out.Flush()
		}
		if err := l.Commit(ctx, crashKey(i), c.Lease.Token, crashResult(i)); err != nil {
			fmt.Fprintf(out, "commit %d: %v\n", i, err)
			out.Flush()
			os.Exit(3)
		}
		fmt.Fprintf(out, "committed %d\n", i)
		out.Flush()
	}
}

func TestBadgerCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes")
	}
	kills := 20
	if n, err := strconv.Atoi(os.Getenv(crashKillsEnv)); err == nil {
		kills = n
	}
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv(crashSeedEnv), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (replay the kill schedule with %s=%d)", seed, crashSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	committed, noted := map[int]bool{}, map[int]bool{}
	next, pending := 0, 0
	for kill := range kills {
		flag := map[bool]string{true: "1", false: "0"}
		notes := kill%8 >= 4
		cmd := exec.Command(os.Args[0], "-test.run=^TestBadgerCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashStartEnv+"="+strconv.Itoa(next),
			crashSyncEnv+"="+flag[kill%2 == 1], crashVolEnv+"="+flag[kill%4 >= 2], crashNoteEnv+"="+flag[notes])
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Wait for the child to be ready, then let it commit for a random
		// while (or a random number of commits) before killing it.
		deadline := time.After(30 * time.Second)
		var ready bool
		var killAt <-chan time.Time
		target := 1 + rng.IntN(200)
		n := 0
	loop:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break loop
				}
				switch {
				case line == "ready":
					ready = true
					killAt = time.After(time.Duration(rng.IntN(50)) * time.Millisecond)
				case strings.HasPrefix(line, "committed "):
					i, _ := strconv.Atoi(strings.TrimPrefix(line, "committed "))
					committed[i] = true
					next = max(next, i+1)
					if n++; n == target && !notes {
						cmd.Process.Kill()
					}
				case strings.HasPrefix(line, "noted "):
					i, _ := strconv.Atoi(strings.TrimPrefix(line, "noted "))
					noted[i] = true
					next = max(next, i+1)
					// Killed just after a Note returned, the claim is
					// likely still pending: its note must be there alone.
					if n++; n == target {
						cmd.Process.Kill()
					}
				default:
					cmd.Process.Kill()
					t.Fatalf("child: %s", line)
				}
			case <-killAt:
				cmd.Process.Kill()
				killAt = nil
			case <-deadline:
				cmd.Process.Kill()
				t.Fatalf("kill %d: child not done after 30s (ready=%v)", kill, ready)
			}
		}
		cmd.Wait()
		if !ready {
			t.Fatalf("kill %d: child exited before it was ready", kill)
		}
		// The child may have begun one more intent than it reported.
		next++
		pending = verifyCrashDir(t, dir, committed, noted)
	}
	t.Logf("%d kills, %d commits and %d notes verified (%d of them on claims left pending)", kills, len(committed), len(noted), pending)
}

// verifyCrashDir reopens the database and checks every reported commit and
// note and every stored record. It returns how many reported notes are on
// claims left pending.
func verifyCrashDir(t *testing.T, dir string, committed, noted map[int]bool) (pending int) {
	t.Helper()
	db, err := badgerstore.Open(dir, badgerstore.OpenOptions{})
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer db.Close()
	l, err := badgerstore.New(db, badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range committed {
		rec, err := l.Get(context.Background(), crashKey(i))
		if err != nil {
			t.Fatalf("commit %d was reported but Get fails: %v", i, err)
		}
		want := crashResult(i)
		if rec.State != ledger.StateCommitted || rec.Result.DownstreamID != want.DownstreamID ||
			rec.Result.ModelRef != want.ModelRef || !bytes.Equal(rec.Result.Response, want.Response) {
			t.Fatalf("commit %d: record %+v; want committed with %+v", i, rec, want)
		}
	}
	for i := range noted {
		rec, err := l.Get(context.Background(), crashKey(i))
		if err != nil {
			t.Fatalf("note %d was reported but Get fails: %v", i, err)
		}
		if want := crashNote(i); !bytes.Equal(rec.Note, want) {
			t.Fatalf("note %d: the %v record has note %q; want %q", i, rec.State, rec.Note, want)
		}
		if rec.State == ledger.StatePending {
			pending++
		}
	}
	// Every record in the store decodes: none is half-written.
	err = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte("dedupe/ledger/")})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var k dedupe.Key
			copy(k[:], it.Item().Key()[len("dedupe/ledger/"):])
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if _, err := ledgerproto.Decode(k, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scanning records after kill: %v", err)
	}
	return pending
}

// TestBadgerLedgerBadInput covers the ledger's typed errors for input and
// store failures, and that nothing already committed is lost by them.
func TestBadgerLedgerBadInput(t *testing.T) {
	dir := t.TempDir()
	db, err := badgerstore.Open(dir, badgerstore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := badgerstore.New(db, badgerstore.Options{Options: ledger.Options{MaxResultBytes: 100}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	k := crashKey(1)
	c, err := l.Begin(ctx, k, ledger.BeginOptions{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(ctx, k, c.Lease.Token, ledger.Result{Response: make([]byte, 101)}); !errors.Is(err, ledger.ErrResultTooLarge) {
		t.Errorf("oversized Commit: error = %v; want ErrResultTooLarge", err)
	}
	if err := l.Commit(ctx, k, c.Lease.Token, ledger.Result{DownstreamID: "kept"}); err != nil {
		t.Fatal(err)
	}
	if _, err := dedupe.ParseKey("not-a-key"); !errors.Is(err, dedupe.ErrInvalidKey) {
		t.Errorf("ParseKey of garbage: error = %v; want ErrInvalidKey", err)
	}

	// A store that refuses writes: the same directory opened read-only.
	db.Close()
	ro, err := badger.Open(badger.DefaultOptions(dir).WithReadOnly(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	rol, _ := badgerstore.New(ro, badgerstore.Options{})
	if _, err := rol.Begin(ctx, crashKey(2), ledger.BeginOptions{Lease: time.Minute}); !errors.Is(err, badger.ErrReadOnlyTxn) {
		t.Errorf("Begin on a read-only store: error = %v; want it to wrap badger.ErrReadOnlyTxn", err)
	}
	if rec, err := rol.Get(ctx, k); err != nil || rec.Result.DownstreamID != "kept" {
		t.Errorf("Get on a read-only store = %+v, %v; want the committed record", rec, err)
	}
	ro.Close()

	// A closed DB underneath a ledger.
	if _, err := l.Begin(ctx, crashKey(3), ledger.BeginOptions{Lease: time.Minute}); !errors.Is(err, ledger.ErrClosed) {
		t.Errorf("Begin on a closed DB: error = %v; want ErrClosed", err)
	}

	// A corrupt record is an error, not a wrong answer.
	db, err = badgerstore.Open(dir, badgerstore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get(append([]byte("dedupe/ledger/"), k[:]...))
		if err != nil {
			return err
		}
		v, _ := item.ValueCopy(nil)
		v[len(v)/2] ^= 0x10
		return txn.Set(item.KeyCopy(nil), v)
	})
	if err != nil {
		t.Fatal(err)
	}
	l, _ = badgerstore.New(db, badgerstore.Options{})
	if _, err := l.Get(ctx, k); !errors.Is(err, ledger.ErrCorruptRecord) {
		t.Errorf("Get of a flipped record: error = %v; want ErrCorruptRecord", err)
	}
	if _, err := l.Begin(ctx, k, ledger.BeginOptions{Lease: time.Minute}); !errors.Is(err, ledger.ErrCorruptRecord) {
		t.Errorf("Begin on a flipped record: error = %v; want ErrCorruptRecord", err)
	}
}

func TestBadgerEncryption(t *testing.T) {
	dir := t.TempDir()
	keyFile := dir + "/key"
	other := dir + "/other"
	os.WriteFile(keyFile, bytes.Repeat([]byte{7}, 32), 0o600)
	os.WriteFile(other, bytes.Repeat([]byte{8}, 32), 0o600)
	data := dir + "/db"
	db, err := badgerstore.Open(data, badgerstore.OpenOptions{EncryptionKeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := badgerstore.New(db, badgerstore.Options{})
	ctx := context.Background()
	c, err := l.Begin(ctx, crashKey(1), ledger.BeginOptions{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(ctx, crashKey(1), c.Lease.Token, ledger.Result{DownstreamID: "secret-ticket-id"}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, tt := range []struct {
		name string
		file string
	}{{"wrong key", other}, {"no key", ""}} {
		if db, err := badgerstore.Open(data, badgerstore.OpenOptions{EncryptionKeyFile: tt.file}); err == nil {
			db.Close()
			t.Errorf("OpenBadger with %s succeeded; want it to fail closed", tt.name)
		}
	}
	db, err = badgerstore.Open(data, badgerstore.OpenOptions{EncryptionKeyFile: keyFile})
	if err != nil {
		t.Fatalf("reopen with the right key: %v", err)
	}
	defer db.Close()
	l, _ = badgerstore.New(db, badgerstore.Options{})
	if rec, err := l.Get(ctx, crashKey(1)); err != nil || rec.Result.DownstreamID != "secret-ticket-id" {
		t.Errorf("Get after reopen = %+v, %v", rec, err)
	}
	if short := dir + "/short"; os.WriteFile(short, []byte("tooshort"), 0o600) == nil {
		if _, err := badgerstore.Open(dir+"/db2", badgerstore.OpenOptions{EncryptionKeyFile: short}); !errors.Is(err, ledger.ErrInvalidLedger) {
			t.Errorf("OpenBadger with an 8-byte key: error = %v; want ErrInvalidLedger", err)
		}
	}
}
