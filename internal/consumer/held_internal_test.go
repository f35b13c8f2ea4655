package consumer

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// TestHeldAnswerOutlivesTheProcess: an answer the ledger would not take
// waits on disk, sealed with the key; a process started on the same
// directory (as after a crash) loads it, writes it into its intent's
// record with the token it was paid under once the ledger takes writes
// (the lease ending at once), and removes the file. One whose intent was
// taken over meanwhile (its new holder may die before it asks) is
// deposited in the record under the new holder's token, its lease kept.
func TestHeldAnswerOutlivesTheProcess(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	key := bytes.Repeat([]byte{3}, 32)
	log := slog.New(slog.DiscardHandler)
	db, err := badgerstore.Open(filepath.Join(t.TempDir(), "ledger"), badgerstore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := badgerstore.New(db, badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := ledger.BeginOptions{Owner: "a", Lease: time.Minute}
	kept, taken := dedupe.Key{1}, dedupe.Key{2}
	ck, err := l.Begin(ctx, kept, opts)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := l.Begin(ctx, taken, opts)
	if err != nil {
		t.Fatal(err)
	}
	answer := []byte(`{"version":"v","answers":[{"text":"restart the replica"}]}`)

	h, err := newHeldNotes(dir, key, log)
	if err != nil {
		t.Fatal(err)
	}
	h.keep(kept, answer, ck.Lease.Token)
	h.keep(taken, answer, ct.Lease.Token)
	for _, k := range []dedupe.Key{kept, taken} {
		b, err := os.ReadFile(filepath.Join(dir, k.String()))
		if err != nil || bytes.Contains(b, []byte("restart")) {
			t.Fatalf("the held file of %s: %v, %q; want it, sealed", k, err, b)
		}
	}
	// The second intent is taken over before the answer is written.
	if _, err := l.Extend(ctx, taken, ct.Lease.Token, time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond) // past that lease, on the ledger's clock
	tb, err := l.Begin(ctx, taken, ledger.BeginOptions{Owner: "b", Lease: time.Minute})
	if err != nil || tb.Status != ledger.StatusTakenOver {
		t.Fatalf("takeover: %v, %v", tb.Status, err)
	}

	// Loaded with another key, nothing reads, and nothing is removed.
	if wrong, err := newHeldNotes(dir, bytes.Repeat([]byte{4}, 32), log); err != nil || len(wrong.notes) != 0 {
		t.Errorf("loading with another key: %v, %d notes; want none", err, len(wrong.notes))
	}
	// The process is gone; the next loads what it held.
	again, err := newHeldNotes(dir, key, log)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.get(kept); !bytes.Equal(got, answer) {
		t.Fatalf("after a restart the held answer is %q; want it", got)
	}
	again.flush(ctx, l)
	rec, err := l.Get(ctx, kept)
	if err != nil || !bytes.Equal(rec.Note, answer) || rec.Token != ck.Lease.Token {
		t.Errorf("the record after the flush: %v, token %d, note %q; want the answer under token %d", err, rec.Token, rec.Note, ck.Lease.Token)
	}
	if c, err := l.Begin(ctx, kept, ledger.BeginOptions{Owner: "c", Lease: time.Minute}); err != nil || c.Status != ledger.StatusTakenOver || !bytes.Equal(c.Record.Note, answer) {
		t.Errorf("the next claim: %v, %v, note %q; want a takeover at once, with the answer", c.Status, err, c.Record.Note)
	}
	if rec, err := l.Get(ctx, taken); err != nil || !bytes.Equal(rec.Note, answer) || rec.Token != tb.Lease.Token || !rec.LeaseUntil.After(time.Now().Add(30*time.Second)) {
		t.Errorf("the intent taken over: %v, token %d, lease until %v, note %q; want the answer deposited under its new holder's token %d, its lease kept", err, rec.Token, rec.LeaseUntil, rec.Note, tb.Lease.Token)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("%d held files left after the flush; want none", len(left))
	}
}
