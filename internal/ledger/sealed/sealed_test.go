package sealed_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/ledger/sealed"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

func open(t *testing.T) *badgerstore.Ledger {
	t.Helper()
	db, err := badgerstore.Open(t.TempDir(), badgerstore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	l, err := badgerstore.New(db, badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var opts = ledger.BeginOptions{Owner: "test", Lease: time.Minute}

// TestSealedNote: a note and a response go into the store sealed (the
// store's own record holds neither in plain text) and come back opened;
// a plain note written past the seal (a bucket writer planting an answer),
// a sealed note copied onto another key's record, and a note read with
// another key all read as no note.
func TestSealedNote(t *testing.T) {
	ctx := context.Background()
	raw := open(t)
	key := bytes.Repeat([]byte{7}, 32)
	l, err := sealed.New(raw, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.(ledger.Batcher); !ok {
		t.Fatal("the seal of a Batcher is not a Batcher")
	}
	a, b := dedupe.Key{1}, dedupe.Key{2}
	answer := []byte(`{"answers":[{"text":"restart the replica"}]}`)

	c, err := l.Begin(ctx, a, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Note(ctx, a, c.Lease.Token, answer, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(ctx, a, c.Lease.Token, ledger.Result{Response: []byte("effect body: restart the replica")}); err != nil {
		t.Fatal(err)
	}
	got, err := l.Get(ctx, a)
	if err != nil || !bytes.Equal(got.Note, answer) || string(got.Result.Response) != "effect body: restart the replica" {
		t.Fatalf("Get through the seal: %v, note %q, response %q; want both opened", err, got.Note, got.Result.Response)
	}
	stored, err := raw.Get(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(stored.Note, []byte("restart")) || bytes.Contains(stored.Result.Response, []byte("restart")) || len(stored.Note) == 0 {
		t.Fatalf("the store holds note %q, response %q; want both sealed", stored.Note, stored.Result.Response)
	}

	// b's record, written past the seal, with a plain note, then with a's
	// sealed note copied onto it.
	cb, err := raw.Begin(ctx, b, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, forged := range [][]byte{answer, stored.Note} {
		if _, err := raw.Note(ctx, b, cb.Lease.Token, forged, time.Minute); err != nil {
			t.Fatal(err)
		}
		if got, err := l.Get(ctx, b); err != nil || got.Note != nil {
			t.Errorf("a note %q planted on b reads as %q (%v); want none", forged, got.Note, err)
		}
	}

	other, err := sealed.New(raw, bytes.Repeat([]byte{8}, 32))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := other.Get(ctx, a); err != nil || got.Note != nil || got.Result.Response != nil {
		t.Errorf("read with another key: note %q, response %q (%v); want neither", got.Note, got.Result.Response, err)
	}
}
