// Package ledgertest is the conformance suite for ledger.Ledger
// implementations, in the spirit of testing/slogtest: a store that passes
// Run keeps the ledger's contract.
//
//	func TestConformance(t *testing.T) {
//		ledgertest.Run(t, func(t *testing.T, opts ledger.Options) ledger.Ledger {
//			return newMyLedger(t, opts)
//		})
//	}
package ledgertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Clock is a ledger.Clock that moves only when told to. The zero Clock
// starts at an arbitrary fixed instant.
type Clock struct {
	ns atomic.Int64
}

var epoch = time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)

// NewClock returns a Clock at a fixed instant.
func NewClock() *Clock { return &Clock{} }

// Now implements ledger.Clock.
func (c *Clock) Now() time.Time { return epoch.Add(time.Duration(c.ns.Load())) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// NewLedger returns a fresh, empty ledger configured with opts. opts.Clock is
// always set. The ledger is closed by the suite; cleanup of its store is the
// constructor's (t.Cleanup).
type NewLedger func(t *testing.T, opts ledger.Options) ledger.Ledger

// Run runs the conformance suite against the ledgers newLedger returns.
func Run(t *testing.T, newLedger NewLedger) {
	s := &suite{newLedger: newLedger}
	for _, tt := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"BeginNew", s.testBeginNew},
		{"CommitThenBegin", s.testCommitThenBegin},
		{"Held", s.testHeld},
		{"TakeOver", s.testTakeOver},
		{"TakeOverAfterSkew", s.testTakeOverAfterSkew},
		{"Fencing", s.testFencing},
		{"Extend", s.testExtend},
		{"Note", s.testNote},
		{"NoteThroughClear", s.testNoteThroughClear},
		{"NoteBounds", s.testNoteBounds},
		{"Release", s.testRelease},
		{"Fail", s.testFail},
		{"NotFound", s.testNotFound},
		{"Mismatch", s.testMismatch},
		{"Retention", s.testRetention},
		{"ResultTooLarge", s.testResultTooLarge},
		{"Pending", s.testPending},
		{"InvalidArguments", s.testInvalidArguments},
		{"Closed", s.testClosed},
		{"RaceBegin", s.testRaceBegin},
		{"Clear", s.testClear},
		{"ClearRefuses", s.testClearRefuses},
		{"ClearMismatch", s.testClearMismatch},
		{"RaceClear", s.testRaceClear},
	} {
		t.Run(tt.name, tt.fn)
	}
}

type suite struct {
	newLedger NewLedger
}

const lease = 30 * time.Second

func (s *suite) open(t *testing.T, opts ledger.Options) (ledger.Ledger, *Clock) {
	t.Helper()
	c := NewClock()
	opts.Clock = c
	l := s.newLedger(t, opts)
	t.Cleanup(func() { l.Close() })
	return l, c
}

var ctx = context.Background()

// key returns a distinct key per test and index.
func key(t *testing.T, i int) dedupe.Key {
	var k dedupe.Key
	copy(k[:], fmt.Sprintf("%-8.8s%8d", t.Name(), i))
	k[0] ^= byte(len(t.Name()))
	return k
}

func fp(s string) dedupe.Fingerprint {
	var f dedupe.Fingerprint
	copy(f[:], s)
	return f
}

func begin(t *testing.T, l ledger.Ledger, k dedupe.Key, owner string, want ledger.Status) ledger.Claim {
	t.Helper()
	c, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: owner, Fingerprint: fp("payload"), Lease: lease})
	if err != nil {
		t.Fatalf("Begin(%v) by %s: %v", k, owner, err)
	}
	if c.Status != want {
		t.Fatalf("Begin(%v) by %s = %v; want %v (record %+v)", k, owner, c.Status, want, c.Record)
	}
	return c
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error = %v; want %v", what, err, want)
	}
}

func (s *suite) testBeginNew(t *testing.T) {
	l, c := s.open(t, ledger.Options{})
	k := key(t, 1)
	cl := begin(t, l, k, "worker-a", ledger.StatusNew)
	if cl.Lease.Token == 0 || !cl.Lease.Until.Equal(c.Now().Add(lease)) {
		t.Errorf("Begin lease = %+v; want a non-zero token until now+%v", cl.Lease, lease)
	}
	rec, err := l.Get(ctx, k)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if rec.State != ledger.StatePending || rec.Owner != "worker-a" || rec.Token != cl.Lease.Token ||
		rec.Attempts != 1 || rec.Fingerprint != fp("payload") || rec.Key != k || !rec.LeaseUntil.Equal(cl.Lease.Until) {
		t.Errorf("Get after Begin = %+v; want pending, owner worker-a, token %d, 1 attempt", rec, cl.Lease.Token)
	}
}

func (s *suite) testCommitThenBegin(t *testing.T) {
	l, _ := s.open(t, ledger.Options{})
	k := key(t, 1)
	cl := begin(t, l, k, "worker-a", ledger.StatusNew)
	res := ledger.Result{DownstreamID: "INC-4411", ModelRef: "llm/ab12", Response: []byte(`{"ticket":"INC-4411","\u00e9":"\x00\xff"}`)}
	if err := l.Commit(ctx, k, cl.Lease.Token, res); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	again := begin(t, l, k, "worker-b", ledger.StatusCommitted)
	got := again.Record.Result
	if got.DownstreamID != res.DownstreamID || got.ModelRef != res.ModelRef || !bytes.Equal(got.Response, res.Response) || got.Committed.IsZero() {
		t.Errorf("Begin after Commit: result = %+v; want %+v with a commit time", got, res)
	}
	if err := l.Commit(ctx, k, cl.Lease.Token, res); !errors.Is(err, ledger.ErrStaleToken) {
		t.Errorf("second Commit: error = %v; want ErrStaleToken", err)
	}
	rec, err := l.Get(ctx, k)
	if err != nil || rec.State != ledger.StateCommitted || !bytes.Equal(rec.Result.Response, res.Response) {
		t.Errorf("Get = %+v, %v; want committed with the result", rec, err)
	}
}

func (s *suite) testHeld(t *testing.T) {
	l, c := s.open(t, ledger.Options{})
	k := key(t, 1)
	begin(t, l, k, "worker-a", ledger.StatusNew)
	c.Advance(10 * time.Second)
	held := begin(t, l, k, "worker-b", ledger.StatusHeld)
	if held.RetryAfter != 20*time.Second {
		t.Errorf("Held RetryAfter = %v; want 20s", held.RetryAfter)
	}
	if held.Record.Owner != "worker-a" {
		t.Errorf("Held record owner = %q; want worker-a", held.Record.Owner)
	}
}

func (s *suite) testTakeOver(t *testing.T) {
	l, c := s.open(t, ledger.Options{})
	k := key(t, 1)
	a := begin(t, l, k, "worker-a", ledger.StatusNew)
	c.Advance(lease)
	b := begin(t, l, k, "worker-b", ledger.StatusTakenOver)
	if b.Lease.Token <= a.Lease.Token {
		t.Errorf("takeover token %d; want more than %d", b.Lease.Token, a.Lease.Token)
	}
	rec, err := l.Get(ctx, k)
	if err != nil || rec.Owner != "worker-b" || rec.Attempts != 2 || rec.Token != b.Lease.Token {
		t.Errorf("Get after takeover = %+v, %v; want owner worker-b, 2 attempts, token %d", rec, err, b.Lease.Token)
	}
}

// testTakeOverAfterSkew: with Options.ClockSkew, a claim whose lease ran
// out is held for ClockSkew more (its holder's clock may be behind the
// taker's, and it may still be sending), with RetryAfter saying how long;
// then taken over. A claim its holder released is taken over at once.
func (s *suite) testTakeOverAfterSkew(t *testing.T) {
	const skew = 3 * time.Second
	l, c := s.open(t, ledger.Options{ClockSkew: skew})
	k := key(t, 1)
	a := begin(t, l, k, "worker-a", ledger.StatusNew)
	c.Advance(lease + time.Second) // out by the taker's clock, not by ClockSkew
	held := begin(t, l, k, "worker-b", ledger.StatusHeld)
	if held.RetryAfter != skew-time.Second {
		t.Errorf("RetryAfter %v a second past the lease; want %v (the skew left)", held.RetryAfter, skew-time.Second)
	}
	c.Advance(skew - time.Second)
	b := begin(t, l, k, "worker-b", ledger.StatusTakenOver)
	if b.Lease.Token <= a.Lease.Token || b.Released {
		t.Errorf("takeover past the skew = %+v; want a higher token than %d, not Released", b, a.Lease.Token)
	}
	if _, err := l.Extend(ctx, k, b.Lease.Token, 0); err != nil {
		t.Fatalf("Extend by 0 (release): %v", err)
	}
	if got := begin(t, l, k, "worker-c", ledger.StatusTakenOver); !got.Released {
		t.Errorf("Begin after a release = %+v; want it taken over at once, Released", got)
	}
}

// testFencing: holder A's lease expires, B takes over and commits; A's late
// Commit, Fail and Extend are all rejected, and B's result stands.
func (s *suite) testFencing(t *testing.T) {
	l, c := s.open(t, ledger.Options{})
	k := key(t, 1)
	a := begin(t, l, k, "worker-a", ledger.StatusNew)
	c.Advance(lease + time.Second)
	b := begin(t, l, k, "worker-b", ledger.StatusTakenOver)

	// A wakes up before B commits: it is fenced already.
	_, err := l.Extend(ctx, k, a.Lease.Token, lease)
	wantErr(t, "zombie Extend", err, ledger.ErrStaleToken)
	wantErr(t, "zombie Commit before B's", l.Commit(ctx, k, a.Lease.Token, ledger.Result{DownstreamID: "from-a"}), ledger.ErrStaleToken)

	if err := l.Commit(ctx, k, b.Lease.Token, ledger.Result{DownstreamID: "from-b"}); err != nil {
		t.Fatalf("B's Commit: %v", err)
	}
	wantErr(t, "zombie Commit after B's", l.Commit(ctx, k, a.Lease.Token, ledger.Result{DownstreamID: "from-a"}), ledger.ErrStaleToken)
	wantErr(t, "zombie Fail", l.Fail(ctx, k, a.Lease.Token, "gave up"), ledger.ErrStaleToken)
	rec, err := l.Get(ctx, k)
	if err != nil || rec.State != ledger.StateCommitted || rec.Result.DownstreamID != "from-b" {
		t.Errorf("Get = %+v, %v; want B's committed result", rec, err)
	}
}

func (s *suite) testExtend(t *testing.T) {
	l, c := s.open(t, ledger.Options{})
	k := key(t, 1)
	a := begin(t, l, k, "worker-a", ledger.StatusNew)
	c.Advance(20 * time.Second)
	ls, err := l.Extend(ctx, k, a.Lease.Token, time.Minute)
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if !ls.Until.Equal(c.Now().Add(time.Minute)) {
		t.Errorf("Extend until %v; want %v", ls.Until, c.Now().Add(time.Minute))
	}
	// Past the original lease, the work is still held.
	c.Advance(30 * time.Second)
	begin(t, l, k, "worker-b", ledger.StatusHeld)
	// A lease that ran out but was not taken over can still be renewed and
	// committed: nobody else holds a higher token.
	c.Advance(time.Minute)
	ls, err = l.Extend(ctx, k, ls.Token, time.Minute)
	if err != nil {
		t.Fatalf("Extend after expiry without takeover: %v", err)
	}
	if err := l.Commit(ctx, k, ls.Token, ledger.Result{DownstreamID: "x"}); err != nil {
		t.Fatalf("Commit with the extended lease: %v", err)
	}
}

// testRelease: a holder that releases its claim (Extend by 0) gives the
// work back undone: the next Begin takes it over at once (the clock
// standing still), with Released set and a higher token, and the record
// keeps the fingerprint it was begun with. A holder that ends its lease
// with a positive duration instead, or lets it run out, leaves a plain
// takeover, without Released.
func (s *suite) testRelease(t *testing.T) {
	l, c := s.open(t, ledger.Options{})
	k := key(t, 1)
	a := begin(t, l, k, "worker-a", ledger.StatusNew)
	if _, err := l.Extend(ctx, k, a.Lease.Token, 0); err != nil {
		t.Fatalf("Extend by 0 (release): %v", err)
	}
	rec, err := l.Get(ctx, k)
	if err != nil || rec.State != ledger.StatePending || rec.Reason != ledger.ReasonReleased {
		t.Errorf("Get after the release = %+v, %v; want pending, %q", rec, err, ledger.ReasonReleased)
	}
	b := begin(t, l, k, "worker-b", ledger.StatusTakenOver)
	if !b.Released || b.Lease.Token <= a.Lease.Token || b.Record.Reason != "" || b.Record.Attempts != 2 {
		t.Errorf("Begin after a release = %+v; want Released, a higher token, no reason, 2 attempts", b)
	}
	// B stops: its lease ends, with no release.
	if _, err := l.Extend(ctx, k, b.Lease.Token, time.Nanosecond); err != nil {
		t.Fatalf("Extend by 1ns: %v", err)
	}
	c.Advance(time.Nanosecond)
	if got := begin(t, l, k, "worker-c", ledger.StatusTakenOver); got.Released {
		t.Errorf("Begin after a lease that ended = %+v; want not Released", got)
	}
	c.Advance(lease)
	d := begin(t, l, k, "worker-d", ledger.StatusTakenOver)
	if d.Released {
		t.Errorf("Begin after a lease that ran out = %+v; want not Released", d)
	}
	// Released work keeps its fingerprint: another payload is a mismatch.
	if _, err := l.Extend(ctx, k, d.Lease.Token, 0); err != nil {
		t.Fatalf("Extend by 0 (release): %v", err)
	}
	e, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: "worker-e", Fingerprint: fp("another payload"), Lease: lease})
	if err != nil || e.Status != ledger.StatusTakenOver || !e.Released || !e.Mismatch {
		t.Errorf("Begin with another payload after a release = %+v, %v; want taken over, Released, Mismatch", e, err)
	}
	// A renewal and a commit clear the mark of a release.
	if _, err := l.Extend(ctx, k, e.Lease.Token, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Extend(ctx, k, e.Lease.Token, lease); err != nil {
		t.Fatalf("Extend after a release, by the holder: %v", err)
	}
	if err := l.Commit(ctx, k, e.Lease.Token, ledger.Result{DownstreamID: "done"}); err != nil {
		t.Fatal(err)
	}
	if rec, err := l.Get(ctx, k); err != nil || rec.State != ledger.StateCommitted || rec.Reason != "" {
		t.Errorf("Get after the commit = %+v, %v; want committed, no reason", rec, err)
	}
}

func (s *suite) testFail(t *testing.T) {
	l, _ := s.open(t, ledger.Options{})
	k := key(t, 1)
	a := begin(t, l, k, "worker-a", ledger.StatusNew)
	if err := l.Fail(ctx, k, a.Lease.Token, "422 from the payments API"); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	f := begin(t, l, k, "worker-b", ledger.StatusFailed)
	if f.Record.Reason != "422 from the payments API" {
		t.Errorf("failed record reason = %q", f.Record.Reason)
	}
	wantErr(t, "Commit after Fail", l.Commit(ctx, k, a.Lease.Token, ledger.Result{}), ledger.ErrStaleToken)
}

func (s *suite) testNotFound(t *testing.T) {
	l, _ := s.open(t, ledger.Options{})
	k := key(t, 1)
	_, err := l.Get(ctx, k)
	wantErr(t, "Get", err, ledger.ErrNotFound)
	wantErr(t, "Commit", l.Commit(ctx, k, 1, ledger.Result{}), ledger.ErrNotFound)
	wantErr(t, "Fail", l.Fail(ctx, k, 1, "x"), ledger.ErrNotFound)
	_, err = l.Extend(ctx, k, 1, lease)
	wantErr(t, "Extend", err, ledger.ErrNotFound)
}

func (s *suite) testMismatch(t *testing.T) {
	t.Run("accept", func(t *testing.T) {
		l, c := s.open(t, ledger.Options{})
		k := key(t, 1)
		begin(t, l, k, "worker-a", ledger.StatusNew)
		other := ledger.BeginOptions{Owner: "worker-b", Fingerprint: fp("reworded"), Lease: lease}
		cl, err := l.Begin(ctx, k, other)
		if err != nil || cl.Status != ledger.StatusHeld || !cl.Mismatch {
			t.Fatalf("Begin with another fingerprint = %v mismatch=%v, %v; want held with a mismatch", cl.Status, cl.Mismatch, err)
		}
		c.Advance(lease)
		cl, err = l.Begin(ctx, k, other)
		if err != nil || cl.Status != ledger.StatusTakenOver || !cl.Mismatch || cl.Record.Mismatches != 1 {
			t.Fatalf("takeover with another fingerprint = %+v, %v; want taken over, 1 mismatch counted", cl, err)
		}
		rec, _ := l.Get(ctx, k)
		if rec.Mismatches != 1 || rec.Fingerprint != fp("payload") {
			t.Errorf("record = %+v; want 1 mismatch and the original fingerprint", rec)
		}
	})
	t.Run("reject", func(t *testing.T) {
		l, _ := s.open(t, ledger.Options{Mismatch: ledger.MismatchReject})
		k := key(t, 1)
		a := begin(t, l, k, "worker-a", ledger.StatusNew)
		if err := l.Commit(ctx, k, a.Lease.Token, ledger.Result{DownstreamID: "ch_1"}); err != nil {
			t.Fatal(err)
		}
		_, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: "b", Fingerprint: fp("other amount"), Lease: lease})
		wantErr(t, "Begin with another fingerprint", err, ledger.ErrFingerprintMismatch)
		begin(t, l, k, "worker-c", ledger.StatusCommitted) // the same payload is fine
	})
}

func (s *suite) testRetention(t *testing.T) {
	l, c := s.open(t, ledger.Options{Retention: time.Hour})
	k := key(t, 1)
	a := begin(t, l, k, "worker-a", ledger.StatusNew)
	if err := l.Commit(ctx, k, a.Lease.Token, ledger.Result{DownstreamID: "x"}); err != nil {
		t.Fatal(err)
	}
	c.Advance(59 * time.Minute)
	begin(t, l, k, "worker-b", ledger.StatusCommitted)
	c.Advance(2 * time.Minute)
	_, err := l.Get(ctx, k)
	wantErr(t, "Get after retention", err, ledger.ErrNotFound)
	begin(t, l, k, "worker-c", ledger.StatusNew)
}

func (s *suite) testResultTooLarge(t *testing.T) {
	l, _ := s.open(t, ledger.Options{MaxResultBytes: 1024})
	k := key(t, 1)
	a := begin(t, l, k, "worker-a", ledger.StatusNew)
	err := l.Commit(ctx, k, a.Lease.Token, ledger.Result{Response: make([]byte, 1025)})
	wantErr(t, "Commit of 1025 bytes", err, ledger.ErrResultTooLarge)
	rec, err := l.Get(ctx, k)
	if err != nil || rec.State != ledger.StatePending {
		t.Fatalf("after a rejected Commit, Get = %+v, %v; want still pending", rec, err)
	}
	if err := l.Commit(ctx, k, a.Lease.Token, ledger.Result{Response: make([]byte, 1000)}); err != nil {
		t.Fatalf("Commit of 1000 bytes: %v", err)
	}
}

func (s *suite) testPending(t *testing.T) {
	l, _ := s.open(t, ledger.Options{})
	want := map[dedupe.Key]bool{}
	for i := range 5 {
		k := key(t, i)
		c := begin(t, l, k, "worker", ledger.StatusNew)
		if i%2 == 0 {
			want[k] = true
			continue
		}
		if err := l.Commit(ctx, k, c.Lease.Token, ledger.Result{}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[dedupe.Key]bool{}
	for rec, err := range l.Pending(ctx) {
		if err != nil {
			t.Fatalf("Pending: %v", err)
		}
		if rec.State != ledger.StatePending {
			t.Errorf("Pending yielded a %v record", rec.State)
		}
		got[rec.Key] = true
	}
	if len(got) != len(want) {
		t.Errorf("Pending listed %d records; want %d", len(got), len(want))
	}
	for k := range want {
		if !got[k] {
			t.Errorf("Pending did not list %v", k)
		}
	}
}

func (s *suite) testInvalidArguments(t *testing.T) {
	l, _ := s.open(t, ledger.Options{})
	k := key(t, 1)
	_, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: "a"})
	wantErr(t, "Begin without a lease", err, ledger.ErrInvalidLedger)
	a := begin(t, l, k, "worker-a", ledger.StatusNew)
	_, err = l.Extend(ctx, k, a.Lease.Token, -time.Second)
	wantErr(t, "Extend by a negative duration", err, ledger.ErrInvalidLedger)
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Begin(canceled, key(t, 2), ledger.BeginOptions{Lease: lease}); !errors.Is(err, context.Canceled) {
		t.Errorf("Begin with a canceled context: error = %v; want context.Canceled", err)
	}
}

func (s *suite) testClosed(t *testing.T) {
	l, _ := s.open(t, ledger.Options{})
	k := key(t, 1)
	a := begin(t, l, k, "worker-a", ledger.StatusNew)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, err := l.Begin(ctx, key(t, 2), ledger.BeginOptions{Lease: lease})
	wantErr(t, "Begin after Close", err, ledger.ErrClosed)
	wantErr(t, "Commit after Close", l.Commit(ctx, k, a.Lease.Token, ledger.Result{}), ledger.ErrClosed)
	_, err = l.Get(ctx, k)
	wantErr(t, "Get after Close", err, ledger.ErrClosed)
}

// testRaceBegin has 64 goroutines Begin the same 1,000 keys: each key has
// exactly one winner, and every other caller is told it is held.
func (s *suite) testRaceBegin(t *testing.T) {
	l, _ := s.open(t, ledger.Options{})
	n := 1000
	if testing.Short() {
		n = 100
	}
	keys := make([]dedupe.Key, n)
	for i := range keys {
		keys[i] = key(t, i)
	}
	RaceBegin(t, []ledger.Ledger{l}, 64, keys, time.Hour, ledger.StatusNew)
}

// RaceBegin has goroutines (spread evenly over ledgers, which may be
// several handles on one store, as consumer replicas are) call Begin on
// every one of keys, each goroutine starting at a different key, and checks
// that for each key exactly one caller got want and every other one
// StatusHeld.
func RaceBegin(t *testing.T, ledgers []ledger.Ledger, goroutines int, keys []dedupe.Key, lease time.Duration, want ledger.Status) {
	t.Helper()
	n := len(keys)
	winners := make([]atomic.Int32, n)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		l := ledgers[g%len(ledgers)]
		owner := fmt.Sprintf("ledger%d/g%d", g%len(ledgers), g)
		wg.Go(func() {
			for j := range n {
				i := (j + g*(n/goroutines+1)) % n // start at different keys
				c, err := l.Begin(ctx, keys[i], ledger.BeginOptions{Owner: owner, Lease: lease})
				if err != nil {
					errs <- fmt.Errorf("Begin(key %d) by %s: %w", i, owner, err)
					return
				}
				switch c.Status {
				case want:
					winners[i].Add(1)
				case ledger.StatusHeld:
				default:
					errs <- fmt.Errorf("Begin(key %d) by %s = %v; want %v or held", i, owner, c.Status, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range winners {
		if w := winners[i].Load(); w != 1 {
			t.Errorf("key %d: %d callers got %v; want 1", i, w, want)
		}
	}
}
