package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/ledger/history"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// h builds hand-made histories: one operation per call, on one key unless
// the event says otherwise.
type h struct{ ops []history.Op }

func (x *h) String() string {
	var b strings.Builder
	for _, o := range x.ops {
		fmt.Fprintf(&b, "  [%d, %d] key %s: %s\n", o.Call.Time, o.ReturnTime(), o.Call.Key, describeOp(ledgerOp{call: o.Call, ret: o.Return, unknown: !o.Known()}))
	}
	return b.String()
}

const never = -1 // a return time for an operation without a response

// op adds an operation invoked at call and answered at ret with r (never:
// no response).
func (x *h) op(id string, call, ret int64, c history.Event, r history.Event) *h {
	c.Kind, c.ID, c.Time = history.KindCall, id, call
	if c.Key == "" {
		c.Key = "k1"
	}
	o := history.Op{Call: c}
	if ret != never {
		r.Kind, r.ID, r.Time = history.KindReturn, id, ret
		o.Return = r
	}
	x.ops = append(x.ops, o)
	return x
}

func begin(fp string) history.Event {
	return history.Event{Op: history.OpBegin, Fingerprint: fp, Owner: "w"}
}
func commit(token uint64, result string) history.Event {
	return history.Event{Op: history.OpCommit, Token: token, Result: result}
}
func fail(token uint64, reason string) history.Event {
	return history.Event{Op: history.OpFail, Token: token, Reason: reason}
}
func extend(token uint64) history.Event { return history.Event{Op: history.OpExtend, Token: token} }
func get() history.Event                { return history.Event{Op: history.OpGet} }
func note(token uint64, hash string) history.Event {
	return history.Event{Op: history.OpNote, Token: token, Note: hash}
}
func withNote(e history.Event, hash string) history.Event { e.Note = hash; return e }

func claim(status string, token uint64) history.Event {
	return history.Event{Status: status, Token: token, State: "pending", RecToken: token}
}
func held(recToken uint64) history.Event {
	return history.Event{Status: "held", State: "pending", RecToken: recToken}
}
func done(result string, token uint64) history.Event {
	return history.Event{Status: "committed", State: "committed", Result: result, RecToken: token}
}
func gaveUp(reason string, token uint64) history.Event {
	return history.Event{Status: "failed", State: "failed", Reason: reason, RecToken: token}
}
func okay() history.Event                { return history.Event{} }
func refused(class string) history.Event { return history.Event{Err: class} }

// linearizable checks a hand-made history under pol.
func linearizable(t *testing.T, pol ledger.MismatchPolicy, x *h) bool {
	t.Helper()
	model := ledgerModel(pol)
	for _, ops := range keyedOps(x.ops) {
		if !porcupine.CheckOperations(model, ops) {
			return false
		}
	}
	return true
}

// TestLedgerModelLegal: histories a correct ledger can give, under faults
// included, pass.
func TestLedgerModelLegal(t *testing.T) {
	for _, tt := range []struct {
		name string
		pol  ledger.MismatchPolicy
		x    *h
	}{
		{"claim, held, extend, commit, duplicates", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("b/1", 5, 15, begin("f"), held(1)).
			op("a/2", 20, 25, extend(1), history.Event{Token: 1}).
			op("a/3", 30, 40, commit(1, "r1"), okay()).
			op("b/2", 50, 60, begin("f"), done("r1", 1)).
			op("c/1", 55, 65, commit(1, "r1"), refused(history.ErrStale)).
			op("c/2", 70, 80, get(), history.Event{State: "committed", RecToken: 1, Result: "r1"})},
		{"a takeover fences the first holder", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("b/1", 20, 30, begin("f"), claim("taken-over", 2)).
			op("a/2", 40, 50, commit(1, "ra"), refused(history.ErrStale)).
			op("a/3", 40, 50, extend(1), refused(history.ErrStale)).
			op("b/2", 60, 70, commit(2, "rb"), okay()).
			op("a/4", 80, 90, begin("f"), done("rb", 2))},
		{"concurrent begins: one wins, whichever", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), held(1)).
			op("b/1", 0, 10, begin("f"), claim("new", 1))},
		{"a commit whose process died took effect", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, never, commit(1, "ra"), okay()).
			op("b/1", 30, 40, begin("f"), done("ra", 1))},
		{"a commit whose process died did not take effect", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, never, commit(1, "ra"), okay()).
			op("b/1", 30, 40, begin("f"), claim("taken-over", 2)).
			op("b/2", 50, 60, commit(2, "rb"), okay())},
		{"a timed-out begin took the work over unseen", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("b/1", 20, 30, begin("f"), history.Event{Err: history.ErrOther, Msg: "timeout"}).
			op("c/1", 40, 50, begin("f"), claim("taken-over", 3)).
			op("a/2", 60, 70, commit(1, "ra"), refused(history.ErrStale))},
		{"fail, then failed answers", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, fail(1, "exhausted: x"), okay()).
			op("b/1", 40, 50, begin("f"), gaveUp("exhausted: x", 1)).
			op("b/2", 40, 50, commit(1, "r"), refused(history.ErrStale))},
		{"a stale first read answers held after the commit", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, commit(1, "r"), okay()).
			op("b/1", 40, 50, begin("f"), held(1))},
		{"unknown keys answer not found", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, commit(1, "r"), refused(history.ErrNotFound)).
			op("a/2", 20, 30, get(), refused(history.ErrNotFound)).
			op("a/3", 40, 50, begin("f"), claim("new", 1))},
		{"reworded: accepted and reported", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("b/1", 20, 30, begin("g"), history.Event{Status: "held", State: "pending", RecToken: 1, Mismatch: true})},
		{"reworded: rejected", ledger.MismatchReject, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 12, 15, commit(1, "r"), okay()).
			op("b/1", 20, 30, begin("g"), refused(history.ErrMismatch)).
			op("c/1", 40, 50, begin("f"), done("r", 1))},
		{"a begin whose process died took a cleared failure over unseen", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, fail(1, "permanent_effect: x"), okay()).
			op("r/1", 40, 50, history.Event{Op: history.OpClear, Token: 1}, okay()).
			op("b/1", 60, never, begin("g"), okay()).
			op("c/1", 70, 80, begin("f"), history.Event{Status: "held", State: "pending", RecToken: 2, Mismatch: true}).
			op("c/2", 90, 100, begin("g"), claim("taken-over", 3)).
			op("c/3", 110, 120, commit(3, "r"), okay())},
		{"a note rides through a takeover, the commit and later reads", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, note(1, "n1"), history.Event{Token: 1}).
			op("b/1", 40, 50, begin("f"), withNote(claim("taken-over", 2), "n1")).
			op("a/3", 45, 55, note(1, "n1b"), refused(history.ErrStale)).
			op("b/2", 60, 70, note(2, "n2"), history.Event{Token: 2}).
			op("b/3", 80, 90, commit(2, "r"), okay()).
			op("c/1", 100, 110, begin("f"), withNote(done("r", 2), "n2")).
			op("c/2", 100, 110, get(), history.Event{State: "committed", RecToken: 2, Result: "r", Note: "n2"})},
		{"a note whose process died took effect, or not", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, never, note(1, "n1"), okay()).
			op("b/1", 40, 50, begin("f"), withNote(claim("taken-over", 2), "n1")).
			op("c/1", 0, 10, history.Event{Op: history.OpBegin, Key: "k2", Fingerprint: "f"}, claim("new", 1)).
			op("c/2", 20, never, history.Event{Op: history.OpNote, Key: "k2", Token: 1, Note: "m1"}, okay()).
			op("d/1", 40, 50, history.Event{Op: history.OpBegin, Key: "k2", Fingerprint: "f"}, claim("taken-over", 2))},
		{"a redrive's claim carries the failed work's note", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, note(1, "n1"), history.Event{Token: 1}).
			op("a/3", 40, 50, fail(1, "exhausted: x"), okay()).
			op("b/1", 60, 70, begin("f"), withNote(gaveUp("exhausted: x", 1), "n1")).
			op("r/1", 80, 90, history.Event{Op: history.OpClear, Token: 1}, okay()).
			op("c/1", 100, 110, begin("f"), withNote(claim("new", 2), "n1"))},
		{"overlapping notes: a read may show either", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 40, note(1, "n1"), history.Event{Token: 1}).
			op("a/3", 25, 45, note(1, "n2"), history.Event{Token: 1}).
			op("b/1", 50, 60, get(), history.Event{State: "pending", RecToken: 1, Note: "n1"})},
		{"an empty note takes the note away", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, note(1, "n1"), history.Event{Token: 1}).
			op("a/3", 40, 50, note(1, ""), history.Event{Token: 1}).
			op("b/1", 60, 70, get(), history.Event{State: "pending", RecToken: 1})},
		{"a refused note leaves the note", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, note(1, "n1"), history.Event{Token: 1}).
			op("a/3", 40, 50, note(1, "big"), refused(history.ErrTooLarge)).
			op("b/1", 60, 70, get(), history.Event{State: "pending", RecToken: 1, Note: "n1"})},
		{"keys apart", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 0, 10, history.Event{Op: history.OpBegin, Key: "k2"}, claim("new", 1))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !linearizable(t, tt.pol, tt.x) {
				t.Errorf("a history a correct ledger can give was found not linearizable:\n%s", tt.x)
			}
		})
	}
}

// TestLedgerModelIllegal: the histories of a broken ledger fail.
func TestLedgerModelIllegal(t *testing.T) {
	for _, tt := range []struct {
		name string
		pol  ledger.MismatchPolicy
		x    *h
	}{
		{"two commits both succeed", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, commit(1, "ra"), okay()).
			op("b/1", 20, 30, commit(1, "rb"), okay())},
		{"a commit with a stale token succeeds", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("b/1", 20, 30, begin("f"), claim("taken-over", 2)).
			op("a/2", 40, 50, commit(1, "ra"), okay())},
		{"a begin answers new after a commit", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, commit(1, "ra"), okay()).
			op("b/1", 40, 50, begin("f"), claim("new", 1))},
		{"a begin takes committed work over", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, commit(1, "ra"), okay()).
			op("b/1", 40, 50, begin("f"), claim("taken-over", 2))},
		{"a begin answers another result", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, commit(1, "ra"), okay()).
			op("b/1", 40, 50, begin("f"), done("rb", 1))},
		{"a takeover without a higher token", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("b/1", 20, 30, begin("f"), claim("taken-over", 1))},
		{"a commit after a fail", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, fail(1, "x"), okay()).
			op("b/1", 40, 50, commit(1, "r"), okay())},
		{"a stale token refused on the current one", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, commit(1, "r"), refused(history.ErrStale)).
			op("a/3", 40, 50, get(), history.Event{State: "pending", RecToken: 1})},
		{"held on a key never begun", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), held(1))},
		{"held with a token from the future", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("b/1", 20, 30, begin("f"), held(2))},
		{"get misses a commit", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, commit(1, "r"), okay()).
			op("b/1", 40, 50, get(), history.Event{State: "pending", RecToken: 1})},
		{"a reworded claim accepted under reject", ledger.MismatchReject, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("b/1", 20, 30, begin("g"), history.Event{Status: "held", State: "pending", RecToken: 1, Mismatch: true})},
		{"a note with a stale token succeeds", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("b/1", 20, 30, begin("f"), claim("taken-over", 2)).
			op("a/2", 40, 50, note(1, "n1"), history.Event{Token: 1})},
		{"a takeover loses the note", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, note(1, "n1"), history.Event{Token: 1}).
			op("b/1", 40, 50, begin("f"), claim("taken-over", 2))},
		{"a read returns an overwritten note", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, note(1, "n1"), history.Event{Token: 1}).
			op("a/3", 40, 50, note(1, "n2"), history.Event{Token: 1}).
			op("a/4", 60, 70, commit(1, "r"), okay()).
			op("b/1", 80, 90, get(), history.Event{State: "committed", RecToken: 1, Result: "r", Note: "n1"})},
		{"a new claim shows a note", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), withNote(claim("new", 1), "n0"))},
		{"a redrive's claim loses the failed work's note", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, note(1, "n1"), history.Event{Token: 1}).
			op("a/3", 40, 50, fail(1, "exhausted: x"), okay()).
			op("r/1", 80, 90, history.Event{Op: history.OpClear, Token: 1}, okay()).
			op("c/1", 100, 110, begin("f"), claim("new", 2))},
		{"a note after the commit succeeds", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, commit(1, "r"), okay()).
			op("a/3", 40, 50, note(1, "n1"), history.Event{Token: 1})},
		{"the commit loses the note", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, note(1, "n1"), history.Event{Token: 1}).
			op("a/3", 40, 50, commit(1, "r"), okay()).
			op("b/1", 60, 70, begin("f"), done("r", 1))},
		{"a failure loses the note", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, note(1, "n1"), history.Event{Token: 1}).
			op("a/3", 40, 50, fail(1, "exhausted: x"), okay()).
			op("b/1", 60, 70, get(), history.Event{State: "failed", RecToken: 1, Reason: "exhausted: x"})},
		{"a refused note taken for a write", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("a/2", 20, 30, note(1, "n1"), history.Event{Token: 1}).
			op("a/3", 40, 50, note(1, "big"), refused(history.ErrTooLarge)).
			op("b/1", 60, 70, get(), history.Event{State: "pending", RecToken: 1, Note: "big"})},
		{"a mismatch not reported", ledger.MismatchAccept, new(h).
			op("a/1", 0, 10, begin("f"), claim("new", 1)).
			op("b/1", 20, 30, begin("g"), held(1))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if linearizable(t, tt.pol, tt.x) {
				t.Errorf("a history a correct ledger cannot give was found linearizable:\n%s", tt.x)
			}
		})
	}
}

// TestCheckHistories runs the check on history files from two processes,
// one killed mid-operation, and draws the visualization of an illegal key.
func TestCheckHistories(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, x *h) string {
		var b strings.Builder
		b.WriteString(`{"ev":"open","process":"` + name + `","t":0}` + "\n")
		for _, o := range x.ops {
			for _, ev := range []history.Event{o.Call, o.Return} {
				if ev.Kind == "" {
					continue
				}
				line, err := json.Marshal(ev)
				if err != nil {
					t.Fatal(err)
				}
				b.Write(append(line, '\n'))
			}
		}
		path := filepath.Join(dir, name+".jsonl")
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := []string{
		write("p1", new(h).
			op("p1/1", 0, 10, begin("f"), claim("new", 1)).
			op("p1/2", 20, never, commit(1, "r"), okay()).
			op("p1/3", 0, 10, history.Event{Op: history.OpBegin, Key: "k2"}, claim("new", 1))),
		write("p2", new(h).
			op("p2/1", 30, 40, begin("f"), done("r", 1)).
			op("p2/2", 30, 40, history.Event{Op: history.OpBegin, Key: "k2"}, claim("taken-over", 2)).
			op("p2/3", 50, 60, history.Event{Op: history.OpCommit, Key: "k2", Token: 2, Result: "x"}, okay())),
	}
	html := filepath.Join(dir, "soak.linearizability.html")
	res := checkHistories(context.Background(), good, ledger.MismatchAccept, html)
	if !res.ok() || res.ops != 6 || res.unknown != 1 || res.keys != 2 || res.processes != 2 || res.visualized != "" {
		t.Fatalf("check of a correct history: %s (%+v)", res, res)
	}
	bad := append(good, write("p3", new(h).
		op("p3/1", 70, 80, history.Event{Op: history.OpCommit, Key: "k2", Token: 1, Result: "y"}, okay())))
	res = checkHistories(context.Background(), bad, ledger.MismatchAccept, html)
	if res.ok() || len(res.illegal) != 1 || res.illegal[0] != "k2" {
		t.Fatalf("check of a history with a stale commit that succeeded: %s; want k2 illegal", res)
	}
	b, err := os.ReadFile(html)
	if err != nil || res.visualized != html || !strings.Contains(string(b), "commit(t1") {
		t.Fatalf("visualization %q: %d bytes, %v; want an HTML file showing the stale commit", res.visualized, len(b), err)
	}
	if !strings.Contains(res.String(), "NOT linearizable on 1 keys, e.g. k2") {
		t.Errorf("verdict line %q does not name the key", res.String())
	}
}

// TestRecordedNotes runs notes through a recorder over a real ledger (a
// Badger one in memory, on a clock the test moves): a note, a duplicate
// held, the lease run out, the takeover that shows the note, the fenced
// holder's late note refused, the new holder's note, its failure, its
// clearing and the next claim that carries the note, the commit; the
// recorded history passes the check. The same history with the last read
// showing the first note instead of the last, or with the fenced holder's
// note accepted, fails it: the recorder's events carry what the model
// needs to tell.
func TestRecordedNotes(t *testing.T) {
	dir := t.TempDir()
	db, err := badgerstore.Open("", badgerstore.OpenOptions{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	clock := ledgertest.NewClock()
	bl, err := badgerstore.New(db, badgerstore.Options{Options: ledger.Options{Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "p1.jsonl")
	l, err := history.Open(path, bl, history.Options{Process: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var k dedupe.Key
	copy(k[:], "recorded notes")
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	claimBy := func(owner string, want ledger.Status) ledger.Claim {
		t.Helper()
		c, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: owner, Lease: time.Minute})
		if err != nil || c.Status != want {
			t.Fatalf("Begin by %s = %v, %v; want %v", owner, c.Status, err, want)
		}
		return c
	}
	a := claimBy("a", ledger.StatusNew)
	_, err = l.Note(ctx, k, a.Lease.Token, []byte("first answer"), time.Minute)
	must("Note", err)
	claimBy("b", ledger.StatusHeld)
	clock.Advance(2 * time.Minute)
	b := claimBy("b", ledger.StatusTakenOver)
	_, err = l.Note(ctx, k, a.Lease.Token, []byte("late answer"), time.Minute)
	if !errors.Is(err, ledger.ErrStaleToken) {
		t.Fatalf("the fenced holder's Note: %v; want ErrStaleToken", err)
	}
	_, err = l.Note(ctx, k, b.Lease.Token, []byte("second answer"), time.Minute)
	must("Note", err)
	_, err = l.Get(ctx, k)
	must("Get", err)
	must("Fail", l.Fail(ctx, k, b.Lease.Token, "exhausted: test"))
	claimBy("c", ledger.StatusFailed)
	must("Clear", l.Clear(ctx, k, b.Lease.Token, "redriven by test"))
	n := claimBy("c", ledger.StatusNew)
	if string(n.Record.Note) != "second answer" {
		t.Fatalf("the claim after the clearing shows note %q", n.Record.Note)
	}
	must("Commit", l.Commit(ctx, k, n.Lease.Token, ledger.Result{DownstreamID: "d"}))
	_, err = l.Get(ctx, k)
	must("Get", err)
	must("Close", l.Close())

	res := checkHistories(ctx, []string{path}, ledger.MismatchAccept, "")
	if !res.ok() || res.ops != 13 || res.unknown != 0 {
		t.Fatalf("check of the recorded history: %s (%+v); want 13 operations, linearizable", res, res)
	}
	ops, _, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	first, second := history.NoteHash([]byte("first answer")), history.NoteHash([]byte("second answer"))
	var notes, shown int
	for _, o := range ops {
		if o.Call.Op == history.OpNote {
			notes++
		}
		if o.Return.Note != "" {
			shown++
		}
	}
	last := ops[len(ops)-2] // the last Get; Close is last
	if notes != 3 || shown != 6 || last.Call.Op != history.OpGet || last.Return.Note != second {
		t.Fatalf("recorded %d Notes, %d returns showing a note, last Get showing %q; want 3, 6 and %q", notes, shown, last.Return.Note, second)
	}
	for _, tt := range []struct {
		name   string
		tamper func(ops []history.Op)
	}{
		{"the last read shows an overwritten note", func(ops []history.Op) { ops[len(ops)-2].Return.Note = first }},
		{"the fenced holder's note accepted", func(ops []history.Op) {
			for i, o := range ops {
				if o.Call.Op == history.OpNote && o.Return.Err == history.ErrStale {
					ops[i].Return = history.Event{Kind: o.Return.Kind, ID: o.Return.ID, Time: o.Return.Time, Token: o.Call.Token}
				}
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bad := slices.Clone(ops)
			tt.tamper(bad)
			var b []byte
			b = append(b, `{"ev":"open","process":"p1","t":0}`+"\n"...)
			for _, o := range bad {
				for _, ev := range []history.Event{o.Call, o.Return} {
					line, err := json.Marshal(ev)
					if err != nil {
						t.Fatal(err)
					}
					b = append(append(b, line...), '\n')
				}
			}
			p := filepath.Join(dir, "tampered.jsonl")
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if res := checkHistories(ctx, []string{p}, ledger.MismatchAccept, ""); res.ok() || len(res.illegal) != 1 {
				t.Fatalf("check of the tampered history: %s; want %v not linearizable", res, k)
			}
		})
	}
}
