package jskvstore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/combine"
	"github.com/oncegate/oncegate/internal/kvbucket"
	"github.com/oncegate/oncegate/internal/kvlast"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgerproto"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Defaults for Options.
const (
	// DefaultBucket is the bucket name when Options leaves Bucket empty.
	DefaultBucket = "oncegate-ledger"
	// DefaultTimeout bounds a call whose context has no deadline, when
	// Options leaves Timeout zero.
	DefaultTimeout = 5 * time.Second
)

const (
	// retentionMargin is added to Retention for the bucket's TTL, so that a
	// record stays readable while the ledger's clock, which decides its
	// expiry, runs behind the server's.
	retentionMargin = time.Hour
	// maxConflictRetries bounds the re-reads after a write lost a
	// compare-and-set to a concurrent writer of the same key.
	maxConflictRetries = 32
	// recordOverhead bounds what a stored record takes beyond its result or
	// failure reason and its note: the fixed fields, the owner, the message
	// headers.
	recordOverhead = 4 << 10
	// errCodeReplicasNotSupported is the JetStream API error for replicas
	// asked of a server that is not in a cluster.
	errCodeReplicasNotSupported jetstream.ErrorCode = 10074
)

// Options configures a Ledger. The zero value means the defaults.
type Options struct {
	// Options are the store-independent settings: Retention,
	// MaxResultBytes, Mismatch and Clock.
	ledger.Options
	// Bucket names the KV bucket. The default is DefaultBucket.
	Bucket string
	// Replicas is the number of servers that hold the bucket when New
	// creates it; 3 on a cluster of three or more servers gives a ledger
	// that survives the loss of any one of them. An existing bucket must
	// have at least this many. The default is 1.
	Replicas int
	// Storage is where the servers keep the bucket when New creates it. An
	// existing bucket asked for with FileStorage must not be in memory.
	// The default is jetstream.FileStorage.
	Storage jetstream.StorageType
	// Timeout bounds each call whose context has no deadline, and each
	// pause in the key listing of Pending. The default is DefaultTimeout.
	Timeout time.Duration
}

func (o *Options) setDefaults() error {
	if err := ledgerproto.Normalize(&o.Options); err != nil {
		return err
	}
	if o.Replicas < 0 || o.Timeout < 0 {
		return fmt.Errorf("%w: negative replicas or timeout", ledger.ErrInvalidLedger)
	}
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	return nil
}

// Ledger is a ledger.Ledger in a JetStream key-value bucket, shared by every
// consumer replica that opens the same bucket. See the package
// documentation for how it stays atomic, what survives what, and why
// replicas' clocks must agree.
//
// A Ledger is safe for concurrent use by multiple goroutines.
type Ledger struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	opts    Options
	last    *kvlast.Reader // the bucket's keys, from its stream leader
	putSubj string         // the prefix a write publishes to: "$KV.<bucket>.", under a custom API prefix if js has one
	closed  atomic.Bool

	holds holds // the claims this process holds (pipeline.go)

	testReadAny func(context.Context, dedupe.Key) (*ledger.Record, uint64, error) // replaces readAny in tests: a stale replica
	begins      *combine.Combiner[ledger.BeginRequest, ledger.BeginResult]
	commits     *combine.Combiner[ledger.CommitRequest, error]
}

var _ ledger.Ledger = (*Ledger)(nil)

// New returns a ledger in the bucket opts.Bucket, creating the bucket (with
// history 1 and a TTL of Retention plus an hour) if it does not exist. An
// existing bucket is used as it is, provided it can hold the ledger;
// otherwise New returns an error wrapping ledger.ErrInvalidLedger that says
// why: a TTL shorter than Retention, memory storage when file storage was
// asked for, fewer replicas than asked for, values too small for a record,
// or a mirror. New never changes an existing bucket.
//
// The caller owns the connection under js: Close does not close it.
func New(ctx context.Context, js jetstream.JetStream, opts Options) (*Ledger, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", ledger.ErrInvalidLedger)
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	nc := js.Conn()
	if limit := nc.MaxPayload(); limit > 0 && maxRecord(opts.MaxResultBytes) > limit {
		return nil, fmt.Errorf("%w: results and notes of up to %d bytes each do not fit in the server's %d-byte max_payload",
			ledger.ErrInvalidLedger, opts.MaxResultBytes, limit)
	}
	ttl := opts.Retention + retentionMargin
	if ttl < opts.Retention {
		ttl = 0 // a retention this long is forever
	}
	ctx, cancel := kvbucket.WithTimeout(ctx, opts.Timeout)
	defer cancel()

	kv, err := kvbucket.Open(ctx, js, jetstream.KeyValueConfig{
		Bucket:      opts.Bucket,
		Description: "Oncegate idempotency ledger",
		History:     1,
		TTL:         ttl,
		Storage:     opts.Storage,
		Replicas:    opts.Replicas,
	})
	var apiErr *jetstream.APIError
	if errors.Is(err, jetstream.ErrInvalidBucketName) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeReplicasNotSupported {
		return nil, fmt.Errorf("%w: bucket %q: %w", ledger.ErrInvalidLedger, opts.Bucket, err)
	}
	if err != nil {
		return nil, wrapErr("opening bucket "+opts.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, wrapErr("reading bucket "+opts.Bucket, err)
	}
	if err := opts.check(st.Config()); err != nil {
		return nil, err
	}
	l := &Ledger{
		nc:      nc,
		js:      js,
		kv:      kv,
		opts:    opts,
		last:    kvlast.NewReader(nc, js.Options(), opts.Bucket),
		putSubj: "$KV." + opts.Bucket + ".",
	}
	if p := kvlast.APIPrefix(js.Options()); js.Options().APIPrefix != "" && p != jetstream.DefaultAPIPrefix {
		l.putSubj = p + l.putSubj
	}
	// A round runs under its leader's context less its cancellation, and
	// within the ledger's Timeout: the others queued behind it with
	// contexts of their own. Rounds overlap as the load grows (roundSpill).
	l.begins = combine.New(func(ctx context.Context, reqs []ledger.BeginRequest) []ledger.BeginResult {
		return l.fastBegins(context.WithoutCancel(ctx), reqs)
	}).Overlap(roundsMax, roundSpill)
	l.commits = combine.New(func(ctx context.Context, reqs []ledger.CommitRequest) []error {
		return l.fastCommits(context.WithoutCancel(ctx), reqs)
	}).Overlap(roundsMax, roundSpill)
	return l, nil
}

// check reports why an existing bucket with cfg cannot hold the ledger.
func (o *Options) check(cfg jetstream.KeyValueConfig) error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: bucket %q %s", ledger.ErrInvalidLedger, o.Bucket, fmt.Sprintf(format, args...))
	}
	switch {
	case cfg.Mirror != nil:
		return invalid("is a mirror; the ledger needs a bucket it can write to")
	case cfg.TTL != 0 && cfg.TTL < o.Retention:
		return invalid("expires records after %v, before the ledger's retention of %v: a late retry would run its effect again", cfg.TTL, o.Retention)
	case o.Storage == jetstream.FileStorage && cfg.Storage == jetstream.MemoryStorage:
		return invalid("is in memory; file storage was asked for")
	case cfg.Replicas != 0 && cfg.Replicas < o.Replicas:
		return invalid("has %d replicas; %d were asked for", cfg.Replicas, o.Replicas)
	case cfg.MaxValueSize > 0 && int64(cfg.MaxValueSize) < maxRecord(o.MaxResultBytes):
		return invalid("limits values to %d bytes, too small for results and notes of up to %d each", cfg.MaxValueSize, o.MaxResultBytes)
	}
	return nil
}

// maxRecord bounds a stored record whose result (or reason) and note are
// each up to maxResult bytes.
func maxRecord(maxResult int) int64 { return 2*int64(maxResult) + recordOverhead }

// wrapErr wraps a store failure with what the ledger was doing, and marks a
// closed or closing connection with ledger.ErrClosed.
func wrapErr(what string, err error) error {
	if kvbucket.Closed(err) {
		return fmt.Errorf("jskv: %s: %w: %w", what, ledger.ErrClosed, err)
	}
	return fmt.Errorf("jskv: %s: %w", what, err)
}

func errConflicts(op string, key dedupe.Key) error {
	return fmt.Errorf("jskv: %s %v: lost %d compare-and-set races in a row", op, key, maxConflictRetries)
}

// begin is Begin's plain path, for a key that exists: a duplicate, which
// finds the work held or done, costs one read that any replica of the
// bucket may answer; a takeover costs that read and a write. Every claim is
// written, volatile or not: the other processes on the bucket must see it.
func (l *Ledger) begin(ctx context.Context, key dedupe.Key, opts ledger.BeginOptions) (ledger.Claim, error) {
	ctx, cancel := kvbucket.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	fail := func(err error) (ledger.Claim, error) {
		return ledger.Claim{}, wrapErr(fmt.Sprint("begin ", key), err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	readAny := l.readAny
	if l.testReadAny != nil {
		readAny = l.testReadAny
	}
	cur, rev, err := readAny(ctx, key)
	if err != nil {
		return fail(err)
	}
	stale := true // cur may be a replica's that has not caught up
	for range maxConflictRetries {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		now := l.opts.Clock.Now()
		c, write, err := ledgerproto.Decide(&l.opts.Options, key, cur, opts, now)
		if err == nil && !write && stale && c.Status == ledger.StatusFailed {
			// A failure is not final: a Clear (an operator's redrive)
			// makes the key new again, and a replica behind the leader
			// may not have it yet. Only the leader's record says failed.
			if cur, rev, err = l.read(ctx, key); err != nil {
				return fail(err)
			}
			stale = false
			continue
		}
		if err != nil || !write {
			return c, err
		}
		seq, ok, err := l.write(ctx, &c.Record, rev)
		if err != nil {
			return fail(err)
		}
		if ok {
			l.holds.set(&c.Record, seq, now)
			return c, nil
		}
		if cur, rev, err = l.read(ctx, key); err != nil {
			return fail(err)
		}
		stale = false
	}
	return ledger.Claim{}, errConflicts("begin", key)
}

// Extend implements ledger.Ledger.
func (l *Ledger) Extend(ctx context.Context, key dedupe.Key, token uint64, d time.Duration) (ledger.Lease, error) {
	var lease ledger.Lease
	err := l.update(ctx, "extend", key, token, func(cur *ledger.Record, now time.Time) (ledger.Record, error) {
		rec, ls, err := ledgerproto.Extended(&l.opts.Options, key, cur, token, d, now)
		lease = ls
		return rec, err
	})
	return lease, err
}

// Note implements ledger.Ledger.
func (l *Ledger) Note(ctx context.Context, key dedupe.Key, token uint64, note []byte, d time.Duration) (ledger.Lease, error) {
	var lease ledger.Lease
	err := l.update(ctx, "note", key, token, func(cur *ledger.Record, now time.Time) (ledger.Record, error) {
		rec, ls, err := ledgerproto.Noted(&l.opts.Options, key, cur, token, note, d, now)
		lease = ls
		return rec, err
	})
	return lease, err
}

// commit is Commit's plain path: it reads the record, decides, and writes
// with a compare-and-set. wrote says that this call's fast path wrote
// already and was refused for the revision. A refused write may have
// landed all the same (in a leader change the server can store a write and
// answer the client that the key was written since), so once this call has
// written, a record it finds committed with the caller's token and result
// (ledgerproto.CommitLanded) is its own commit, done: the commit returns
// nil, where a second Commit call of the holder's, which never wrote, is
// refused as stale.
func (l *Ledger) commit(ctx context.Context, key dedupe.Key, token uint64, result ledger.Result, wrote bool) error {
	err := l.update(ctx, "commit", key, 0, func(cur *ledger.Record, now time.Time) (ledger.Record, error) {
		if wrote && ledgerproto.CommitLanded(ledgerproto.Live(cur, now), token, result) {
			return ledger.Record{}, errLanded
		}
		rec, err := ledgerproto.Committed(&l.opts.Options, key, cur, token, result, now)
		wrote = err == nil // written next, unless refused
		return rec, err
	})
	if errors.Is(err, errLanded) {
		return nil
	}
	return err
}

// errLanded ends an update that finds its write done already.
var errLanded = errors.New("jskv: the write landed already")

// Fail implements ledger.Ledger. Once it has written, a record failed with
// its token and reason is its own write, landed (see commit).
func (l *Ledger) Fail(ctx context.Context, key dedupe.Key, token uint64, reason string) error {
	wrote := false
	err := l.update(ctx, "fail", key, token, func(cur *ledger.Record, now time.Time) (ledger.Record, error) {
		if wrote && ledgerproto.FailLanded(&l.opts.Options, ledgerproto.Live(cur, now), token, reason) {
			return ledger.Record{}, errLanded
		}
		rec, err := ledgerproto.Failed(&l.opts.Options, key, cur, token, reason, now)
		wrote = err == nil
		return rec, err
	})
	if errors.Is(err, errLanded) {
		l.holds.forget(key) // settled: nothing of it to remember
		return nil
	}
	return err
}

// update has fn turn the record of key into the record to store (or
// refuse), and writes that back if the record is still the one fn was given,
// retrying from a read if it is not. It starts from the claim this process
// remembers holding with token, if any (pipeline.go), and otherwise from a
// read of the stream leader.
func (l *Ledger) update(ctx context.Context, op string, key dedupe.Key, token uint64, fn func(cur *ledger.Record, now time.Time) (ledger.Record, error)) error {
	if l.closed.Load() {
		return ledger.ErrClosed
	}
	ctx, cancel := kvbucket.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	fail := func(err error) error { return wrapErr(fmt.Sprint(op, " ", key), err) }
	h, remembered := l.holds.get(key, token)
	for range maxConflictRetries {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		cur, rev := &h.rec, h.rev
		if !remembered {
			var err error
			if cur, rev, err = l.read(ctx, key); err != nil {
				return fail(err)
			}
		}
		remembered = false
		now := l.opts.Clock.Now()
		rec, err := fn(cur, now)
		if err != nil {
			return err
		}
		seq, ok, err := l.write(ctx, &rec, rev)
		if err != nil {
			l.holds.forget(key)
			return fail(err)
		}
		if ok {
			l.holds.set(&rec, seq, now)
			return nil
		}
	}
	return errConflicts(op, key)
}

// write stores rec if the latest revision of its key is still rev (0: the
// key has never been written, or has expired), and returns the revision it
// got. It reports false if another writer got there first.
func (l *Ledger) write(ctx context.Context, rec *ledger.Record, rev uint64) (uint64, bool, error) {
	seq, err := l.kv.Update(ctx, rec.Key.String(), ledgerproto.Append(nil, rec), rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, false, nil
	}
	return seq, err == nil, err
}

// Get implements ledger.Ledger.
func (l *Ledger) Get(ctx context.Context, key dedupe.Key) (ledger.Record, error) {
	if l.closed.Load() {
		return ledger.Record{}, ledger.ErrClosed
	}
	ctx, cancel := kvbucket.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	if err := ctx.Err(); err != nil {
		return ledger.Record{}, wrapErr(fmt.Sprint("get ", key), err)
	}
	cur, _, err := l.read(ctx, key)
	if err != nil {
		return ledger.Record{}, wrapErr(fmt.Sprint("get ", key), err)
	}
	if cur = ledgerproto.Live(cur, l.opts.Clock.Now()); cur == nil {
		return ledger.Record{}, fmt.Errorf("%w: %v", ledger.ErrNotFound, key)
	}
	return *cur, nil
}

// Pending implements ledger.Ledger. It lists every key in the bucket, then
// reads the records one by one: it is O(n) and meant for inspection, not
// for a hot path. A record that does not decode is yielded as an error and
// the listing goes on; any other error ends it.
func (l *Ledger) Pending(ctx context.Context) iter.Seq2[ledger.Record, error] {
	return func(yield func(ledger.Record, error) bool) {
		if l.closed.Load() {
			yield(ledger.Record{}, ledger.ErrClosed)
			return
		}
		keys, err := l.keys(ctx)
		if err != nil {
			yield(ledger.Record{}, err)
			return
		}
		for _, key := range keys {
			rec, err := l.Get(ctx, key)
			switch {
			case errors.Is(err, ledger.ErrNotFound):
				continue
			case errors.Is(err, ledger.ErrCorruptRecord):
				if !yield(ledger.Record{}, err) {
					return
				}
				continue
			case err != nil:
				yield(ledger.Record{}, err)
				return
			}
			if rec.State == ledger.StatePending && !yield(rec, nil) {
				return
			}
		}
	}
}

// keys lists the bucket's keys, sorted, skipping any that are not ledger
// keys. It fails if the listing stalls for the ledger's Timeout.
func (l *Ledger) keys(ctx context.Context) ([]dedupe.Key, error) {
	// The listing reads to the end or until ctx is done: a lister left
	// half-read would leave nats.go's goroutines blocked.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stall := time.NewTimer(l.opts.Timeout)
	defer stall.Stop()
	stalled := func() error {
		return wrapErr("listing keys", fmt.Errorf("no progress in %v: %w", l.opts.Timeout, context.DeadlineExceeded))
	}

	// ListKeys waits for the server to create a consumer, under nats.go's
	// own timeout when ctx has no deadline; the stall timer bounds that
	// wait too. If it fires, cancel makes ListKeys return.
	type listing struct {
		lister jetstream.KeyLister
		err    error
	}
	started := make(chan listing, 1)
	go func() {
		lister, err := l.kv.ListKeys(ctx)
		started <- listing{lister, err}
	}()
	var lister jetstream.KeyLister
	select {
	case s := <-started:
		if s.err != nil {
			return nil, wrapErr("listing keys", s.err)
		}
		lister = s.lister
	case <-stall.C:
		return nil, stalled()
	}
	stall.Reset(l.opts.Timeout)

	var keys []dedupe.Key
	for {
		select {
		case s, ok := <-lister.Keys():
			if !ok {
				if err := ctx.Err(); err != nil {
					return nil, wrapErr("listing keys", err)
				}
				if l.nc.IsClosed() {
					return nil, wrapErr("listing keys", nats.ErrConnectionClosed)
				}
				slices.SortFunc(keys, func(a, b dedupe.Key) int { return slices.Compare(a[:], b[:]) })
				return slices.Compact(keys), nil
			}
			if k, err := dedupe.ParseKey(s); err == nil {
				keys = append(keys, k)
			}
			stall.Reset(l.opts.Timeout)
		case <-stall.C:
			return nil, stalled()
		}
	}
}

// Close implements ledger.Ledger. It does not close the connection.
func (l *Ledger) Close() error {
	l.closed.Store(true)
	return nil
}
