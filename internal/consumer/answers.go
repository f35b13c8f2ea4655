package consumer

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/dirlock"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// stepRecord is where t's model step finds and keeps its answers: the
// note of t's ledger record, as its claim read it (or, if it has none,
// one this process could not write there, or the answer of the holder
// whose claim t's took over: askPrevious), and a save that writes the
// answers into the record before the effect, renewing the lease. What
// the step has is t.stepNote, which the intent's askers (serveAnswers)
// get once t's work ends.
//
// A paid answer must not be lost to a ledger that is briefly away (a KV
// leader election, a server restarting): save retries the write while
// t's lease lasts, and while it fails keeps the note in the process
// (unsaved), where the intent's next try here finds it, and a replica
// that takes the intent over can ask for it. A save that finds the lease
// taken over marks t lost: its effect is not sent, and the new holder, or
// this message's redelivery, answers for the intent.
func (g *gate) stepRecord(ctx context.Context, t *Trigger) stepRecord {
	if g.ledger == nil {
		return stepRecord{}
	}
	prior, elsewhere := t.claim.Record.Note, false
	if len(prior) == 0 {
		prior = g.c.unsaved.get(t.key)
		elsewhere = len(prior) > 0
	}
	if len(prior) == 0 && t.claim.Status == ledger.StatusTakenOver && !t.claim.Released && t.claim.Previous != "" {
		prior = g.askPrevious(ctx, t)
		elsewhere = len(prior) > 0
	}
	t.stepNote = prior
	return stepRecord{prior: prior, elsewhere: elsewhere, save: func(note []byte) {
		t.stepNote = note
		g.saveNote(ctx, t, note)
	}, live: func() bool { return !g.leaseGone(t) }}
}

// saveNote writes note into t's ledger record (see stepRecord).
//
// A try whose answer does not come within noteTry is not waited for alone:
// another try starts beside it, and the first answer counts. A write whose
// reply is lost (a node leaving, a leader changing) would otherwise hold
// the save for the store's own timeout, longer than the lease, while the
// ledger answers the tries after it in milliseconds (the cluster soak, seed
// 501023642: three notes unanswered for 1.2s while the same keys' renewals
// took 24 to 50ms, and the process killed before its answers were in
// their records); and a try that is only slow (a KV bucket electing its
// leader) still answers. A note written twice is the same note.
func (g *gate) saveNote(ctx context.Context, t *Trigger, note []byte) {
	// With a directory (a ledger across the network), held on disk before
	// the ledger is asked, so that a process killed while the ledger does
	// not answer (a server down) leaves it to its next start; without, held
	// only once the ledger has failed to take it.
	kept := g.c.unsaved.dir != ""
	if kept {
		g.c.unsaved.keep(t.key, note, t.token.Load())
	}
	tries := newLeaseTries(ctx, func(ctx context.Context) (ledger.Lease, error) {
		return g.ledger.Note(ctx, t.key, t.token.Load(), note, g.lease)
	})
	defer tries.stop() // the tries still under way once one has answered
	// hold keeps the note in the process once the ledger has failed to
	// take it, or is slow to: the intent's next try here, and a replica
	// that takes it over and asks, find it.
	hold := func() {
		if !kept {
			g.c.unsaved.keep(t.key, note, t.token.Load())
			kept = true
		}
	}
	giveUp := func(err error) {
		// The process keeps it (on disk, if it has a data directory) and
		// writes it once the ledger is back (heldNotes.flush), unless the
		// intent was taken over by then.
		hold()
		g.c.unsaved.giveUp(t.key)
		g.c.log.Warn("the model's answer was not kept in the intent's record; this process keeps it, and writes it once the ledger takes it",
			"pipeline", g.pipeline, "key", t.key.String(), "err", err)
	}
	// past reports whether the save must give up by then: the lease, less
	// a tenth of it, is over.
	past := func(at int64) bool { return g.leaseGone(t) || at > t.leaseEnd.Load()-int64(g.lease/10) }
	tries.try()
	hedge := time.NewTimer(noteTry(g.lease))
	defer hedge.Stop()
	var retry <-chan time.Time // the pause before the next try, after an error
	wait := 50 * time.Millisecond
	for {
		select {
		case a := <-tries.answers:
			tries.inFlight--
			switch err := a.err; {
			case err == nil:
				t.token.Store(a.lease.Token)
				t.leaseEnd.Store(a.asked + int64(g.lease))
				if kept {
					g.c.unsaved.forget(t.key)
				}
				return
			case errors.Is(err, ledger.ErrStaleToken):
				// Taken over while the model answered: the new holder may
				// ask for the answer (serveAnswers).
				t.lost.Store(true)
				g.c.unsaved.keep(t.key, note, 0)
				return
			case errors.Is(err, ledger.ErrResultTooLarge), errors.Is(err, ledger.ErrInvalidLedger), errors.Is(err, ledger.ErrClosed):
				if !errors.Is(err, ledger.ErrClosed) {
					g.c.unsaved.forget(t.key)
				}
				g.c.log.Warn("the model's answer was not kept in the intent's record: a retry pays for it again",
					"pipeline", g.pipeline, "key", t.key.String(), "err", err)
				return
			}
			hold()
			switch {
			case tries.inFlight > 0 || retry != nil:
				// Another try is under way, or due.
			case past(mono() + int64(wait)):
				giveUp(a.err)
				return
			default:
				hedge.Stop()
				retry = time.After(wait)
				wait = min(2*wait, time.Second)
			}
		case <-retry:
			retry = nil
			tries.try()
			hedge.Reset(noteTry(g.lease))
		case <-hedge.C:
			hold()
			if past(mono()) {
				giveUp(errNoteUnanswered)
				return
			}
			tries.try()
			hedge.Reset(noteTry(g.lease))
		case <-ctx.Done(): // the lease ran out, or the consumer stops
			hold()
			g.c.unsaved.giveUp(t.key)
			return
		}
	}
}

// leaseTries are the tries of one write that renews a lease (a note, a
// renewal), run side by side (see saveNote): try starts one, whose answer
// comes on answers unless stop was called first.
type leaseTries struct {
	ctx      context.Context
	stop     context.CancelFunc
	call     func(context.Context) (ledger.Lease, error)
	answers  chan leaseAnswer
	inFlight int // tries started and not yet taken from answers
}

// leaseAnswer is a try's answer; asked is when it started (by mono).
type leaseAnswer struct {
	asked int64
	lease ledger.Lease
	err   error
}

func newLeaseTries(ctx context.Context, call func(context.Context) (ledger.Lease, error)) *leaseTries {
	ctx, stop := context.WithCancel(ctx)
	return &leaseTries{ctx: ctx, stop: stop, call: call, answers: make(chan leaseAnswer)}
}

func (lt *leaseTries) try() {
	lt.inFlight++
	go func() {
		a := leaseAnswer{asked: mono()}
		a.lease, a.err = lt.call(lt.ctx)
		select {
		case lt.answers <- a:
		case <-lt.ctx.Done():
		}
	}()
}

// errNoteUnanswered is why a save gave up whose tries the ledger did not
// answer within the lease.
var errNoteUnanswered = errors.New("no try was answered within the lease")

// noteTry is how long a try of writing a note under a lease of d goes
// unanswered before another starts beside it: a quarter of the lease, at
// least 250ms.
func noteTry(d time.Duration) time.Duration { return max(d/4, 250*time.Millisecond) }

// A replica that takes an intent over from a holder that is still alive —
// its lease ran out while it waited on the model (a pause, a stall, a
// clock that jumped), or the ledger refused its answer's note — would pay
// for the answer again. So before it calls the model it asks the holder
// it took the claim from (Claim.Previous), over NATS: each consumer
// process answers on a subject of its own (answersSubject) with the note
// of an intent whose step it has run (unsaved) or, once its call ends,
// is running (answerBoard). No responder means the holder is gone, and
// the new holder calls at once; a holder that does not answer in
// llm.timeout (a paused process) is given up on too.
//
// A holder killed with answers the ledger had not taken leaves them on
// its disk (held.go), and its next start loads them. So the subject is
// not the process's but its data directory's: with a held directory the
// owner name is "host:pid/identity", the identity kept in the directory
// (Owner), and the next process on it answers on its predecessor's
// subject; it does so from the start, before its ledger opens (ServeHeld:
// a cluster recovering can take seconds to open a bucket, while another
// replica takes the intents over and asks).

// answersPrefix starts the subjects consumer processes answer on.
const answersPrefix = "oncegate.answers."

// answersSubject is the subject the process whose ledger owner is owner
// (with or without a trigger's "#ref") answers on: derived from its
// identity, if the name has one, else from the name.
func answersSubject(owner string) string {
	owner, _, _ = strings.Cut(owner, "#")
	if i := strings.LastIndexByte(owner, '/'); i >= 0 {
		owner = owner[i+1:]
	}
	return answersPrefix + strconv.FormatUint(xxhash.Sum64String(owner), 16)
}

// identityFile is the file in a held directory that keeps the identity of
// the processes that run on it.
const identityFile = ".identity"

// lockFile is the lock a process takes on a held directory: one process
// at a time runs on it, and has its identity.
const lockFile = ".lock"

// heldLocks are the held directories this process has locked (for its
// life: a second consumer in the process, as a restart of it, shares the
// directory).
var heldLocks struct {
	sync.Mutex
	files map[string]*os.File
}

// ErrHeldDirInUse is Owner's error when another process runs on the held
// directory: two processes that shared one would answer for each other's
// intents on one subject.
var ErrHeldDirInUse = errors.New("consumer: the held answers' directory is used by another Oncegate process: each replica needs a data directory of its own")

// Owner returns the ledger owner name of this process: "host:pid", and
// with a held directory (Options.HeldDir) "host:pid/identity", where the
// identity is kept in dir, made on the first start: every process that
// runs on dir, one at a time (it locks dir for its life: ErrHeldDirInUse),
// answers for its intents on the same subject.
func Owner(dir string) (string, error) {
	host, _ := os.Hostname()
	owner := fmt.Sprintf("%s:%d", host, os.Getpid())
	if dir == "" {
		return owner, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("held answers: %w", err)
	}
	heldLocks.Lock()
	defer heldLocks.Unlock()
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("held answers: %w", err)
	}
	if heldLocks.files[abs] == nil {
		f, err := dirlock.Lock(dir, lockFile)
		var held *dirlock.HeldError
		if errors.As(err, &held) {
			return "", fmt.Errorf("%w (%s holds %s)", ErrHeldDirInUse, held.Holder(), dir)
		}
		if err != nil {
			return "", fmt.Errorf("held answers: %w", err)
		}
		if heldLocks.files == nil {
			heldLocks.files = map[string]*os.File{}
		}
		heldLocks.files[abs] = f
	}
	path := filepath.Join(dir, identityFile)
	b, err := os.ReadFile(path)
	id := strings.TrimSpace(string(b))
	if errors.Is(err, fs.ErrNotExist) || err == nil && !validIdentity(id) {
		id = rand.Text()[:16]
		err = os.WriteFile(path, []byte(id+"\n"), 0o600)
	}
	if err != nil {
		return "", fmt.Errorf("held answers: the process's identity: %w", err)
	}
	return owner + "/" + id, nil
}

// validIdentity reports whether id can be an identity: a few letters and
// digits.
func validIdentity(id string) bool {
	if len(id) < 8 || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
			return false
		}
	}
	return true
}

// serveAnswers answers the askers of this process's intents; the
// returned function stops it.
func (c *Consumer) serveAnswers() (func(), error) {
	sub, err := c.nc.Subscribe(answersSubject(c.opts.Owner), func(m *nats.Msg) {
		k, err := dedupe.ParseKey(string(m.Data))
		if err != nil {
			return
		}
		go func() {
			var note []byte
			if f := c.board.get(k); f != nil {
				t := time.NewTimer(c.cfg.LLM.Timeout)
				select {
				case <-f.done:
					note = f.note
				case <-t.C:
				}
				t.Stop()
			}
			if note == nil {
				note = c.answerOf(k)
			}
			c.unsaved.respond(m, k, note)
		}()
	})
	if err != nil {
		return nil, err
	}
	return func() { sub.Unsubscribe() }, nil
}

// respond answers m, an ask for k's answer, with note (nil: none), sealed
// if h is.
func (h *heldNotes) respond(m *nats.Msg, k dedupe.Key, note []byte) {
	if h.box != nil {
		note = h.box.Seal(k, answerKind, note)
	}
	m.Respond(note)
}

// ServeHeld answers, for the process whose ledger owner is owner, the
// askers of the intents whose answers a process before it left in dir
// (sealed with key, if set), until the returned function is called: what
// a process does from its start, before it can open its ledger, while the
// consumer it will run (Options.Answering says when it answers itself)
// cannot. With no answer in dir it answers nothing (an asker meets no
// responder and calls at once).
func ServeHeld(nc *nats.Conn, dir string, key []byte, owner string, log *slog.Logger) (func(), error) {
	h, err := newHeldNotes(dir, key, slog.New(slog.DiscardHandler))
	if err != nil || len(h.notes) == 0 {
		return func() {}, err
	}
	sub, err := nc.Subscribe(answersSubject(owner), func(m *nats.Msg) {
		if k, err := dedupe.ParseKey(string(m.Data)); err == nil {
			h.respond(m, k, h.get(k))
		}
	})
	if err != nil {
		return nil, err
	}
	log.Info("answering for the answers held before the last stop while the ledger opens", "answers", len(h.notes))
	return sync.OnceFunc(func() { sub.Unsubscribe() }), nil
}

// answerOf is the note this process holds for k: the one its step's call
// ended with, or one the ledger would not take; nil if none.
func (c *Consumer) answerOf(k dedupe.Key) []byte {
	if f := c.board.get(k); f != nil {
		select {
		case <-f.done:
			return f.note
		default:
		}
	}
	return c.unsaved.get(k)
}

// askPrevious asks the holder t's claim took the intent over from for the
// note of its step (see answersSubject), and returns it, or nil.
func (g *gate) askPrevious(ctx context.Context, t *Trigger) []byte {
	ctx, cancel := context.WithTimeout(ctx, g.c.cfg.LLM.Timeout)
	defer cancel()
	subject := answersSubject(t.claim.Previous)
	if subject == answersSubject(g.c.opts.Owner) {
		// An earlier delivery in this process, or in a process before it
		// on its data directory: its answer is in the record, or held
		// here (stepRecord looked). The board's entry for
		// the intent is t's own by now: waiting on it would wait for t.
		return g.c.unsaved.get(t.key)
	}
	m, err := g.c.nc.RequestWithContext(ctx, subject, []byte(t.key.String()))
	if err != nil {
		if !errors.Is(err, nats.ErrNoResponders) {
			g.c.log.Debug("the intent's previous holder did not answer", "pipeline", g.pipeline, "key", t.key.String(), "holder", t.claim.Previous, "err", err)
		}
		return nil
	}
	if box := g.c.unsaved.box; box != nil {
		// Sealed by a process that holds the key: an answer from
		// anyone else on the subject does not open.
		return box.Open(t.key, answerKind, m.Data)
	}
	return m.Data
}

// answerKind is the kind an answer to an asker is sealed as.
const answerKind = 'a'

// answerBoard holds the model calls this process's steps are making, by
// intent, so that an asker waits for one's answer.
type answerBoard struct {
	mu    sync.Mutex
	calls map[dedupe.Key]*inFlight
}

// inFlight is a step's call: done is closed when it ends, with note.
type inFlight struct {
	done chan struct{}
	note []byte
}

func (b *answerBoard) start(k dedupe.Key) *inFlight {
	f := &inFlight{done: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.calls == nil {
		b.calls = map[dedupe.Key]*inFlight{}
	}
	b.calls[k] = f
	return f
}

func (b *answerBoard) get(k dedupe.Key) *inFlight {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[k]
}

// finish ends f, k's call, with note: an asker waiting for it gets it, and
// later ones get it from the record or from unsaved.
func (b *answerBoard) finish(k dedupe.Key, f *inFlight, note []byte) {
	f.note = note
	close(f.done)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.calls[k] == f {
		delete(b.calls, k)
	}
}
