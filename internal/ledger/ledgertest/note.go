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
// A stale token, a negative lease and a note over MaxResultBytes are
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
		"a stale token":    {a.Lease.Token + 1, []byte("x"), time.Minute, ledger.ErrStaleToken},
		"a negative lease": {a.Lease.Token, []byte("x"), -time.Second, ledger.ErrInvalidLedger},
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

// testNoteBounds: a note of exactly MaxResultBytes is stored, and kept
// beside a result of MaxResultBytes through the commit; a negative lease
// and a larger note are refused and renew nothing; a lease of 0 keeps the
// lease as it was; an empty note
// takes the note away; the holder that took the work over replaces the
// note it found, the holder it fenced out cannot; a failed or cleared
// record takes no note.
func (s *suite) testNoteBounds(t *testing.T) {
	const limit = 64
	l, c := s.open(t, ledger.Options{MaxResultBytes: limit})
	k := key(t, 1)
	full := bytes.Repeat([]byte("n"), limit)
	a := begin(t, l, k, "worker-a", ledger.StatusNew)
	ls, err := l.Note(ctx, k, a.Lease.Token, full, lease)
	if err != nil {
		t.Fatalf("Note of MaxResultBytes: %v", err)
	}
	c.Advance(10 * time.Second)
	_, err = l.Note(ctx, k, a.Lease.Token, []byte("x"), -time.Second)
	wantErr(t, "Note with a negative lease", err, ledger.ErrInvalidLedger)
	_, err = l.Note(ctx, k, a.Lease.Token, append(bytes.Clone(full), 'x'), time.Hour)
	wantErr(t, "Note one byte over MaxResultBytes", err, ledger.ErrResultTooLarge)
	rec, err := l.Get(ctx, k)
	if err != nil || !bytes.Equal(rec.Note, full) || !rec.LeaseUntil.Equal(ls.Until) || rec.Token != a.Lease.Token {
		t.Fatalf("Get after refused Notes = %+v, %v; want the note of %d bytes, the lease until %v", rec, err, limit, ls.Until)
	}
	if kept, err := l.Note(ctx, k, a.Lease.Token, []byte("deposit"), 0); err != nil || !kept.Until.Equal(ls.Until) {
		t.Fatalf("Note with a lease of 0: %+v, %v; want the lease kept until %v", kept, err, ls.Until)
	}
	if rec, err := l.Get(ctx, k); err != nil || string(rec.Note) != "deposit" || !rec.LeaseUntil.Equal(ls.Until) {
		t.Fatalf("Get after a Note with a lease of 0: note %q, lease until %v, %v; want the note, the lease until %v", rec.Note, rec.LeaseUntil, err, ls.Until)
	}
	if _, err := l.Note(ctx, k, a.Lease.Token, nil, lease); err != nil {
		t.Fatalf("an empty Note: %v", err)
	}
	if rec, err := l.Get(ctx, k); err != nil || len(rec.Note) != 0 {
		t.Fatalf("Get after an empty Note: note %q, %v; want none", rec.Note, err)
	}
	if _, err := l.Note(ctx, k, a.Lease.Token, []byte("found"), lease); err != nil {
		t.Fatalf("Note: %v", err)
	}
	c.Advance(lease)
	b := begin(t, l, k, "worker-b", ledger.StatusTakenOver)
	if string(b.Record.Note) != "found" {
		t.Fatalf("the takeover's claim shows note %q; want %q", b.Record.Note, "found")
	}
	if _, err := l.Note(ctx, k, b.Lease.Token, full, lease); err != nil {
		t.Fatalf("Note by the holder that took over: %v", err)
	}
	_, err = l.Note(ctx, k, a.Lease.Token, []byte("zombie"), lease)
	wantErr(t, "Note by the holder fenced out", err, ledger.ErrStaleToken)
	res := ledger.Result{Response: bytes.Repeat([]byte("r"), limit)}
	if err := l.Commit(ctx, k, b.Lease.Token, res); err != nil {
		t.Fatalf("Commit of MaxResultBytes beside a note of MaxResultBytes: %v", err)
	}
	rec, err = l.Get(ctx, k)
	if err != nil || rec.State != ledger.StateCommitted || !bytes.Equal(rec.Note, full) || !bytes.Equal(rec.Result.Response, res.Response) {
		t.Fatalf("Get after the commit = %+v, %v; want committed with both at full size", rec, err)
	}

	k2 := key(t, 2)
	f := begin(t, l, k2, "worker-a", ledger.StatusNew)
	if err := l.Fail(ctx, k2, f.Lease.Token, "exhausted: x"); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	_, err = l.Note(ctx, k2, f.Lease.Token, []byte("late"), lease)
	wantErr(t, "Note on a failed record", err, ledger.ErrStaleToken)
	if err := l.Clear(ctx, k2, f.Lease.Token, "redriven by test"); err != nil {
		t.Fatalf("Clear: %v", err)
	}
	_, err = l.Note(ctx, k2, f.Lease.Token, []byte("late"), lease)
	wantErr(t, "Note on a cleared record", err, ledger.ErrStaleToken)
	if rec, err := l.Get(ctx, k2); err != nil || rec.State != ledger.StateCleared || len(rec.Note) != 0 {
		t.Fatalf("Get of the cleared record = %+v, %v; want cleared with no note", rec, err)
	}
}
