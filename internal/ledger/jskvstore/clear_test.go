package jskvstore_test

import (
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/jskvstore"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// TestTwoReplicasRaceClear: redrives and duplicates racing on failed work
// through two replicas' connections do the work once per key, and a clear
// never undoes a commit the other replica made.
func TestTwoReplicasRaceClear(t *testing.T) {
	s := natstest.RunServer(t)
	_, jsA := natstest.Connect(t, s)
	_, jsB := natstest.Connect(t, s)
	opts := jskvstore.Options{Bucket: "two-replicas-clear", Options: ledger.Options{Clock: ledgertest.NewClock()}}
	a, b := newLedger(t, jsA, opts), newLedger(t, jsB, opts)
	keys := make([]dedupe.Key, 32)
	tokens := make([]uint64, len(keys))
	for i := range keys {
		keys[i] = key(i)
		c, err := a.Begin(ctx, keys[i], ledger.BeginOptions{Owner: "first", Lease: time.Minute})
		if err != nil || c.Status != ledger.StatusNew {
			t.Fatalf("Begin: %+v, %v", c, err)
		}
		if err := a.Fail(ctx, keys[i], c.Lease.Token, "permanent_effect: 400"); err != nil {
			t.Fatalf("Fail: %v", err)
		}
		tokens[i] = c.Lease.Token
	}
	ledgertest.RaceClear(t, []ledger.Ledger{a, b}, 8, keys, tokens)
}
