// Package history records what a ledger was asked and what it answered, so
// that a run under faults can be checked for linearizability afterwards (the
// soak harness checks the histories of every consumer replica against a
// sequential model of the ledger, as Jepsen checks a database's).
//
// A [Recorder] wraps a ledger.Ledger and appends one JSON line per event to
// a file: the invocation of an operation (the operation, the key, the
// token presented, and so on) and its response (the status, the tokens,
// the error class). An invocation is in the file before the operation
// reaches the store: a process killed with SIGKILL loses none. Responses
// are written with the next invocation, or within Options.FlushEvery, so a
// killed process loses at most the responses of its last moments; an
// operation without a response, as one the process was in the middle of
// when it died, has an unknown outcome: it may or may not have taken
// effect, at any time after its invocation, and a checker must allow both
// (as Jepsen does). [Read] pairs the events back up into [Op]s.
//
// The package also holds [Outage], a wrapper that refuses ledger writes for
// a while, with which fault builds simulate a ledger that cannot be written
// (a KV leader election, a full disk).
//
// Both are for test and fault builds; production builds do not wrap their
// ledger.
package history

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"context"

	"github.com/cespare/xxhash/v2"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Operations, as Event.Op names them.
const (
	OpBegin   = "begin"
	OpExtend  = "extend"
	OpNote    = "note"
	OpCommit  = "commit"
	OpFail    = "fail"
	OpClear   = "clear"
	OpGet     = "get"
	OpPending = "pending"
	OpClose   = "close"
)

// Kinds of event.
const (
	KindOpen   = "open"   // a process opened the file: Process names it
	KindCall   = "call"   // an operation's invocation
	KindReturn = "return" // its response
)

// Error classes, as Event.Err names them. Every class but ErrOther is one of
// the ledger's own verdicts, given before anything was written: the
// operation did not take effect. ErrOther (a timeout, a lost connection, a
// store's failure) says nothing about whether it did.
const (
	ErrStale    = "stale"      // ledger.ErrStaleToken
	ErrNotFound = "not_found"  // ledger.ErrNotFound
	ErrMismatch = "mismatch"   // ledger.ErrFingerprintMismatch
	ErrTooLarge = "too_large"  // ledger.ErrResultTooLarge
	ErrNotFail  = "not_failed" // ledger.ErrNotFailed
	ErrInvalid  = "invalid"    // ledger.ErrInvalidLedger
	ErrClosed   = "closed"     // ledger.ErrClosed
	ErrCorrupt  = "corrupt"    // ledger.ErrCorruptRecord
	ErrOther    = "other"      // anything else: the outcome is unknown
)

// MaxReason is how much of a failure reason an event keeps.
const MaxReason = 256

// Event is one line of a history file.
type Event struct {
	Kind string `json:"ev"`
	// ID names the operation: the process, a slash, and the operation's
	// sequence number in that process. A call and its return share it.
	ID string `json:"id,omitempty"`
	// Process names the process that opened the file (KindOpen only).
	Process string `json:"process,omitempty"`
	// Time is the wall clock, in nanoseconds since the Unix epoch: before
	// the operation reached the store for a call, after it returned for a
	// return.
	Time int64 `json:"t"`
	// Op is the operation (calls only).
	Op string `json:"op,omitempty"`
	// Key is the record's key, in hex (calls only).
	Key string `json:"key,omitempty"`
	// Owner, Fingerprint (hex), Lease (ns) and Volatile are a Begin's
	// options.
	Owner       string `json:"owner,omitempty"`
	Fingerprint string `json:"fp,omitempty"`
	Lease       int64  `json:"lease,omitempty"`
	Volatile    bool   `json:"volatile,omitempty"`
	// Token is, on a call, the token presented (Extend, Commit, Fail); on
	// a return, the lease's token (Begin, Extend).
	Token uint64 `json:"token,omitempty"`
	// Result is a hash of a result (see ResultHash): the one committed, on
	// a Commit's call; the one stored, on a return that shows a committed
	// record.
	Result string `json:"result,omitempty"`
	// Note is a hash of a note (see NoteHash): the one given, on a Note's
	// call; the one stored, on a return that shows a record with one.
	Note string `json:"note,omitempty"`
	// Reason is a failure reason, cut to MaxReason bytes: the one given,
	// on a Fail's call; the one stored, on a return that shows a failed
	// record.
	Reason string `json:"reason,omitempty"`
	// Status is Begin's verdict (returns only).
	Status string `json:"status,omitempty"`
	// State and RecToken are the state and token of the record a Begin or
	// a Get returned.
	State    string `json:"state,omitempty"`
	RecToken uint64 `json:"rec_token,omitempty"`
	// Mismatch is Begin's Claim.Mismatch.
	Mismatch bool `json:"mismatch,omitempty"`
	// N counts the records Pending listed.
	N int `json:"n,omitempty"`
	// Err is the error's class, and Msg its text (returns only).
	Err string `json:"err,omitempty"`
	Msg string `json:"msg,omitempty"`
}

// appendJSON appends ev as a JSON object, as encoding/json would marshal
// it (it is read back with encoding/json), without reflection: the recorder
// writes two events per ledger operation.
func (ev *Event) appendJSON(b []byte) []byte {
	b = append(b, `{"ev":`...)
	b = appendString(b, ev.Kind)
	str := func(name, v string) {
		if v != "" {
			b = append(append(append(b, ',', '"'), name...), '"', ':')
			b = appendString(b, v)
		}
	}
	num := func(name string, v uint64, neg bool) {
		if v != 0 {
			b = append(append(append(b, ',', '"'), name...), '"', ':')
			if neg {
				b = append(b, '-')
			}
			b = strconv.AppendUint(b, v, 10)
		}
	}
	signed := func(name string, v int64) {
		if v < 0 {
			num(name, uint64(-v), true)
		} else {
			num(name, uint64(v), false)
		}
	}
	flag := func(name string, v bool) {
		if v {
			b = append(append(append(b, ',', '"'), name...), `":true`...)
		}
	}
	str("id", ev.ID)
	str("process", ev.Process)
	b = append(b, `,"t":`...)
	b = strconv.AppendInt(b, ev.Time, 10)
	str("op", ev.Op)
	str("key", ev.Key)
	str("owner", ev.Owner)
	str("fp", ev.Fingerprint)
	signed("lease", ev.Lease)
	flag("volatile", ev.Volatile)
	num("token", ev.Token, false)
	str("result", ev.Result)
	str("note", ev.Note)
	str("reason", ev.Reason)
	str("status", ev.Status)
	str("state", ev.State)
	num("rec_token", ev.RecToken, false)
	flag("mismatch", ev.Mismatch)
	signed("n", int64(ev.N))
	str("err", ev.Err)
	str("msg", ev.Msg)
	return append(b, '}')
}

// appendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD,
// as encoding/json makes it.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xf])
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

// ErrClass returns the class of a ledger error: "" for nil.
func ErrClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ledger.ErrStaleToken):
		return ErrStale
	case errors.Is(err, ledger.ErrNotFound):
		return ErrNotFound
	case errors.Is(err, ledger.ErrFingerprintMismatch):
		return ErrMismatch
	case errors.Is(err, ledger.ErrResultTooLarge):
		return ErrTooLarge
	case errors.Is(err, ledger.ErrNotFailed):
		return ErrNotFail
	case errors.Is(err, ledger.ErrInvalidLedger):
		return ErrInvalid
	case errors.Is(err, ledger.ErrClosed):
		return ErrClosed
	case errors.Is(err, ledger.ErrCorruptRecord):
		return ErrCorrupt
	}
	return ErrOther
}

// ResultHash returns the hash an event keeps of a result: its downstream
// id, model reference and response, not its commit time (the ledger sets
// that).
func ResultHash(r ledger.Result) string {
	d := xxhash.New()
	d.WriteString(r.DownstreamID)
	d.Write([]byte{0})
	d.WriteString(r.ModelRef)
	d.Write([]byte{0})
	d.Write(r.Response)
	var b [8]byte
	return hex.EncodeToString(d.Sum(b[:0]))
}

// NoteHash returns the hash an event keeps of a note.
func NoteHash(note []byte) string {
	if len(note) == 0 {
		return ""
	}
	var b [8]byte
	return hex.EncodeToString(binary.BigEndian.AppendUint64(b[:0], xxhash.Sum64(note)))
}

func cutReason(s string) string {
	if len(s) > MaxReason {
		return s[:MaxReason]
	}
	return s
}

// Options configures a Recorder. The zero value means the defaults.
type Options struct {
	// Process names the process in the file; operation ids start with it.
	// The default is "pid" and the process id.
	Process string
	// Now reads the wall clock. The default is time.Now.
	Now func() time.Time
	// FlushEvery is how often responses waiting for the next invocation
	// are written all the same, so that a process killed while idle
	// loses few. The default is 20ms.
	FlushEvery time.Duration
}

// Recorder is a ledger.Ledger that records every operation on the ledger
// it wraps. Open returns a *Recorder, or a *BatchRecorder when the wrapped
// ledger is a ledger.Batcher, so that batching works as it would without
// the recorder.
//
// A Recorder is safe for concurrent use by multiple goroutines.
type Recorder struct {
	l    ledger.Ledger
	opts Options
	seq  atomic.Uint64

	// Group commit: events wait in buf; an invocation is written before the
	// operation goes on, together with whatever else is waiting, by one
	// write call at a time.
	mu      sync.Mutex
	cond    sync.Cond
	f       *os.File
	buf     []byte
	spare   []byte
	started uint64 // flushes that have taken buf
	done    uint64 // flushes written
	writing bool
	werr    error // the first write error
	closed  bool
	stop    chan struct{} // closed by Close: the flusher stops
	stopped chan struct{}
}

// BatchRecorder is a Recorder of a ledger that is a ledger.Batcher: it
// records each request of a batch as an operation of its own, all invoked
// and answered at the batch's times.
type BatchRecorder struct {
	*Recorder
	b ledger.Batcher
}

var (
	_ ledger.Ledger  = (*Recorder)(nil)
	_ ledger.Batcher = (*BatchRecorder)(nil)
)

// Open returns a ledger that records every operation on l, appending to the
// file at path (created if absent). It returns a *BatchRecorder if l is a
// ledger.Batcher, else a *Recorder. Closing it closes l and the file.
func Open(path string, l ledger.Ledger, opts Options) (ledger.Ledger, error) {
	if opts.Process == "" {
		opts.Process = fmt.Sprintf("pid%d", os.Getpid())
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = 20 * time.Millisecond
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	r := &Recorder{l: l, opts: opts, f: f}
	r.cond.L = &r.mu
	// The leading newline ends a line that a process killed mid-write may
	// have left unfinished.
	r.buf = append(r.buf, '\n')
	r.log(true, Event{Kind: KindOpen, Process: opts.Process, Time: opts.Now().UnixNano()})
	if r.werr != nil {
		f.Close()
		return nil, fmt.Errorf("history: %w", r.werr)
	}
	r.stop, r.stopped = make(chan struct{}), make(chan struct{})
	go r.flusher()
	if b, ok := l.(ledger.Batcher); ok {
		return &BatchRecorder{Recorder: r, b: b}, nil
	}
	return r, nil
}

// Err returns the first error writing the file met, if any: the history
// then misses events, and a check of it is void.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.werr
}

func (r *Recorder) now() int64 { return r.opts.Now().UnixNano() }

func (r *Recorder) id() string { return fmt.Sprintf("%s/%d", r.opts.Process, r.seq.Add(1)) }

// flusher writes waiting responses every FlushEvery until Close.
func (r *Recorder) flusher() {
	defer close(r.stopped)
	t := time.NewTicker(r.opts.FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.mu.Lock()
			waiting := len(r.buf) > 0 && !r.writing
			r.mu.Unlock()
			if waiting {
				r.log(true)
			}
		}
	}
}

// log appends evs to the history; with wait it returns only once they are
// in the file (in the kernel's hands: a process killed after that does not
// lose them). Responses do not wait: one lost to a kill makes its operation
// one of unknown outcome, which a checker allows for.
func (r *Recorder) log(wait bool, evs ...Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.werr != nil {
		return
	}
	for _, ev := range evs {
		r.buf = append(ev.appendJSON(r.buf), '\n')
	}
	if !wait {
		return
	}
	mine := r.started + 1 // the flush that writes buf as it stands
	for r.done < mine && r.werr == nil {
		if r.writing {
			r.cond.Wait()
			continue
		}
		r.writing = true
		r.started++
		data := r.buf
		r.buf, r.spare = r.spare[:0], nil
		r.mu.Unlock()
		_, err := r.f.Write(data)
		r.mu.Lock()
		r.spare = data
		r.writing = false
		r.done++
		if err != nil && r.werr == nil {
			r.werr = err
			fmt.Fprintf(os.Stderr, "history: recording the ledger's operations failed; the history is incomplete: %v\n", err)
		}
		r.cond.Broadcast()
	}
}

func errEvent(ev *Event, err error) {
	if err != nil {
		ev.Err, ev.Msg = ErrClass(err), err.Error()
	}
}

func beginCall(id string, t int64, key dedupe.Key, o ledger.BeginOptions) Event {
	return Event{Kind: KindCall, ID: id, Time: t, Op: OpBegin, Key: key.String(), Owner: o.Owner,
		Fingerprint: o.Fingerprint.String(), Lease: int64(o.Lease), Volatile: o.Volatile}
}

func beginReturn(id string, t int64, c ledger.Claim, err error) Event {
	ev := Event{Kind: KindReturn, ID: id, Time: t}
	if err != nil {
		errEvent(&ev, err)
		ev.Mismatch = c.Mismatch
		return ev
	}
	ev.Status, ev.Token, ev.Mismatch = c.Status.String(), c.Lease.Token, c.Mismatch
	recordFields(&ev, c.Record)
	return ev
}

func recordFields(ev *Event, rec ledger.Record) {
	ev.State, ev.RecToken = rec.State.String(), rec.Token
	ev.Note = NoteHash(rec.Note)
	switch rec.State {
	case ledger.StateCommitted:
		ev.Result = ResultHash(rec.Result)
	case ledger.StateFailed:
		ev.Reason = cutReason(rec.Reason)
	}
}

// Begin implements ledger.Ledger.
func (r *Recorder) Begin(ctx context.Context, key dedupe.Key, opts ledger.BeginOptions) (ledger.Claim, error) {
	id := r.id()
	r.log(true, beginCall(id, r.now(), key, opts))
	c, err := r.l.Begin(ctx, key, opts)
	r.log(false, beginReturn(id, r.now(), c, err))
	return c, err
}

// Extend implements ledger.Ledger.
func (r *Recorder) Extend(ctx context.Context, key dedupe.Key, token uint64, d time.Duration) (ledger.Lease, error) {
	id := r.id()
	r.log(true, Event{Kind: KindCall, ID: id, Time: r.now(), Op: OpExtend, Key: key.String(), Token: token, Lease: int64(d)})
	ls, err := r.l.Extend(ctx, key, token, d)
	ev := Event{Kind: KindReturn, ID: id, Time: r.now()}
	if err == nil {
		ev.Token = ls.Token
	}
	errEvent(&ev, err)
	r.log(false, ev)
	return ls, err
}

// Note implements ledger.Ledger.
func (r *Recorder) Note(ctx context.Context, key dedupe.Key, token uint64, note []byte, d time.Duration) (ledger.Lease, error) {
	id := r.id()
	r.log(true, Event{Kind: KindCall, ID: id, Time: r.now(), Op: OpNote, Key: key.String(), Token: token, Lease: int64(d), Note: NoteHash(note)})
	ls, err := r.l.Note(ctx, key, token, note, d)
	ev := Event{Kind: KindReturn, ID: id, Time: r.now()}
	if err == nil {
		ev.Token = ls.Token
	}
	errEvent(&ev, err)
	r.log(false, ev)
	return ls, err
}

func commitCall(id string, t int64, key dedupe.Key, token uint64, res ledger.Result) Event {
	return Event{Kind: KindCall, ID: id, Time: t, Op: OpCommit, Key: key.String(), Token: token, Result: ResultHash(res)}
}

// Commit implements ledger.Ledger.
func (r *Recorder) Commit(ctx context.Context, key dedupe.Key, token uint64, result ledger.Result) error {
	id := r.id()
	r.log(true, commitCall(id, r.now(), key, token, result))
	err := r.l.Commit(ctx, key, token, result)
	ev := Event{Kind: KindReturn, ID: id, Time: r.now()}
	errEvent(&ev, err)
	r.log(false, ev)
	return err
}

// Fail implements ledger.Ledger.
func (r *Recorder) Fail(ctx context.Context, key dedupe.Key, token uint64, reason string) error {
	id := r.id()
	r.log(true, Event{Kind: KindCall, ID: id, Time: r.now(), Op: OpFail, Key: key.String(), Token: token, Reason: cutReason(reason)})
	err := r.l.Fail(ctx, key, token, reason)
	ev := Event{Kind: KindReturn, ID: id, Time: r.now()}
	errEvent(&ev, err)
	r.log(false, ev)
	return err
}

// Clear implements ledger.Ledger.
func (r *Recorder) Clear(ctx context.Context, key dedupe.Key, token uint64, note string) error {
	id := r.id()
	r.log(true, Event{Kind: KindCall, ID: id, Time: r.now(), Op: OpClear, Key: key.String(), Token: token})
	err := r.l.Clear(ctx, key, token, note)
	ev := Event{Kind: KindReturn, ID: id, Time: r.now()}
	errEvent(&ev, err)
	r.log(false, ev)
	return err
}

// Get implements ledger.Ledger.
func (r *Recorder) Get(ctx context.Context, key dedupe.Key) (ledger.Record, error) {
	id := r.id()
	r.log(true, Event{Kind: KindCall, ID: id, Time: r.now(), Op: OpGet, Key: key.String()})
	rec, err := r.l.Get(ctx, key)
	ev := Event{Kind: KindReturn, ID: id, Time: r.now()}
	if err == nil {
		recordFields(&ev, rec)
	}
	errEvent(&ev, err)
	r.log(false, ev)
	return rec, err
}

// Pending implements ledger.Ledger. The listing is recorded as one
// operation, with the number of records it yielded.
func (r *Recorder) Pending(ctx context.Context) iter.Seq2[ledger.Record, error] {
	return func(yield func(ledger.Record, error) bool) {
		id := r.id()
		r.log(true, Event{Kind: KindCall, ID: id, Time: r.now(), Op: OpPending})
		n := 0
		var lastErr error
		for rec, err := range r.l.Pending(ctx) {
			if err != nil {
				lastErr = err
			} else {
				n++
			}
			if !yield(rec, err) {
				break
			}
		}
		ev := Event{Kind: KindReturn, ID: id, Time: r.now(), N: n}
		errEvent(&ev, lastErr)
		r.log(false, ev)
	}
}

// Close implements ledger.Ledger: it closes the wrapped ledger, then the
// file.
func (r *Recorder) Close() error {
	id := r.id()
	r.log(true, Event{Kind: KindCall, ID: id, Time: r.now(), Op: OpClose})
	err := r.l.Close()
	ev := Event{Kind: KindReturn, ID: id, Time: r.now()}
	errEvent(&ev, err)
	r.log(true, ev)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return err
	}
	r.closed = true
	close(r.stop)
	r.mu.Unlock()
	<-r.stopped
	r.mu.Lock()
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// BeginBatch implements ledger.Batcher.
func (b *BatchRecorder) BeginBatch(ctx context.Context, reqs []ledger.BeginRequest) []ledger.BeginResult {
	ids := make([]string, len(reqs))
	calls := make([]Event, len(reqs))
	t := b.now()
	for i, q := range reqs {
		ids[i] = b.id()
		calls[i] = beginCall(ids[i], t, q.Key, q.Options)
	}
	b.log(true, calls...)
	out := b.b.BeginBatch(ctx, reqs)
	t = b.now()
	rets := make([]Event, len(out))
	for i, res := range out {
		rets[i] = beginReturn(ids[i], t, res.Claim, res.Err)
	}
	b.log(false, rets...)
	return out
}

// CommitBatch implements ledger.Batcher.
func (b *BatchRecorder) CommitBatch(ctx context.Context, reqs []ledger.CommitRequest) []error {
	ids := make([]string, len(reqs))
	calls := make([]Event, len(reqs))
	t := b.now()
	for i, q := range reqs {
		ids[i] = b.id()
		calls[i] = commitCall(ids[i], t, q.Key, q.Token, q.Result)
	}
	b.log(true, calls...)
	errs := b.b.CommitBatch(ctx, reqs)
	t = b.now()
	rets := make([]Event, len(errs))
	for i, err := range errs {
		rets[i] = Event{Kind: KindReturn, ID: ids[i], Time: t}
		errEvent(&rets[i], err)
	}
	b.log(false, rets...)
	return errs
}

// Unanswered is the Return time Read gives an operation without a
// response: it may take effect at any time after its invocation.
const Unanswered = math.MaxInt64

// Op is an operation read back from a history: its invocation, and its
// response if there was one.
type Op struct {
	Call Event
	// Return is the response; its Kind is "" if the operation never
	// answered (its process died first).
	Return Event
}

// Answered reports whether the operation has a response.
func (o Op) Answered() bool { return o.Return.Kind == KindReturn }

// Known reports whether the operation's outcome is known: it answered,
// with a result or with one of the ledger's own verdicts. An operation
// that did not answer, or failed with ErrOther, may or may not have taken
// effect.
func (o Op) Known() bool { return o.Answered() && o.Return.Err != ErrOther }

// ReturnTime is the response's time, or Unanswered.
func (o Op) ReturnTime() int64 {
	if !o.Answered() {
		return Unanswered
	}
	return o.Return.Time
}

// Stats counts what Read found.
type Stats struct {
	Processes  int // processes that opened the file
	Ops        int // operations invoked
	Unanswered int // of them, without a response
	Torn       int // lines that are not events (a write cut by a kill)
}

// Read reads a history file's events and pairs them into operations, in the
// order of their invocations.
func Read(rd io.Reader) ([]Op, Stats, error) {
	var st Stats
	var ops []Op
	index := map[string]int{}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var ev Event
		if err := json.Unmarshal(line, &ev); err != nil {
			st.Torn++
			continue
		}
		switch ev.Kind {
		case KindOpen:
			st.Processes++
		case KindCall:
			index[ev.ID] = len(ops)
			ops = append(ops, Op{Call: ev})
		case KindReturn:
			i, ok := index[ev.ID]
			if !ok {
				return nil, st, fmt.Errorf("history: a response to %s, which was never invoked", ev.ID)
			}
			ops[i].Return = ev
		default:
			st.Torn++
		}
	}
	if err := sc.Err(); err != nil {
		return nil, st, fmt.Errorf("history: %w", err)
	}
	st.Ops = len(ops)
	for _, o := range ops {
		if !o.Answered() {
			st.Unanswered++
		}
	}
	return ops, st, nil
}

// ReadFile reads the history file at path.
func ReadFile(path string) ([]Op, Stats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, Stats{}, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	return Read(f)
}
