package ledgertest

import (
	"bytes"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// testNote: Note stores a note in the pending record held with the token
// and renews its lease; later notes replace it; every read shows it (Get,
// a duplicate's Begin, a takeover's claim); it is kept through the commit.
// A stale token, a lease of 0 or less and a note over MaxResultBytes are
// refused, and leave the record as it was.
func (s *suite) testNote(t *testing.T) {
	l, c := s.open(t, ledger.Options{MaxResultBytes: 64})
	k := key(t, 1)
	a := begin(t, l, k, "worker-a", ledger.StatusNew)
	if len(a.Record.Note) != 0 {
		t.Fatalf("a new claim has note %q", a.Record.Note)
	}
	c.Advance(20 * time.Second)
	ls, err := l.Note(ctx, k, a.Lease.Token, []byte("answer 1"), time.Minute)
	if err != nil {
		t.Fatalf("Note: %v", err)
	}
	if ls.Token != a.Lease.Token || !ls.Until.Equal(c.Now().Add(time.Minute)) {
		t.Errorf("Note's lease %+v; want token %d until %v", ls, a.Lease.Token, c.Now().Add(time.Minute))
	}
	if _, err := l.Note(ctx, k, a.Lease.Token, []byte("answer 2"), time.Minute); err != nil {
		t.Fatalf("a second Note: %v", err)
	}
	for what, bad := range map[string]struct {
		token uint64
		note  []byte
		d     time.Duration
		want  error
	}{
		"a stale token": {a.Lease.Token + 1, []byte("x"), time.Minute, ledger.ErrStaleToken},
		"a lease of 0":  {a.Lease.Token, []byte("x"), 0, ledger.ErrInvalidLedger},
		"a note too large": {a.Lease.Token, bytes.Repeat([]byte("x"), 65), time.Minute,
			ledger.ErrResultTooLarge},
	} {
		_, err := l.Note(ctx, k, bad.token, bad.note, bad.d)
		wantErr(t, "Note with "+what, err, bad.want)
	}
	rec, err := l.Get(ctx, k)
	if err != nil || string(rec.Note) != "answer 2" {
		t.Fatalf("Get: %v, note %q; want the last note", err, rec.Note)
	}
	// Past the original lease the note's renewal holds it.
	c.Advance(40 * time.Second)
	if h := begin(t, l, k, "worker-b", ledger.StatusHeld); string(h.Record.Note) != "answer 2" {
		t.Errorf("a duplicate's Begin shows note %q; want the last", h.Record.Note)
	}
	// Its holder gone, the work is taken over with its note.
	c.Advance(time.Minute)
	b := begin(t, l, k, "worker-b", ledger.StatusTakenOver)
	if string(b.Record.Note) != "answer 2" {
		t.Errorf("the takeover's claim shows note %q; want the last", b.Record.Note)
	}
	_, err = l.Note(ctx, k, a.Lease.Token, []byte("late"), time.Minute)
	wantErr(t, "Note by the holder taken over", err, ledger.ErrStaleToken)
	if err := l.Commit(ctx, k, b.Lease.Token, ledger.Result{DownstreamID: "d"}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if d := begin(t, l, k, "worker-c", ledger.StatusCommitted); string(d.Record.Note) != "answer 2" {
		t.Errorf("the committed record shows note %q; want it kept", d.Record.Note)
	}
	_, err = l.Note(ctx, k, b.Lease.Token, []byte("after"), time.Minute)
	wantErr(t, "Note on committed work", err, ledger.ErrStaleToken)
	_, err = l.Note(ctx, key(t, 2), 1, []byte("x"), time.Minute)
	wantErr(t, "Note on no record", err, ledger.ErrNotFound)
}

// testNoteThroughClear: a note is kept through a failure and its clearing,
// and the claim that follows the clearing (a redrive's) carries it, with
// a token above the failed work's.
func (s *suite) testNoteThroughClear(t *testing.T) {
	l, _ := s.open(t, ledger.Options{})
	k := key(t, 1)
	a := begin(t, l, k, "worker-a", ledger.StatusNew)
	if _, err := l.Note(ctx, k, a.Lease.Token, []byte("paid answer"), lease); err != nil {
		t.Fatalf("Note: %v", err)
	}
	if err := l.Fail(ctx, k, a.Lease.Token, "permanent_effect: refused"); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	if f := begin(t, l, k, "worker-b", ledger.StatusFailed); string(f.Record.Note) != "paid answer" {
		t.Errorf("the failed record shows note %q; want it kept", f.Record.Note)
	}
	if err := l.Clear(ctx, k, a.Lease.Token, "redriven by test"); err != nil {
		t.Fatalf("Clear: %v", err)
	}
	if rec, err := l.Get(ctx, k); err != nil || string(rec.Note) != "paid answer" {
		t.Errorf("the cleared record: %v, note %q; want it kept", err, rec.Note)
	}
	n := begin(t, l, k, "worker-c", ledger.StatusNew)
	if string(n.Record.Note) != "paid answer" || n.Lease.Token <= a.Lease.Token {
		t.Errorf("the claim after the clearing: token %d, note %q; want a token above %d and the failed work's note", n.Lease.Token, n.Record.Note, a.Lease.Token)
	}
}
