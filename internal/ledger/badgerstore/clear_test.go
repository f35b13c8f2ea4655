package badgerstore

import (
	"context"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// TestClearedThenCrash: work failed three times and a person cleared it;
// its next claim is volatile (in memory and the claims journal) and the
// process dies before the commit. The next process must find that claim
// (a holder gone, to take over, its age kept for the redo guard) with its
// own try count, not the cleared failure's: the journal's recovery once
// skipped a claim whose key the database showed cleared (the key was new
// again, the claim's age lost), and a claim over a record with more tries
// would have inherited them, exhausted at once.
func TestClearedThenCrash(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	clock.Set(time.Unix(1e9, 0))
	dir := t.TempDir()
	db, l := openVolatileTest(t, dir, clock)
	k := dedupe.Key{1, 2, 3}
	vol := ledger.BeginOptions{Owner: "a", Lease: time.Minute, Volatile: true}
	c := mustBegin(t, l, k, vol, ledger.StatusNew)
	for range 2 { // taken over twice: three tries
		clock.Advance(time.Minute)
		c = mustBegin(t, l, k, vol, ledger.StatusTakenOver)
	}
	if err := l.Fail(ctx, k, c.Lease.Token, "permanent_effect: 400"); err != nil {
		t.Fatal(err)
	}
	if err := l.Clear(ctx, k, c.Lease.Token, "redriven by alice"); err != nil {
		t.Fatal(err)
	}
	n := mustBegin(t, l, k, vol, ledger.StatusNew)
	created := clock.Now()
	l.Close() // the process dies holding n's claim
	db.Close()
	clock.Advance(time.Second)

	db, l = openVolatileTest(t, dir, clock)
	defer db.Close()
	defer l.Close()
	rec, err := l.Get(ctx, k)
	if err != nil || rec.State != ledger.StatePending || rec.Token != n.Lease.Token || !rec.Created.Equal(created) {
		t.Fatalf("after the restart: %+v, %v; want the cleared work's claim pending, token %d, created %v", rec, err, n.Lease.Token, created)
	}
	tk := mustBegin(t, l, k, vol, ledger.StatusTakenOver)
	if tk.Record.Attempts != 2 {
		t.Errorf("attempts after the takeover = %d; want 2 (the cleared failure's 3 do not count)", tk.Record.Attempts)
	}
}
