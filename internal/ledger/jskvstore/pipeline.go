package jskvstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/kvbucket"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgerproto"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// The fast path. A round trip to the bucket's stream leader is what a KV
// ledger pays for, and the plain protocol paid four per unit of work: a read
// and a compare-and-set write to claim, a leader read and a write to
// commit. Two are enough in the common case, and many can be in flight at
// once:
//
//   - A claim is first tried as a create: a write that expects the key to
//     have no message at all (Nats-Expected-Last-Subject-Sequence 0). New
//     work, which is what reaches the ledger past the window, is claimed in
//     one round trip; a key that exists makes the write fail, and the claim
//     goes the plain way (read, decide, compare-and-set).
//   - The process remembers each claim it holds with the revision its write
//     got (held). A commit, failure or renewal of such a claim is decided on
//     the remembered record and written with a compare-and-set on the
//     remembered revision: if anything else wrote the key since (a takeover),
//     the write fails and the call goes the plain way, reading the leader.
//   - Claims and commits that callers make at the same time are combined
//     into rounds (package combine): every write of a round is published at
//     once and the round waits for all the acknowledgements, as the Badger
//     ledger combines transactions; BeginBatch and CommitBatch do the same
//     for a caller's batch.
//   - The load chooses how many rounds are under way: one, while the callers
//     queued behind it are fewer than roundSpill; past that, a caller that
//     finds roundSpill queued starts a round of its own at once with them,
//     up to roundsMax. One round at a time left the stream's leader idle
//     while the round's acknowledgements came back and the next round
//     gathered: at 256 workers, bench/peers measured 0.82x and 0.90x the
//     pairs per second of Redis with appendfsync always, against 0.93x to
//     1.17x (median 1.02x) with rounds that overlap (docs/internals.md,
//     "The KV ledger against Redis"); below roundSpill
//     nothing changes (16 workers: 1.2x to 1.37x either way).
//
// Fencing is the same: every write is a compare-and-set on the revision the
// decision was made on, and a stale decision's write is refused by the
// server, never stored.

// How the load chooses the rounds under way (see above). Rounds, not
// connections: the writes of one bucket are stored by one loop of its
// stream's leader, whichever connection they come on (in bench/peers' profile
// at 256 workers that loop took 42% of the CPU samples, the connection's
// read loop 11%), so what one more connection would add is what a round
// under way adds: writes waiting in that loop's queue.
const (
	roundSpill = 32
	roundsMax  = 4
)

// errSlow marks a request the fast path could not settle: the caller takes
// the plain path. errConflict is the errSlow of a compare-and-set the server
// refused for its revision: the key was written since, perhaps by that very
// write (see Ledger.commit).
var (
	errSlow     = errors.New("jskv: take the plain path")
	errConflict = fmt.Errorf("%w: written since", errSlow)
)

// holds remembers the claims this process holds, by key: the record as
// written and the revision the write got.
type holds struct {
	shards [16]holdShard
}

type holdShard struct {
	mu      sync.Mutex
	m       map[dedupe.Key]held
	pruneAt int
}

type held struct {
	rec ledger.Record
	rev uint64
}

func (h *holds) shard(k dedupe.Key) *holdShard {
	return &h.shards[binary.LittleEndian.Uint64(k[:8])%uint64(len(h.shards))]
}

// get returns the claim of k this process holds with token, if it
// remembers one.
func (h *holds) get(k dedupe.Key, token uint64) (held, bool) {
	sh := h.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c, ok := sh.m[k]
	return c, ok && c.rec.Token == token
}

// set remembers rec, written at rev, as k's claim, or forgets k's claim if
// rec is no longer pending.
func (h *holds) set(rec *ledger.Record, rev uint64, now time.Time) {
	sh := h.shard(rec.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if rec.State != ledger.StatePending {
		delete(sh.m, rec.Key)
		return
	}
	if sh.m == nil {
		sh.m, sh.pruneAt = make(map[dedupe.Key]held), 1024
	}
	sh.m[rec.Key] = held{*rec, rev}
	if len(sh.m) > sh.pruneAt {
		// Claims whose leases ran out are taken over by whoever comes:
		// their writes would go the plain way anyway.
		for k, c := range sh.m {
			if !c.rec.LeaseUntil.After(now) {
				delete(sh.m, k)
			}
		}
		sh.pruneAt = max(2*len(sh.m), 1024)
	}
}

// forget drops k's claim.
func (h *holds) forget(k dedupe.Key) {
	sh := h.shard(k)
	sh.mu.Lock()
	delete(sh.m, k)
	sh.mu.Unlock()
}

// wrongLastSequence reports whether err is the server's refusal of a write
// whose expected revision was not the key's latest.
func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// casWrite is one compare-and-set write of a round.
type casWrite struct {
	rec *ledger.Record
	rev uint64 // the revision the write expects
	// what came of it
	seq uint64
	ok  bool  // stored
	err error // neither stored nor refused for its revision: unknown
}

// writeAll publishes every write at once, each expecting its revision, and
// waits for every acknowledgement (or ctx).
func (l *Ledger) writeAll(ctx context.Context, ws []casWrite) {
	futs := make([]jetstream.PubAckFuture, len(ws))
	for i := range ws {
		m := nats.NewMsg(l.putSubj + ws[i].rec.Key.String())
		m.Data = ledgerproto.Append(nil, ws[i].rec)
		f, err := l.js.PublishMsgAsync(m, jetstream.WithExpectLastSequencePerSubject(ws[i].rev))
		if err != nil {
			ws[i].err = err
			continue
		}
		futs[i] = f
	}
	for i, f := range futs {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			ws[i].seq, ws[i].ok = ack.Sequence, true
		case err := <-f.Err():
			if !wrongLastSequence(err) {
				ws[i].err = err
			}
		case <-ctx.Done():
			ws[i].err = ctx.Err()
		}
	}
}

// fastBegins tries each claim as a create (see above). A request it settles
// gets its claim; the others get errSlow, or the error that ended them.
func (l *Ledger) fastBegins(ctx context.Context, reqs []ledger.BeginRequest) []ledger.BeginResult {
	out := make([]ledger.BeginResult, len(reqs))
	now := l.opts.Clock.Now()
	ws := make([]casWrite, 0, len(reqs))
	idx := make([]int, 0, len(reqs))
	for i, r := range reqs {
		c, _, err := ledgerproto.Decide(&l.opts.Options, r.Key, nil, r.Options, now)
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Claim = c
		ws = append(ws, casWrite{rec: &out[i].Claim.Record})
		idx = append(idx, i)
	}
	ctx, cancel := kvbucket.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	l.writeAll(ctx, ws)
	for j, w := range ws {
		i := idx[j]
		switch {
		case w.ok:
			l.holds.set(w.rec, w.seq, now)
		case w.err != nil:
			out[i] = ledger.BeginResult{Err: wrapErr("begin "+reqs[i].Key.String(), w.err)}
		default:
			out[i] = ledger.BeginResult{Err: errSlow}
		}
	}
	return out
}

// fastCommits writes each commit of a claim this process remembers with a
// compare-and-set on the remembered revision. The others get errSlow.
func (l *Ledger) fastCommits(ctx context.Context, reqs []ledger.CommitRequest) []error {
	out := make([]error, len(reqs))
	now := l.opts.Clock.Now()
	ws := make([]casWrite, 0, len(reqs))
	idx := make([]int, 0, len(reqs))
	for i, r := range reqs {
		h, ok := l.holds.get(r.Key, r.Token)
		if !ok {
			out[i] = errSlow
			continue
		}
		rec, err := ledgerproto.Committed(&l.opts.Options, r.Key, &h.rec, r.Token, r.Result, now)
		if err != nil {
			out[i] = err
			continue
		}
		ws = append(ws, casWrite{rec: &rec, rev: h.rev})
		idx = append(idx, i)
	}
	ctx, cancel := kvbucket.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	l.writeAll(ctx, ws)
	for j, w := range ws {
		i := idx[j]
		l.holds.forget(reqs[i].Key)
		switch {
		case w.ok:
		case w.err != nil:
			out[i] = wrapErr("commit "+reqs[i].Key.String(), w.err)
		default:
			out[i] = errConflict // written since: the plain path reads who holds it
		}
	}
	return out
}

// Begin implements ledger.Ledger. Claims made at the same time by other
// goroutines are written with it in one round (see above).
func (l *Ledger) Begin(ctx context.Context, key dedupe.Key, opts ledger.BeginOptions) (ledger.Claim, error) {
	if l.closed.Load() {
		return ledger.Claim{}, ledger.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return ledger.Claim{}, wrapErr("begin "+key.String(), err)
	}
	r := l.begins.Run(ctx, []ledger.BeginRequest{{Key: key, Options: opts}})[0]
	if errors.Is(r.Err, errSlow) {
		return l.begin(ctx, key, opts)
	}
	return r.Claim, r.Err
}

// Commit implements ledger.Ledger. When it returns nil the record is in the
// bucket's stream; see the package documentation for what that survives.
// Commits made at the same time by other goroutines are written with it in
// one round.
func (l *Ledger) Commit(ctx context.Context, key dedupe.Key, token uint64, result ledger.Result) error {
	if l.closed.Load() {
		return ledger.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return wrapErr("commit "+key.String(), err)
	}
	err := l.commits.Run(ctx, []ledger.CommitRequest{{Key: key, Token: token, Result: result}})[0]
	if errors.Is(err, errSlow) {
		return l.commit(ctx, key, token, result, errors.Is(err, errConflict))
	}
	return err
}

// BeginBatch claims every key of reqs in one round, with the claims other
// goroutines make at the same time; the keys the round cannot settle are
// claimed the plain way, concurrently. See [ledger.Batcher].
func (l *Ledger) BeginBatch(ctx context.Context, reqs []ledger.BeginRequest) []ledger.BeginResult {
	if l.closed.Load() {
		return fillAll(make([]ledger.BeginResult, len(reqs)), ledger.BeginResult{Err: ledger.ErrClosed})
	}
	out := l.begins.Run(ctx, reqs)
	var wg sync.WaitGroup
	for i := range out {
		if errors.Is(out[i].Err, errSlow) {
			wg.Go(func() { out[i].Claim, out[i].Err = l.begin(ctx, reqs[i].Key, reqs[i].Options) })
		}
	}
	wg.Wait()
	return out
}

// CommitBatch commits every request in one round, with the commits other
// goroutines make at the same time; see BeginBatch.
func (l *Ledger) CommitBatch(ctx context.Context, reqs []ledger.CommitRequest) []error {
	if l.closed.Load() {
		return fillAll(make([]error, len(reqs)), ledger.ErrClosed)
	}
	out := l.commits.Run(ctx, reqs)
	var wg sync.WaitGroup
	for i := range out {
		if errors.Is(out[i], errSlow) {
			wg.Go(func() {
				out[i] = l.commit(ctx, reqs[i].Key, reqs[i].Token, reqs[i].Result, errors.Is(out[i], errConflict))
			})
		}
	}
	wg.Wait()
	return out
}

func fillAll[R any](rs []R, v R) []R {
	for i := range rs {
		rs[i] = v
	}
	return rs
}

var _ ledger.Batcher = (*Ledger)(nil)
