package consumer

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
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

// lostReplyLedger is a ledger whose first Note is never answered, as a
// write whose reply a leaving node lost: it waits for its caller's context,
// or for the KV store's own timeout (5s, longer than a lease).
type lostReplyLedger struct {
	ledger.Ledger
	notes atomic.Int32
}

func (l *lostReplyLedger) Note(ctx context.Context, key dedupe.Key, token uint64, note []byte, d time.Duration) (ledger.Lease, error) {
	if l.notes.Add(1) == 1 {
		select {
		case <-ctx.Done():
			return ledger.Lease{}, ctx.Err()
		case <-time.After(5 * time.Second):
			return ledger.Lease{}, context.DeadlineExceeded
		}
	}
	return l.Ledger.Note(ctx, key, token, note, d)
}

// TestNoteAfterALostReply: a step's answer whose first write gets no
// reply is written by the next try, well inside the lease, not after the
// lost write's own wait (the cluster soak, seed 501023642, lost three
// answers this way to a kill 1.4s after them, the ledger answering the same
// keys' renewals meanwhile).
func TestNoteAfterALostReply(t *testing.T) {
	const lease = 3 * time.Second
	var l *lostReplyLedger
	answer := []byte(`{"version":"v","answers":[{"text":"page the on-call"}]}`)
	took, rec, held := saveOn(t, lease, func(bl ledger.Ledger) ledger.Ledger { l = &lostReplyLedger{Ledger: bl}; return l }, answer)
	if !bytes.Equal(rec.Note, answer) {
		t.Fatalf("the record after the save: %+v; want the answer in it", rec)
	}
	if n := l.notes.Load(); n != 2 || took > lease/2 {
		t.Errorf("saved after %d tries in %v; want the second try, within half the %v lease", n, took, lease)
	}
	if held {
		t.Errorf("the answer is still held in the process; want it forgotten once in the record")
	}
}

// saveOn claims a key under lease on the ledger wrap makes of an in-memory
// Badger ledger, has a step save answer as its note (saveNote), and
// returns how long the save took, the record after it, and whether the
// process still holds the answer.
func saveOn(t *testing.T, lease time.Duration, wrap func(ledger.Ledger) ledger.Ledger, answer []byte) (time.Duration, ledger.Record, bool) {
	t.Helper()
	ctx := context.Background()
	db, err := badgerstore.Open("", badgerstore.OpenOptions{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	bl, err := badgerstore.New(db, badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := wrap(bl)
	k := dedupe.Key{9}
	c, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: "a", Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	h, err := newHeldNotes("", nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{c: &Consumer{log: slog.New(slog.DiscardHandler), unsaved: h}, ledger: l, lease: lease, pipeline: "triage"}
	tr := &Trigger{key: k}
	tr.token.Store(c.Lease.Token)
	tr.leaseEnd.Store(mono() + int64(lease))
	start := time.Now()
	g.saveNote(ctx, tr, answer)
	took := time.Since(start)
	rec, err := bl.Get(ctx, k)
	if err != nil {
		t.Fatalf("the record after the save: %v", err)
	}
	return took, rec, h.get(k) != nil
}

// slowLedger answers every Note after took: a KV bucket electing its
// leader, slow but answering.
type slowLedger struct {
	ledger.Ledger
	took  time.Duration
	notes atomic.Int32
}

func (l *slowLedger) Note(ctx context.Context, key dedupe.Key, token uint64, note []byte, d time.Duration) (ledger.Lease, error) {
	l.notes.Add(1)
	select {
	case <-ctx.Done():
		return ledger.Lease{}, ctx.Err()
	case <-time.After(l.took):
	}
	return l.Ledger.Note(ctx, key, token, note, d)
}

// TestNoteOnASlowLedger: a ledger that answers each write after 1.5s, half
// a 3s lease, still gets the answer in the record within the lease: a try
// that is only slow is not abandoned (the tries beside it are extra writes
// of the same note, not a give-up). Cut off at a quarter of the lease, as
// each try once was, no try would ever answer.
func TestNoteOnASlowLedger(t *testing.T) {
	const lease = 3 * time.Second
	var l *slowLedger
	answer := []byte(`{"version":"v","answers":[{"text":"scale the pool"}]}`)
	took, rec, held := saveOn(t, lease, func(bl ledger.Ledger) ledger.Ledger { l = &slowLedger{Ledger: bl, took: lease / 2}; return l }, answer)
	if !bytes.Equal(rec.Note, answer) {
		t.Fatalf("the record after the save: %+v; want the answer in it", rec)
	}
	if took >= lease || held {
		t.Errorf("saved in %v (%d tries), held in the process %v; want it in the record within the %v lease, not held",
			took, l.notes.Load(), held, lease)
	}
}
