package badgerstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"golang.org/x/sync/errgroup"

	"github.com/oncegate/oncegate/internal/combine"
	"github.com/oncegate/oncegate/internal/dirlock"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgerproto"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// ErrLocked is wrapped by the error of Open when another process holds the
// directory: a Badger ledger serves one process.
var ErrLocked = errors.New("badgerledger: the ledger directory is in use by another process")

// badgerPrefix starts every ledger key in a shared Badger DB.
const badgerPrefix = "dedupe/ledger/"

// maxConflictRetries bounds the retries of a transaction that lost a
// conflict to a concurrent one on the same key.
const maxConflictRetries = 32

// Ledger is a [ledger.Ledger] in a Badger database: the embedded default, for
// one process that owns the database directory.
//
// # Concurrency
//
// Within the process, the writes of one key are serialized: each holds the
// key's lock from its read to its transaction's commit, and a batch takes
// its keys' locks in key order. The ledger also remembers the claims it
// wrote, so a commit or renewal takes its claim from memory instead of
// reading it back. All of it rests on the process owning the directory:
// every Ledger on one *badger.DB shares the locks and the memory, and
// nothing else may write the ledger's keys in it. It is also what lets a
// restarted process take the work its predecessor held over at once:
// claims found in the DB that this process did not write belong to a
// process that is gone, and their leases count as over.
//
// # Durability
//
// Begin's claim, Commit and Fail are durable when they return, except a
// volatile claim (BeginOptions.Volatile), which is kept in memory and
// appended to the claims journal beside the database (journal.go) instead
// of written, while the process has room for it (about 64K claims): it
// survives the process's crash, with its attempt count and the time it was
// first made (so the retry counts it, and can tell how long ago its effect
// may have happened), but may be lost in a power failure. If the DB was
// opened with SyncWrites, Badger fsyncs each batch of transactions;
// otherwise the ledger calls DB.Sync after those writes (unless
// Options.NoSync is set), coalescing the syncs of concurrent
// callers into one (group commit). Either way a record that a call
// reported written survives a process crash and a power loss, as far as
// the disk honours fsync. Extend is not synced: after a crash its holder is
// gone, and a lost renewal only lets the takeover come sooner.
//
// With NoSync, writes still survive a process crash (they are in the
// operating system's page cache before the call returns) but the last ones
// may be lost in a power failure or kernel crash.
//
// Records expire Retention after their last change: the ledger treats an
// expired record as absent, and Badger drops it at compaction. Leases are
// kept in the record, never in Badger's TTL, and compared with the ledger's
// Clock.
type Ledger struct {
	db     *badger.DB
	opts   ledger.Options
	syncer *groupSync // nil when no explicit sync is needed
	st     *inproc    // the key locks and remembered claims of db (see inproc)
	closed atomic.Bool

	// Claims and commits that callers make at the same time are combined
	// into one transaction and one sync per round (see package combine):
	// a sync costs hundreds of microseconds of CPU whoever asks for it.
	// Durable claims and commits share their rounds (rounds): with a
	// combiner each, a round of claims and one of commits took turns at the
	// disk, and a caller waited for the other kind's sync before its own.
	// Volatile claims, which need no sync, have rounds of their own
	// (volatileRounds), so that they do not wait for a sync either.
	rounds, volatileRounds *combine.Combiner[roundReq, roundRes]

	// testRemembered is nil but in tests of this package, which set it on
	// their ledger to run after a write took a key's record from memory,
	// before its transaction writes the key.
	testRemembered func(dedupe.Key)
}

// Options configures a Ledger.
type Options struct {
	// Options are the store-independent settings: Retention,
	// MaxResultBytes, Mismatch and Clock.
	ledger.Options
	// NoSync skips the fsync after the claim and the commit when the DB does
	// not sync every write itself. Records then survive a process crash but
	// not a power loss. The default is false.
	NoSync bool
}

// New returns a ledger that keeps its records in db, under keys
// that start with "dedupe/ledger/". The caller owns db: it closes it after
// the ledger, and runs its value-log garbage collection.
func New(db *badger.DB, opts Options) (*Ledger, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil badger DB", ledger.ErrInvalidLedger)
	}
	if err := ledgerproto.Normalize(&opts.Options); err != nil {
		return nil, err
	}
	l := &Ledger{db: db, opts: opts.Options}
	st, err := acquireInproc(db, l.recoverJournal)
	if err != nil {
		return nil, err
	}
	l.st = st
	// A round runs under its leader's context less its cancellation: the
	// others queued behind it with contexts of their own, and a round is
	// one local transaction.
	round := func(ctx context.Context, reqs []roundReq) []roundRes {
		return l.round(context.WithoutCancel(ctx), reqs)
	}
	l.rounds, l.volatileRounds = combine.New(round), combine.New(round)
	if !opts.NoSync && !db.Opts().SyncWrites && !db.Opts().InMemory {
		l.syncer = newGroupSync(db.Sync)
	}
	return l, nil
}

// OpenOptions configures Open.
type OpenOptions struct {
	// SyncWrites makes Badger fsync every write. Without it the ledger syncs
	// explicitly at the points that need it (see Ledger). The default
	// is false.
	SyncWrites bool
	// EncryptionKeyFile, if set, names a file holding a 16, 24 or 32-byte
	// AES key: the data is encrypted at rest. Opening an encrypted
	// directory with another key, or with none, fails.
	EncryptionKeyFile string
	// InMemory keeps everything in memory, for tests. The default is false.
	InMemory bool
}

// Open opens (creating if needed) a Badger database in dir with the
// settings the ledger relies on: every table checked against its checksums
// before the open (a damaged one is ledger.ErrCorruptRecord) and every block
// when it is read, so a flipped bit is an error and not a wrong answer;
// blocks stored uncompressed (a ledger's keys are hashes, and a read or the
// open's check then decompresses nothing); Badger's own logging off (errors
// reach callers as errors); and optional encryption. A directory another
// process holds open fails with Badger's lock error.
func Open(dir string, o OpenOptions) (*badger.DB, error) {
	bo := badger.DefaultOptions(dir).
		WithSyncWrites(o.SyncWrites).
		WithChecksumVerificationMode(options.OnBlockRead).
		WithCompression(options.None).
		WithLogger(nil).
		WithInMemory(o.InMemory)
	if o.InMemory {
		bo = bo.WithDir("").WithValueDir("")
	}
	if o.EncryptionKeyFile == "" && !o.InMemory && !dirlock.Held(dir) {
		// (A directory another process holds is refused by Badger's open
		// below, without reading its tables first.)
		if err := verifyTables(dir); err != nil {
			return nil, err
		}
	}
	if o.EncryptionKeyFile != "" {
		// Encrypted blocks need the data key to be checked: Badger
		// checks every table as it opens it.
		bo = bo.WithChecksumVerificationMode(options.OnTableAndBlockRead)
		key, err := os.ReadFile(o.EncryptionKeyFile)
		if err != nil {
			return nil, fmt.Errorf("badgerledger: reading encryption key: %w", err)
		}
		if n := len(key); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("%w: encryption key in %s is %d bytes; want 16, 24 or 32", ledger.ErrInvalidLedger, o.EncryptionKeyFile, n)
		}
		bo = bo.WithEncryptionKey(key).WithIndexCacheSize(64 << 20)
	}
	db, err := badger.Open(bo)
	if err != nil {
		if !o.InMemory && dirlock.Held(dir) {
			return nil, fmt.Errorf("%w: %s: %w", ErrLocked, dir, err)
		}
		if errors.Is(err, badger.ErrEncryptionKeyMismatch) {
			return nil, fmt.Errorf("badgerledger: %s was written with another encryption key (or none): %w", dir, err)
		}
		return nil, fmt.Errorf("badgerledger: opening badger in %s: %w", dir, err)
	}
	return db, nil
}

func badgerKey(k dedupe.Key) []byte {
	b := make([]byte, 0, len(badgerPrefix)+len(k))
	return append(append(b, badgerPrefix...), k[:]...)
}

// read returns the live record of k in txn, or nil.
func (l *Ledger) read(txn *badger.Txn, k dedupe.Key, now time.Time) (*ledger.Record, error) {
	item, err := txn.Get(badgerKey(k))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("badgerledger: reading %v: %w", k, err)
	}
	var rec ledger.Record
	err = item.Value(func(v []byte) error {
		var err error
		rec, err = ledgerproto.Decode(k, v)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ledgerproto.Live(&rec, now), nil
}

func (l *Ledger) write(txn *badger.Txn, rec *ledger.Record) error {
	// Badger's TTL only collects the garbage; expiry as the ledger sees it
	// is rec.Expires, on the ledger's clock. The margin keeps a record
	// readable for as long as that clock can run behind the system's.
	e := badger.NewEntry(badgerKey(rec.Key), ledgerproto.Append(nil, rec)).WithTTL(l.opts.Retention + time.Hour)
	return txn.SetEntry(e)
}

// update passes key's record to fn, which returns the record to write (nil
// for none) and whether the write must be durable before update returns. It
// holds key's lock (see inproc) from the read until the write: the record is
// the one the process remembers, if it does, and otherwise is read in the
// read-write transaction that writes the next one. A transaction that loses
// a conflict all the same is retried. A pending record is kept in memory
// instead of written if vol says so and there is room (see inproc); update
// never journals, so vol is sameClaim (a renewal: the journal's entry
// stands) or durableClaim.
func (l *Ledger) update(ctx context.Context, key dedupe.Key, vol volatility, fn func(cur *ledger.Record, now time.Time) (next *ledger.Record, durable bool, err error)) error {
	if l.closed.Load() {
		return ledger.ErrClosed
	}
	unlock, err := l.st.lock(ctx, []dedupe.Key{key})
	if err != nil {
		return err
	}
	var wrote, kept bool
	var written *ledger.Record
	var at time.Time
	for range maxConflictRetries {
		if err = ctx.Err(); err != nil {
			break
		}
		written, wrote, kept = nil, false, false
		err = l.db.Update(func(txn *badger.Txn) error {
			now := l.opts.Clock.Now()
			at = now
			cur, curVolatile, err := l.current(txn, key, now)
			if err != nil {
				return err
			}
			next, durable, err := fn(cur, now)
			if err != nil || next == nil {
				return err
			}
			written = next
			if l.keep(key, next, vol == sameClaim && curVolatile) {
				kept = true
				return nil
			}
			wrote = durable
			return l.write(txn, next)
		})
		if !errors.Is(err, badger.ErrConflict) {
			break
		}
	}
	switch {
	case err != nil:
		l.st.forget(key)
	case written != nil:
		l.st.wrote(key, written, kept, at)
	}
	unlock()
	if err != nil {
		switch {
		case errors.Is(err, badger.ErrDBClosed):
			return fmt.Errorf("%w: %w", ledger.ErrClosed, err)
		case errors.Is(err, badger.ErrConflict):
			return fmt.Errorf("badgerledger: key %v: lost %d transaction conflicts in a row: %w", key, maxConflictRetries, err)
		}
		return err
	}
	if wrote && l.syncer != nil {
		if err := l.syncer.Sync(); err != nil {
			return fmt.Errorf("badgerledger: syncing ledger: %w", err)
		}
	}
	return nil
}

// current returns key's live record, or nil, and whether it is volatile:
// the one the process remembers, if it does, and otherwise the one txn
// reads. A pending record that a process before this one wrote (see
// inproc) is returned with its lease over: its holder is gone. The caller
// holds key's lock, or reads without it (Get) a record that may be a write
// behind.
func (l *Ledger) current(txn *badger.Txn, key dedupe.Key, now time.Time) (*ledger.Record, bool, error) {
	rec, valid, volatile, mine := l.st.claim(key)
	if valid {
		if l.testRemembered != nil {
			l.testRemembered(key)
		}
		return ledgerproto.Live(&rec, now), volatile, nil
	}
	cur, err := l.read(txn, key, now)
	if err != nil || cur == nil || mine {
		return cur, false, err
	}
	return orphaned(cur, now, l.opts.ClockSkew), false, nil
}

// orphaned returns cur with its lease over if it is a pending record with a
// live lease that this process did not write: its holder was a process
// that held the directory before this one, and is gone. Over by skew too
// (Options.ClockSkew): a gone holder sends nothing more, whatever its
// clock said.
func orphaned(cur *ledger.Record, now time.Time, skew time.Duration) *ledger.Record {
	if cur.State == ledger.StatePending && now.Before(cur.LeaseUntil.Add(skew)) {
		cur.LeaseUntil = now.Add(-skew)
	}
	return cur
}

// volatility says where a write puts a pending record.
type volatility uint8

const (
	durableClaim  volatility = iota // in the DB
	volatileClaim                   // in memory and the journal, if there is room
	sameClaim                       // where the record it renews is
)

// keep reports whether next, key's next record, is to be kept in memory
// instead of written: it is pending, volatile is asked for, and there is
// room. The caller holds key's lock.
func (l *Ledger) keep(key dedupe.Key, next *ledger.Record, volatile bool) bool {
	return volatile && next.State == ledger.StatePending && l.st.room(key)
}

// orphans reads the DB's record of each journaled claim in es, on as many
// goroutines as there are CPUs, in read-only transactions, and returns the
// pending record to write for each claim the DB does not show settled or
// claimed since. Nothing else writes the ledger's records before the
// recovery is over (it runs before the first ledger of the DB is returned),
// so what the reads found still holds when the records are written.
func (l *Ledger) orphans(es []journalEntry, now time.Time) ([]ledger.Record, error) {
	parts := min(runtime.GOMAXPROCS(0), max(len(es)/1000, 1))
	out := make([][]ledger.Record, parts)
	var g errgroup.Group
	for p := range parts {
		part := es[p*len(es)/parts : (p+1)*len(es)/parts]
		g.Go(func() error {
			return l.db.View(func(txn *badger.Txn) error {
				for _, e := range part {
					cur, err := l.read(txn, e.Key, now)
					if err != nil {
						return err
					}
					if rec, ok := l.orphan(e, cur, now); ok {
						out[p] = append(out[p], rec)
					}
				}
				return nil
			})
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return slices.Concat(out...), nil
}

// orphan returns the pending record a journaled claim e leaves, given cur,
// its key's record in the DB (nil for none), and whether there is one: none
// if the DB shows the claim settled or claimed since.
func (l *Ledger) orphan(e journalEntry, cur *ledger.Record, now time.Time) (ledger.Record, bool) {
	var note []byte // what the record noted: the claim carries it on
	if cur != nil {
		note = cur.Note
	}
	if cur != nil && cur.State == ledger.StateCleared && cur.Token < e.Token {
		cur = nil // a failure cleared (Ledger.Clear), then claimed anew: the claim is new work
	}
	if cur != nil && (cur.State != ledger.StatePending || cur.Token >= e.Token) {
		return ledger.Record{}, false // settled, or claimed since in the DB
	}
	rec := ledger.Record{Key: e.Key, State: ledger.StatePending, Owner: "a process that held the directory before",
		Token: e.Token, LeaseUntil: now.Add(-l.opts.ClockSkew), Attempts: e.Attempts, Fingerprint: e.Fingerprint,
		Created: e.Created, Updated: now, Expires: now.Add(l.opts.Retention), Note: note}
	if cur != nil {
		rec.Attempts, rec.Mismatches = max(rec.Attempts, cur.Attempts), cur.Mismatches
	}
	return rec, true
}

// recoverJournal, run once for a DB when its first ledger opens, writes
// every claim the claims journal holds and the DB does not show settled as
// a pending record whose holder is gone (see journal.go), then starts the
// journal's next file and removes the ones it read.
func (l *Ledger) recoverJournal(s *inproc) error {
	if l.db.Opts().InMemory {
		return nil
	}
	dir := l.db.Opts().Dir
	entries, files, err := readJournal(dir)
	if err != nil {
		return err
	}
	now := l.opts.Clock.Now()
	es := make([]journalEntry, 0, len(entries))
	for _, e := range entries {
		if now.Before(e.Created.Add(l.opts.Retention)) {
			es = append(es, e)
		}
	}
	// In key order, so that each goroutine's lookups walk the tables
	// forward: neighbours share blocks and pages.
	slices.SortFunc(es, func(a, b journalEntry) int { return bytes.Compare(a.Key[:], b.Key[:]) })
	orphans, err := l.orphans(es, now)
	if err != nil {
		return fmt.Errorf("badgerledger: recovering the claims journal: %w", err)
	}
	for recs := range slices.Chunk(orphans, 1000) {
		if err := l.db.Update(func(txn *badger.Txn) error {
			for i := range recs {
				if err := l.write(txn, &recs[i]); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("badgerledger: recovering the claims journal: %w", err)
		}
	}
	if len(entries) > 0 {
		if err := l.db.Sync(); err != nil {
			return fmt.Errorf("badgerledger: recovering the claims journal: %w", err)
		}
	}
	next := 0
	if len(files) > 0 {
		next = files[len(files)-1] + 1
	}
	if s.j, err = openJournal(dir, next); err != nil {
		return err
	}
	for _, n := range files {
		os.Remove(journalPath(dir, n))
	}
	return nil
}

// Begin implements [ledger.Ledger]. Claims made at the same time by other
// goroutines are written with it in one transaction and one sync.
func (l *Ledger) Begin(ctx context.Context, key dedupe.Key, opts ledger.BeginOptions) (ledger.Claim, error) {
	if err := ctx.Err(); err != nil {
		return ledger.Claim{}, err
	}
	r := l.roundsOf(opts.Volatile).Run(ctx, []roundReq{{key: key, opts: opts}})[0]
	return r.claim, r.err
}

// Extend implements [ledger.Ledger].
func (l *Ledger) Extend(ctx context.Context, key dedupe.Key, token uint64, d time.Duration) (ledger.Lease, error) {
	var lease ledger.Lease
	err := l.update(ctx, key, sameClaim, func(cur *ledger.Record, now time.Time) (*ledger.Record, bool, error) {
		rec, ls, err := ledgerproto.Extended(&l.opts, key, cur, token, d, now)
		lease = ls
		return &rec, false, err
	})
	return lease, err
}

// Note implements [ledger.Ledger]. The record is written to the DB, a
// volatile claim's too (the claims journal holds no notes), without
// waiting for the disk, as the LLM cache's Badger store writes its
// answers: a process's crash does not lose it, a power loss may (the
// model is then asked again). A sync per answer would put an fsync on
// every model step's path for what only saves a second call.
func (l *Ledger) Note(ctx context.Context, key dedupe.Key, token uint64, note []byte, d time.Duration) (ledger.Lease, error) {
	var lease ledger.Lease
	err := l.update(ctx, key, durableClaim, func(cur *ledger.Record, now time.Time) (*ledger.Record, bool, error) {
		rec, ls, err := ledgerproto.Noted(&l.opts, key, cur, token, note, d, now)
		lease = ls
		return &rec, false, err
	})
	return lease, err
}

// Commit implements [ledger.Ledger]. Commits made at the same time by other
// goroutines are written with it in one transaction and one sync.
func (l *Ledger) Commit(ctx context.Context, key dedupe.Key, token uint64, result ledger.Result) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return l.rounds.Run(ctx, []roundReq{{commit: true, key: key, token: token, result: result}})[0].err
}

// Fail implements [ledger.Ledger].
func (l *Ledger) Fail(ctx context.Context, key dedupe.Key, token uint64, reason string) error {
	return l.update(ctx, key, durableClaim, func(cur *ledger.Record, now time.Time) (*ledger.Record, bool, error) {
		rec, err := ledgerproto.Failed(&l.opts, key, cur, token, reason, now)
		return &rec, true, err
	})
}

// Get implements [ledger.Ledger].
func (l *Ledger) Get(ctx context.Context, key dedupe.Key) (ledger.Record, error) {
	if l.closed.Load() {
		return ledger.Record{}, ledger.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return ledger.Record{}, err
	}
	var rec *ledger.Record
	err := l.db.View(func(txn *badger.Txn) error {
		// Without key's lock the record remembered and the one in the DB
		// may be a write apart; either is a state key was in.
		var err error
		rec, _, err = l.current(txn, key, l.opts.Clock.Now())
		return err
	})
	if err != nil {
		if errors.Is(err, badger.ErrDBClosed) {
			return ledger.Record{}, fmt.Errorf("%w: %w", ledger.ErrClosed, err)
		}
		return ledger.Record{}, err
	}
	if rec == nil {
		return ledger.Record{}, fmt.Errorf("%w: %v", ledger.ErrNotFound, key)
	}
	return *rec, nil
}

// Pending implements [ledger.Ledger]. It reads a consistent snapshot of the
// DB, in key order, in which the volatile claims the process keeps take the
// place of the DB's records of their keys; then it yields the volatile
// claims of keys the DB does not hold. A claim that a process before this
// one left has its lease over (see inproc).
func (l *Ledger) Pending(ctx context.Context) iter.Seq2[ledger.Record, error] {
	return func(yield func(ledger.Record, error) bool) {
		if l.closed.Load() {
			yield(ledger.Record{}, ledger.ErrClosed)
			return
		}
		now := l.opts.Clock.Now()
		volatiles := l.st.volatiles()
		var stopped bool
		err := l.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(badgerPrefix)})
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				if err := ctx.Err(); err != nil {
					return err
				}
				var k dedupe.Key
				copy(k[:], it.Item().Key()[len(badgerPrefix):])
				var rec ledger.Record
				if v, ok := volatiles[k]; ok {
					delete(volatiles, k)
					if ledgerproto.Live(&v, now) != nil && !yield(v, nil) {
						stopped = true
						return nil
					}
					continue
				}
				err := it.Item().Value(func(v []byte) error {
					var err error
					rec, err = ledgerproto.Decode(k, v)
					return err
				})
				if err != nil {
					if !yield(ledger.Record{}, err) {
						stopped = true
						return nil
					}
					continue
				}
				if ledgerproto.Live(&rec, now) == nil || rec.State != ledger.StatePending {
					continue
				}
				if _, _, _, mine := l.st.claim(k); !mine {
					orphaned(&rec, now, l.opts.ClockSkew)
				}
				if !yield(rec, nil) {
					stopped = true
					return nil
				}
			}
			return nil
		})
		if stopped {
			return
		}
		if err != nil {
			yield(ledger.Record{}, err)
			return
		}
		for _, k := range slices.SortedFunc(maps.Keys(volatiles), func(a, b dedupe.Key) int { return bytes.Compare(a[:], b[:]) }) {
			if v := volatiles[k]; ledgerproto.Live(&v, now) != nil && !yield(v, nil) {
				return
			}
		}
	}
}

// Close implements [ledger.Ledger]. It does not close the DB. When the last
// ledger on the DB closes, the claims it holds are left as a crash leaves
// them (the volatile ones in the claims journal): a ledger opened on the DB
// later takes them over at once.
func (l *Ledger) Close() error {
	if !l.closed.Swap(true) {
		releaseInproc(l.db)
	}
	return nil
}

// updateBatch applies fn to each of keys in one transaction and one sync;
// fn's errors are per key and do not abort the others. It holds the locks of
// all the keys (see inproc) until the transaction has committed and the
// claims are recorded, and takes each key's record from what the process
// remembers, if it does, instead of reading it. A key the batch holds more
// than once sees the record its previous request left. A pending record is
// kept in memory instead of written, and journaled, if volatile(i) is set
// and there is room; a write is synced if it is not a volatile request's.
func (l *Ledger) updateBatch(ctx context.Context, keys []dedupe.Key, volatile func(i int) bool, fn func(i int, cur *ledger.Record, now time.Time) (next *ledger.Record, err error)) []error {
	errs := make([]error, len(keys))
	fail := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if l.closed.Load() {
		return fail(ledger.ErrClosed)
	}
	// Keys in order: the locks are taken in that order, and each lookup
	// then walks much the same path down Badger's skiplists as the one
	// before it, mostly in cache.
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return bytes.Compare(keys[a][:], keys[b][:]) })
	distinct := make([]dedupe.Key, 0, len(keys))
	for j, i := range order {
		if j == 0 || keys[order[j-1]] != keys[i] {
			distinct = append(distinct, keys[i])
		}
	}
	unlock, err := l.st.lock(ctx, distinct)
	if err != nil {
		return fail(err)
	}
	b := batchWrite{written: make([]*ledger.Record, len(keys)), kept: make([]bool, len(keys)), errs: errs}
	wrote, err := l.updateBatchLocked(ctx, keys, order, volatile, &b, fn)
	if err != nil {
		for _, k := range distinct {
			l.st.forget(k)
		}
	}
	unlock()
	if err != nil {
		return fail(err)
	}
	if wrote && l.syncer != nil {
		if err := l.syncer.Sync(); err != nil {
			return fail(fmt.Errorf("badgerledger: syncing ledger: %w", err))
		}
	}
	return errs
}

// record records in memory what a batch wrote and kept, journaling the
// claims it kept first; claims the journal could not take are refused, as
// a claim whose write failed is. The caller holds the batch's keys' locks.
func (l *Ledger) record(keys []dedupe.Key, order []int, b *batchWrite) {
	// In key order, and within a key in request order, so that of a key
	// written twice the last write counts.
	apply := func() {
		for _, i := range order {
			if b.written[i] != nil {
				l.st.wrote(keys[i], b.written[i], b.kept[i], b.at)
			}
		}
	}
	var es []journalEntry
	if l.st.j != nil {
		for _, i := range order {
			if b.kept[i] && b.written[i] != nil {
				es = append(es, entryOf(b.written[i]))
			}
		}
	}
	if len(es) == 0 {
		apply()
		return
	}
	if err := l.st.j.append(es, apply, l.st.journalSnapshot); err != nil {
		for _, i := range order {
			if b.kept[i] {
				b.written[i], b.errs[i] = nil, err
			}
		}
		apply()
	}
}

// batchWrite is what updateBatchLocked did with each key of a batch: the
// record it wrote or kept in memory (kept), or fn's error; and the ledger's
// time when it did.
type batchWrite struct {
	written []*ledger.Record
	kept    []bool
	errs    []error
	at      time.Time
}

// updateBatchLocked is updateBatch's transaction, over the keys at order,
// with their locks held. It fills b, records what it wrote and kept in
// memory (record), and returns whether it wrote anything to the DB that must
// be synced, or why the whole transaction failed. A batch too large for one
// Badger transaction is split in halves.
func (l *Ledger) updateBatchLocked(ctx context.Context, keys []dedupe.Key, order []int, volatile func(i int) bool, b *batchWrite,
	fn func(i int, cur *ledger.Record, now time.Time) (next *ledger.Record, err error)) (bool, error) {
	var err error
	wrote := false
	for range maxConflictRetries {
		if err = ctx.Err(); err != nil {
			break
		}
		wrote = false
		err = l.db.Update(func(txn *badger.Txn) error {
			now := l.opts.Clock.Now()
			b.at = now
			var (
				prev    *ledger.Record // the record the previous request on the key left
				prevErr error          // or why it could not read one
			)
			for j, i := range order {
				k := keys[i]
				b.written[i], b.kept[i] = nil, false
				var cur *ledger.Record
				if j > 0 && keys[order[j-1]] == k {
					cur, b.errs[i] = ledgerproto.Live(prev, now), prevErr
				} else {
					cur, _, b.errs[i] = l.current(txn, k, now)
				}
				if prev, prevErr = cur, b.errs[i]; prevErr != nil {
					continue
				}
				next, err := fn(i, cur, now)
				b.errs[i] = err
				if err != nil || next == nil {
					continue
				}
				b.written[i] = next
				prev = next
				if l.keep(k, next, volatile(i)) {
					b.kept[i] = true
					continue
				}
				if err := l.write(txn, next); err != nil {
					return err
				}
				wrote = wrote || !volatile(i)
			}
			return nil
		})
		if !errors.Is(err, badger.ErrConflict) {
			break
		}
	}
	switch {
	case err == nil:
		l.record(keys, order, b)
		return wrote, nil
	case errors.Is(err, badger.ErrTxnTooBig) && len(order) > 1:
		// Each half stands on its own: one that fails fails its keys only.
		// The halves split between requests of one key at worst, and then
		// the later half reads what the earlier one left (recorded).
		h := len(order) / 2
		wrote = false
		for _, half := range [][]int{order[:h], order[h:]} {
			w, err := l.updateBatchLocked(ctx, keys, half, volatile, b, fn)
			if err != nil {
				for _, i := range half {
					b.errs[i] = err
					l.st.forget(keys[i])
				}
				continue
			}
			wrote = wrote || w
		}
		return wrote, nil
	case errors.Is(err, badger.ErrDBClosed):
		err = fmt.Errorf("%w: %w", ledger.ErrClosed, err)
	}
	// Nothing of this transaction was written.
	for _, i := range order {
		b.written[i], b.kept[i] = nil, false
	}
	return false, err
}

// BeginBatch claims every key of reqs in one transaction and one sync,
// with the claims and commits other goroutines make at the same time. See
// [ledger.Batcher] and [ledger.BeginAll].
func (l *Ledger) BeginBatch(ctx context.Context, reqs []ledger.BeginRequest) []ledger.BeginResult {
	out := make([]ledger.BeginResult, len(reqs))
	if err := ctx.Err(); err != nil {
		return fillErr(out, func(r *ledger.BeginResult) { r.Err = err })
	}
	rs := make([]roundReq, len(reqs))
	volatile := true
	for i, r := range reqs {
		rs[i] = roundReq{key: r.Key, opts: r.Options}
		volatile = volatile && r.Options.Volatile
	}
	for i, r := range l.roundsOf(volatile).Run(ctx, rs) {
		out[i] = ledger.BeginResult{Claim: r.claim, Err: r.err}
	}
	return out
}

// CommitBatch commits every request in one transaction and one sync, with
// the claims and commits other goroutines make at the same time. See
// [ledger.Batcher] and [ledger.CommitAll].
func (l *Ledger) CommitBatch(ctx context.Context, reqs []ledger.CommitRequest) []error {
	out := make([]error, len(reqs))
	if err := ctx.Err(); err != nil {
		return fillErr(out, func(e *error) { *e = err })
	}
	rs := make([]roundReq, len(reqs))
	for i, r := range reqs {
		rs[i] = roundReq{commit: true, key: r.Key, token: r.Token, result: r.Result}
	}
	for i, r := range l.rounds.Run(ctx, rs) {
		out[i] = r.err
	}
	return out
}

// roundsOf returns the rounds for claims that are all volatile, if volatile
// is set, or else for those of which some may be synced.
func (l *Ledger) roundsOf(volatile bool) *combine.Combiner[roundReq, roundRes] {
	if volatile {
		return l.volatileRounds
	}
	return l.rounds
}

// fillErr sets every element of rs with set, and returns rs.
func fillErr[R any](rs []R, set func(*R)) []R {
	for i := range rs {
		set(&rs[i])
	}
	return rs
}

// roundReq is a claim (Begin) or, if commit is set, a commit of a round.
type roundReq struct {
	commit bool
	key    dedupe.Key
	opts   ledger.BeginOptions // a claim's
	token  uint64              // a commit's
	result ledger.Result       // a commit's
}

// roundRes is what a roundReq got: the claim, for a Begin, and the error.
type roundRes struct {
	claim ledger.Claim
	err   error
}

// round makes the claims and commits of reqs in one transaction and one
// sync. A commit's key was claimed by this process, which remembers the
// claim it wrote: no need to read it back.
func (l *Ledger) round(ctx context.Context, reqs []roundReq) []roundRes {
	out := make([]roundRes, len(reqs))
	keys := make([]dedupe.Key, len(reqs))
	for i, r := range reqs {
		keys[i] = r.key
	}
	volatile := func(i int) bool { return !reqs[i].commit && reqs[i].opts.Volatile }
	errs := l.updateBatch(ctx, keys, volatile, func(i int, cur *ledger.Record, now time.Time) (*ledger.Record, error) {
		r := &reqs[i]
		if r.commit {
			rec, err := ledgerproto.Committed(&l.opts, r.key, cur, r.token, r.result, now)
			if err != nil {
				return nil, err
			}
			return &rec, nil
		}
		if err := ledgerproto.ValidBegin(r.opts); err != nil {
			return nil, err
		}
		c, write, err := ledgerproto.Decide(&l.opts, r.key, cur, r.opts, now)
		out[i].claim = c
		if err != nil || !write {
			return nil, err
		}
		return &out[i].claim.Record, nil
	})
	for i, err := range errs {
		if err != nil {
			out[i] = roundRes{err: err}
		}
	}
	return out
}

var _ ledger.Batcher = (*Ledger)(nil)
