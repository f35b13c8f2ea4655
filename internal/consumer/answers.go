package consumer

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// stepRecord is where t's model step finds and keeps its answers: the
// note of t's ledger record, as its claim read it (or, if it has none,
// one this process could not write there), and a save that writes the
// answers into the record before the effect, renewing the lease.
//
// A paid answer must not be lost to a ledger that is briefly away (a KV
// leader election, a server restarting): save retries the write while
// t's lease lasts, and while it fails keeps the note in the process
// (unsaved), where the intent's next try here finds it. A save that finds
// the lease taken over marks t lost: its effect is not sent, and the new
// holder, or this message's redelivery, answers for the intent.
func (g *gate) stepRecord(ctx context.Context, t *Trigger) stepRecord {
	if g.ledger == nil {
		return stepRecord{}
	}
	prior := t.claim.Record.Note
	if len(prior) == 0 {
		prior = g.c.unsaved.get(t.key)
	}
	return stepRecord{prior: prior, save: func(note []byte) { g.saveNote(ctx, t, note) }}
}

// saveNote writes note into t's ledger record (see stepRecord).
func (g *gate) saveNote(ctx context.Context, t *Trigger, note []byte) {
	kept := false
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		asked := mono()
		l, err := g.ledger.Note(ctx, t.key, t.token.Load(), note, g.lease)
		switch {
		case err == nil:
			t.token.Store(l.Token)
			t.leaseEnd.Store(asked + int64(g.lease))
			if kept {
				g.c.unsaved.forget(t.key)
			}
			return
		case errors.Is(err, ledger.ErrStaleToken):
			t.lost.Store(true)
			return
		case errors.Is(err, ledger.ErrResultTooLarge), errors.Is(err, ledger.ErrInvalidLedger), errors.Is(err, ledger.ErrClosed):
			g.c.log.Warn("the model's answer was not kept in the intent's record: a retry pays for it again",
				"pipeline", g.pipeline, "key", t.key.String(), "err", err)
			return
		}
		if !kept {
			g.c.unsaved.keep(t.key, note)
			kept = true
		}
		if g.leaseGone(t) || mono()+int64(wait) > t.leaseEnd.Load()-int64(g.lease/10) {
			g.c.log.Warn("the model's answer was not kept in the intent's record; this process keeps it for the intent's next try here",
				"pipeline", g.pipeline, "key", t.key.String(), "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// maxUnsaved bounds the notes a process keeps for the ledger: past it, the
// oldest is dropped (its intent's next try pays again).
const maxUnsaved = 4096

// unsavedNotes are the notes the ledger refused, by intent, oldest first.
type unsavedNotes struct {
	mu    sync.Mutex
	notes map[dedupe.Key][]byte
	order []dedupe.Key
}

func (u *unsavedNotes) keep(k dedupe.Key, note []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.notes == nil {
		u.notes = map[dedupe.Key][]byte{}
	}
	if _, ok := u.notes[k]; !ok {
		u.order = append(u.order, k)
	}
	u.notes[k] = note
	if len(u.order) > 2*maxUnsaved { // forgotten ones: drop their places
		u.order = slices.DeleteFunc(u.order, func(k dedupe.Key) bool { return u.notes[k] == nil })
	}
	for len(u.notes) > maxUnsaved {
		delete(u.notes, u.order[0])
		u.order = u.order[1:]
	}
}

func (u *unsavedNotes) get(k dedupe.Key) []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.notes[k]
}

func (u *unsavedNotes) forget(k dedupe.Key) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.notes, k) // its place in order goes when it comes up
}
