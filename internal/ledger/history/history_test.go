package history_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/ledger/history"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

var ctx = context.Background()

// newBadger returns a Badger ledger in memory, closed with the test.
func newBadger(t *testing.T, opts ledger.Options) *badgerstore.Ledger {
	t.Helper()
	db, err := badgerstore.Open("", badgerstore.OpenOptions{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	l, err := badgerstore.New(db, badgerstore.Options{Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestConformance: a recorded ledger keeps the ledger's contract.
func TestConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T, opts ledger.Options) ledger.Ledger {
		rec, err := history.Open(filepath.Join(t.TempDir(), "history.jsonl"), newBadger(t, opts), history.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return rec
	})
}

func key(i int) dedupe.Key {
	var k dedupe.Key
	copy(k[:], fmt.Sprintf("history-key-%04d", i))
	return k
}

// TestRecord runs the protocol through a recorder and reads back every
// operation with its invocation and response.
func TestRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.jsonl")
	l, err := history.Open(path, newBadger(t, ledger.Options{}), history.Options{Process: "replica-0"})
	if err != nil {
		t.Fatal(err)
	}
	k, other := key(1), key(2)
	lease := ledger.BeginOptions{Owner: "a", Lease: time.Minute}
	c, err := l.Begin(ctx, k, lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: "b", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Extend(ctx, k, c.Lease.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	res := ledger.Result{DownstreamID: "INC-1", Response: []byte("ok")}
	if err := l.Commit(ctx, k, c.Lease.Token, res); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Begin(ctx, k, lease); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(ctx, k, c.Lease.Token, res); !errors.Is(err, ledger.ErrStaleToken) {
		t.Fatalf("second Commit: %v; want ErrStaleToken", err)
	}
	if err := l.Fail(ctx, other, 1, "gave up"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Fail of an unknown key: %v; want ErrNotFound", err)
	}
	if _, err := l.Get(ctx, k); err != nil {
		t.Fatal(err)
	}
	for range l.Pending(ctx) {
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	ops, st, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Processes != 1 || st.Unanswered != 0 || st.Torn != 0 || st.Ops != len(ops) {
		t.Errorf("stats %+v; want one process, nothing unanswered or torn", st)
	}
	type line struct {
		op, status, state, err string
		token, recToken        uint64
	}
	want := []line{
		{op: "begin", status: "new", state: "pending", token: 1, recToken: 1},
		{op: "begin", status: "held", state: "pending", recToken: 1},
		{op: "extend", token: 1},
		{op: "commit"},
		{op: "begin", status: "committed", state: "committed", recToken: 1},
		{op: "commit", err: history.ErrStale},
		{op: "fail", err: history.ErrNotFound},
		{op: "get", state: "committed", recToken: 1},
		{op: "pending"},
		{op: "close"},
	}
	if len(ops) != len(want) {
		t.Fatalf("read %d operations; want %d: %+v", len(ops), len(want), ops)
	}
	var last int64
	for i, o := range ops {
		got := line{op: o.Call.Op, status: o.Return.Status, state: o.Return.State, err: o.Return.Err, token: o.Return.Token, recToken: o.Return.RecToken}
		if got != want[i] {
			t.Errorf("operation %d = %+v; want %+v", i, got, want[i])
		}
		if !o.Answered() || !o.Known() || o.Call.Time < last || o.Return.Time < o.Call.Time {
			t.Errorf("operation %d: answered %v, known %v, called at %d, returned at %d (previous at %d)", i, o.Answered(), o.Known(), o.Call.Time, o.Return.Time, last)
		}
		if !strings.HasPrefix(o.Call.ID, "replica-0/") {
			t.Errorf("operation %d: id %q; want one of replica-0", i, o.Call.ID)
		}
		last = o.Return.Time
	}
	if h := history.ResultHash(res); ops[3].Call.Result != h || ops[4].Return.Result != h || ops[7].Return.Result != h {
		t.Errorf("result hashes: commit %q, begin %q, get %q; want %q", ops[3].Call.Result, ops[4].Return.Result, ops[7].Return.Result, h)
	}
	if ops[1].Call.Owner != "b" || ops[0].Call.Lease != int64(time.Minute) || ops[3].Call.Token != 1 || ops[3].Call.Key != k.String() {
		t.Errorf("invocations lost their arguments: %+v, %+v, %+v", ops[0].Call, ops[1].Call, ops[3].Call)
	}
}

// TestBatch: a recorder of a ledger that batches batches too, and records
// each request of a batch as an operation of its own.
func TestBatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.jsonl")
	l, err := history.Open(path, newBadger(t, ledger.Options{}), history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.(ledger.Batcher); !ok {
		t.Fatalf("the recorder of a Badger ledger is a %T, not a ledger.Batcher", l)
	}
	reqs := []ledger.BeginRequest{
		{Key: key(1), Options: ledger.BeginOptions{Lease: time.Minute}},
		{Key: key(2), Options: ledger.BeginOptions{Lease: time.Minute}},
		{Key: key(1), Options: ledger.BeginOptions{Lease: time.Minute}},
	}
	res := ledger.BeginAll(ctx, l, reqs)
	var commits []ledger.CommitRequest
	for i, r := range res[:2] {
		commits = append(commits, ledger.CommitRequest{Key: reqs[i].Key, Token: r.Claim.Lease.Token})
	}
	for i, err := range ledger.CommitAll(ctx, l, commits) {
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	l.Close()
	ops, _, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var statuses []string
	for _, o := range ops[:5] {
		statuses = append(statuses, o.Call.Op+":"+o.Return.Status+o.Return.Err)
	}
	if got, want := strings.Join(statuses, " "), "begin:new begin:new begin:held commit: commit:"; got != want {
		t.Errorf("batched operations %q; want %q", got, want)
	}
	if ops[0].Call.Time != ops[2].Call.Time || ops[0].Return.Time != ops[2].Return.Time {
		t.Errorf("the requests of one batch were recorded at different times: %+v and %+v", ops[0], ops[2])
	}
}

// TestReadUnanswered: a process killed mid-operation leaves an invocation
// without a response, and perhaps a line cut short; a process that starts
// after it appends to the same file.
func TestReadUnanswered(t *testing.T) {
	file := strings.Join([]string{
		``,
		`{"ev":"open","process":"p1","t":1}`,
		`{"ev":"call","id":"p1/1","t":10,"op":"begin","key":"00"}`,
		`{"ev":"return","id":"p1/1","t":20,"status":"new","token":1}`,
		`{"ev":"call","id":"p1/2","t":30,"op":"commit","key":"00","token":1}`,
		`{"ev":"call","id":"p1/3","t":31,"op":"commit","key":"01","token":1}`,
		`{"ev":"return","id":"p1/3","t":40,"err":"other","msg":"timeout"}`,
		`{"ev":"call","id":"p1/4","t":41,"op":"ext`,
		`{"ev":"open","process":"p2","t":50}`,
		`{"ev":"call","id":"p2/1","t":60,"op":"begin","key":"00"}`,
		`{"ev":"return","id":"p2/1","t":70,"status":"taken-over","token":2}`,
	}, "\n")
	ops, st, err := history.Read(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if want := (history.Stats{Processes: 2, Ops: 4, Unanswered: 1, Torn: 1}); st != want {
		t.Errorf("stats %+v; want %+v", st, want)
	}
	for i, w := range []struct {
		answered, known bool
		ret             int64
	}{{true, true, 20}, {false, false, history.Unanswered}, {true, false, 40}, {true, true, 70}} {
		o := ops[i]
		if o.Answered() != w.answered || o.Known() != w.known || o.ReturnTime() != w.ret {
			t.Errorf("operation %s: answered %v, known %v, return %d; want %v, %v, %d", o.Call.ID, o.Answered(), o.Known(), o.ReturnTime(), w.answered, w.known, w.ret)
		}
	}
	if _, _, err := history.Read(strings.NewReader(`{"ev":"return","id":"x/1","t":1}`)); err == nil {
		t.Error("a response to an operation never invoked was read without an error")
	}
}

// clock is a wall clock that moves only when told to.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestOutage: while an outage is on, writes fail with ErrOutage and reach
// nothing; reads work; after it, writes work again.
func TestOutage(t *testing.T) {
	var c clock
	c.advance(time.Hour)
	l, start := history.NewOutage(newBadger(t, ledger.Options{}), c.now)
	if _, ok := l.(ledger.Batcher); !ok {
		t.Fatalf("the outage switch of a Badger ledger is a %T, not a ledger.Batcher", l)
	}
	k := key(1)
	first, err := l.Begin(ctx, k, ledger.BeginOptions{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	start(4 * time.Second)
	if _, err := l.Begin(ctx, key(2), ledger.BeginOptions{Lease: time.Minute}); !errors.Is(err, history.ErrOutage) {
		t.Errorf("Begin during the outage: %v; want ErrOutage", err)
	}
	if _, err := l.Extend(ctx, k, first.Lease.Token, time.Minute); !errors.Is(err, history.ErrOutage) {
		t.Errorf("Extend during the outage: %v; want ErrOutage", err)
	}
	if _, err := l.Note(ctx, k, first.Lease.Token, []byte("an answer"), 0); !errors.Is(err, history.ErrOutage) {
		t.Errorf("Note during the outage: %v; want ErrOutage", err)
	}
	if err := l.Commit(ctx, k, first.Lease.Token, ledger.Result{}); !errors.Is(err, history.ErrOutage) {
		t.Errorf("Commit during the outage: %v; want ErrOutage", err)
	}
	if err := l.Fail(ctx, k, first.Lease.Token, "x"); !errors.Is(err, history.ErrOutage) {
		t.Errorf("Fail during the outage: %v; want ErrOutage", err)
	}
	for i, r := range ledger.BeginAll(ctx, l, []ledger.BeginRequest{{Key: key(3), Options: ledger.BeginOptions{Lease: time.Minute}}}) {
		if !errors.Is(r.Err, history.ErrOutage) {
			t.Errorf("batched Begin %d during the outage: %v; want ErrOutage", i, r.Err)
		}
	}
	for i, err := range ledger.CommitAll(ctx, l, []ledger.CommitRequest{{Key: k, Token: first.Lease.Token}}) {
		if !errors.Is(err, history.ErrOutage) {
			t.Errorf("batched Commit %d during the outage: %v; want ErrOutage", i, err)
		}
	}
	if rec, err := l.Get(ctx, k); err != nil || rec.State != ledger.StatePending || rec.Note != nil {
		t.Errorf("Get during the outage = %v, note %q, %v; want the pending record, without the note refused", rec.State, rec.Note, err)
	}
	if _, err := l.Get(ctx, key(2)); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Get of a key refused during the outage: %v; want ErrNotFound (nothing written)", err)
	}
	c.advance(4 * time.Second)
	if _, err := l.Note(ctx, k, first.Lease.Token, []byte("an answer"), 0); err != nil {
		t.Errorf("Note after the outage: %v", err)
	}
	if err := l.Commit(ctx, k, first.Lease.Token, ledger.Result{}); err != nil {
		t.Errorf("Commit after the outage: %v", err)
	}
	if rec, err := l.Get(ctx, k); err != nil || string(rec.Note) != "an answer" {
		t.Errorf("after the outage: note %q, %v; want the note written after it, kept through the commit", rec.Note, err)
	}
}
