package badgerstore_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// flippedDirEnv hands TestFlippedBitChild the directory to read.
const flippedDirEnv = "ONCEGATE_TEST_FLIPPED_DIR"

const flippedRecords = 3000

func flippedKey(i int) dedupe.Key {
	var k dedupe.Key
	binary.BigEndian.PutUint64(k[8:], uint64(i)*0x9E3779B97F4A7C15)
	return k
}

// TestFlippedBitInATable flips one bit in a ledger table on disk and reads
// every record back in a new process: the open may refuse the ledger, and a
// read may fail, but no record may read as missing or as another answer (a
// missing record would be claimed again and its effect repeated).
//
// This is why Open checks every table before Badger opens it: with blocks
// verified only when read (options.OnBlockRead), Badger's point lookup drops
// the failed block's error and the records in it read as not found, which
// this test catches. (Badger v4.9.6 checking the tables itself as it opens
// them, options.OnTableAndBlockRead, reports a bad block by crashing: a nil
// dereference while it formats the error. The child's open may still end
// it; TestOpenChecksTables holds Open to its typed error.)
func TestFlippedBitInATable(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	dir := t.TempDir()
	db, err := badgerstore.Open(dir, badgerstore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	commitFlipped(t, db)
	if err := db.Close(); err != nil { // flushes the memtable to a table
		t.Fatal(err)
	}

	// Flip one bit at each of several places in the largest table (its
	// data blocks come first, its index last), each in a copy of the ledger.
	table := largestTable(t, dir)
	for _, at := range []float64{0.05, 0.25, 0.45, 0.65} {
		t.Run(fmt.Sprintf("at%.2f", at), func(t *testing.T) {
			copyDir := t.TempDir()
			if err := os.CopyFS(copyDir, os.DirFS(dir)); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(copyDir, filepath.Base(table))
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[int(float64(len(b))*at)] ^= 0x08
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			readFlipped(t, copyDir, filepath.Base(table))
		})
	}
}

// readFlipped reads every record of dir in a child process and fails on a
// record read as missing or as another answer.
func readFlipped(t *testing.T, dir, table string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFlippedBitChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), flippedDirEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var missing, wrong, failed, right int
	var first string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		switch line := sc.Text(); {
		case strings.HasPrefix(line, "missing "):
			missing++
			first = firstOf(first, line)
		case strings.HasPrefix(line, "wrong "):
			wrong++
			first = firstOf(first, line)
		case strings.HasPrefix(line, "failed "):
			failed++
		case strings.HasPrefix(line, "right "):
			right++
		case strings.HasPrefix(line, "refused "):
			t.Logf("the open refused the ledger: %s", line)
		}
	}
	if missing+wrong > 0 {
		t.Fatalf("with a bit flipped in %s: %d records read as missing and %d as another answer (first: %s); want each one right or an error", table, missing, wrong, first)
	}
	if err != nil {
		// The open crashed or refused: loud, and no answer given.
		line, _, _ := strings.Cut(strings.TrimSpace(stderr.String()), "\n")
		t.Logf("the child's open ended it (%v): %s", err, line)
		return
	}
	if right == flippedRecords {
		t.Fatalf("Open took the flipped table and all %d records read back right; the flip missed the data (want an error from the open or the block's reads)", flippedRecords)
	}
	if right+failed != flippedRecords {
		t.Fatalf("the child read %d right and %d failed of %d; output:\n%s", right, failed, flippedRecords, out)
	}
	t.Logf("%d reads failed on the flipped block, %d right", failed, right)
}

func firstOf(first, line string) string {
	if first == "" {
		return line
	}
	return first
}

// TestFlippedBitChild is TestFlippedBitInATable's reader; it does nothing
// unless that test runs it.
func TestFlippedBitChild(t *testing.T) {
	dir := os.Getenv(flippedDirEnv)
	if dir == "" {
		t.Skip("run by TestFlippedBitInATable")
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	db, err := badgerstore.Open(dir, badgerstore.OpenOptions{})
	if err != nil {
		fmt.Fprintf(out, "refused %v\n", err)
		out.Flush()
		os.Exit(2)
	}
	defer db.Close()
	l, err := badgerstore.New(db, badgerstore.Options{})
	if err != nil {
		fmt.Fprintf(out, "refused %v\n", err)
		out.Flush()
		os.Exit(2)
	}
	defer l.Close()
	for i := range flippedRecords {
		rec, err := l.Get(context.Background(), flippedKey(i))
		switch want := fmt.Sprintf("ticket-%d", i); {
		case errors.Is(err, ledger.ErrNotFound):
			fmt.Fprintf(out, "missing %d: %v\n", i, err)
		case err != nil:
			fmt.Fprintf(out, "failed %d: %v\n", i, err)
		case rec.State != ledger.StateCommitted || rec.Result.DownstreamID != want:
			fmt.Fprintf(out, "wrong %d: %v %q\n", i, rec.State, rec.Result.DownstreamID)
		default:
			fmt.Fprintf(out, "right %d\n", i)
		}
	}
}

// TestOpenChecksTables damages one table of a closed ledger and opens it
// in this process: Open refuses it with ledger.ErrCorruptRecord, naming the
// table, instead of crashing or serving the records around the damage. A
// ledger written by an earlier Oncegate, whose tables Badger compressed
// (Snappy), opens and reads back, and is checked the same way.
func TestOpenChecksTables(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		open func(dir string) (*badger.DB, error)
	}{
		{"uncompressed", func(dir string) (*badger.DB, error) { return badgerstore.Open(dir, badgerstore.OpenOptions{}) }},
		{"snappy", func(dir string) (*badger.DB, error) {
			return badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithCompression(options.Snappy))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			db, err := c.open(dir)
			if err != nil {
				t.Fatal(err)
			}
			commitFlipped(t, db)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			table := largestTable(t, dir)

			// Undamaged, it opens and every record reads back.
			db, err = badgerstore.Open(dir, badgerstore.OpenOptions{})
			if err != nil {
				t.Fatalf("opening the undamaged ledger: %v", err)
			}
			l, err := badgerstore.New(db, badgerstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range flippedRecords {
				rec, err := l.Get(ctx, flippedKey(i))
				if err != nil || rec.Result.DownstreamID != fmt.Sprintf("ticket-%d", i) {
					t.Fatalf("record %d: %v %q", i, err, rec.Result.DownstreamID)
				}
			}
			l.Close()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}

			b, err := os.ReadFile(table)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/3] ^= 0x08 // a data block: the index is at the end
			if err := os.WriteFile(table, b, 0o600); err != nil {
				t.Fatal(err)
			}
			db, err = badgerstore.Open(dir, badgerstore.OpenOptions{})
			if err == nil {
				db.Close()
				t.Fatalf("Open took a ledger with a bit flipped in %s", table)
			}
			if !errors.Is(err, ledger.ErrCorruptRecord) || !strings.Contains(err.Error(), filepath.Base(table)) {
				t.Fatalf("Open: %v; want ledger.ErrCorruptRecord naming %s", err, filepath.Base(table))
			}
			t.Log(err)
		})
	}
}

// commitFlipped commits flippedRecords records in a ledger on db, record i
// with the result "ticket-i".
func commitFlipped(t *testing.T, db *badger.DB) {
	t.Helper()
	ctx := context.Background()
	l, err := badgerstore.New(db, badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range flippedRecords {
		c, err := l.Begin(ctx, flippedKey(i), ledger.BeginOptions{Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Commit(ctx, flippedKey(i), c.Lease.Token, ledger.Result{DownstreamID: fmt.Sprintf("ticket-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
}

func largestTable(t *testing.T, dir string) string {
	t.Helper()
	tables, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	var table string
	var size int64
	for _, p := range tables {
		if fi, err := os.Stat(p); err == nil && fi.Size() > size {
			table, size = p, fi.Size()
		}
	}
	if table == "" {
		t.Fatalf("no table in %s after the close", dir)
	}
	return table
}
