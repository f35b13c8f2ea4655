package badgerstore

import (
	"context"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// TestNoteThroughTheJournal: a volatile claim that took over a noted
// record, and one that claimed a cleared record anew, live in the claims
// journal only; the next process rebuilds them from it, with the notes
// the records had (the journal holds no notes: it takes them from the
// database's record).
func TestNoteThroughTheJournal(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	clock.Set(time.Unix(1e9, 0))
	dir := t.TempDir()
	db, l := openVolatileTest(t, dir, clock)
	vol := ledger.BeginOptions{Owner: "a", Lease: time.Minute, Volatile: true}
	takeover, redrive := dedupe.Key{1}, dedupe.Key{2}
	a := mustBegin(t, l, takeover, vol, ledger.StatusNew)
	if _, err := l.Note(ctx, takeover, a.Lease.Token, []byte("paid"), time.Minute); err != nil {
		t.Fatal(err)
	}
	r := mustBegin(t, l, redrive, vol, ledger.StatusNew)
	if _, err := l.Note(ctx, redrive, r.Lease.Token, []byte("paid too"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Fail(ctx, redrive, r.Lease.Token, "x"); err != nil {
		t.Fatal(err)
	}
	if err := l.Clear(ctx, redrive, r.Lease.Token, "redriven"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	want := map[dedupe.Key]string{takeover: "paid", redrive: "paid too"}
	b := mustBegin(t, l, takeover, vol, ledger.StatusTakenOver)
	n := mustBegin(t, l, redrive, vol, ledger.StatusNew)
	if string(b.Record.Note) != want[takeover] || string(n.Record.Note) != want[redrive] {
		t.Fatalf("before the restart: notes %q, %q; want %q, %q", b.Record.Note, n.Record.Note, want[takeover], want[redrive])
	}
	l.Close()
	db.Close()
	db, l = openVolatileTest(t, dir, clock)
	defer db.Close()
	defer l.Close()
	for _, k := range []dedupe.Key{takeover, redrive} {
		rec, err := l.Get(ctx, k)
		if err != nil || rec.State != ledger.StatePending || rec.Token != 2 || string(rec.Note) != want[k] {
			t.Errorf("after the restart, %v: %v, %v token %d note %q; want pending, token 2, note %q", k, err, rec.State, rec.Token, rec.Note, want[k])
		}
	}
}
