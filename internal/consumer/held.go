package consumer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/sealed"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// heldNotes are the model steps' notes (their answers) the ledger would
// not take into their intents' records, by intent: a paid answer must not
// be lost to a ledger that is briefly away. The intent's next try in this
// process takes its note from here, and so does a replica that takes the
// intent over and asks this one (serveAnswers). A note whose step gave up
// on the ledger (its lease ran out) is written by flush, in the
// background, with the token it was paid under, once the ledger takes
// writes again, unless the intent was taken over since.
//
// With a directory, every note waits on disk too from before the ledger
// is asked until it has it (one file per intent: the token, then the
// note, sealed with the key if one is set), so that a process killed
// meanwhile does not lose it: the next start loads the files and flush
// writes them.
type heldNotes struct {
	dir string
	box *sealed.Box // nil: the files are not sealed
	log *slog.Logger

	mu    sync.Mutex
	notes map[dedupe.Key]*held
	order []dedupe.Key
}

// held is one note and the token its answer was paid under (0: one no
// longer current); background says its step gave up on the ledger, or
// was taken over, and flush writes it.
type held struct {
	note       []byte
	token      uint64
	background bool
}

// maxHeld bounds the notes a process keeps: past it, the oldest is dropped
// (its intent's next try pays again).
const maxHeld = 4096

// heldFlushEvery is how often flush tries the notes again.
const heldFlushEvery = 500 * time.Millisecond

// heldKind is the kind the files' contents are sealed as.
const heldKind = 'h'

func newHeldNotes(dir string, key []byte, log *slog.Logger) (*heldNotes, error) {
	h := &heldNotes{dir: dir, log: log, notes: map[dedupe.Key]*held{}}
	if len(key) > 0 {
		box, err := sealed.NewBox(key)
		if err != nil {
			return nil, err
		}
		h.box = box
	}
	if dir == "" {
		return h, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("held answers: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("held answers: %w", err)
	}
	for _, e := range entries {
		k, err := dedupe.ParseKey(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && h.box != nil {
			b = h.box.Open(k, heldKind, b)
		}
		if err != nil || len(b) <= 8 {
			// Left as it is: another key, say, may read it.
			log.Warn("a held answer does not read (another encryption key?); left on disk, unused", "key", k.String(), "err", err)
			continue
		}
		h.notes[k] = &held{token: binary.BigEndian.Uint64(b), note: b[8:], background: true}
		h.order = append(h.order, k)
	}
	if len(h.notes) > 0 {
		log.Info("answers the ledger did not take before the last stop: writing them once it does", "answers", len(h.notes))
	}
	return h, nil
}

// keep holds note for k, paid under token (0: not to be written: the
// intent was taken over), in memory and, with token, on disk.
func (h *heldNotes) keep(k dedupe.Key, note []byte, token uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.notes[k]; !ok {
		h.order = append(h.order, k)
	} else if old.token != 0 && token == 0 && h.dir != "" {
		os.Remove(filepath.Join(h.dir, k.String())) // held in memory only, now
	}
	// A note paid under a token that is no longer current (0) is only to
	// be deposited (flush) where the intent's new holder left none.
	h.notes[k] = &held{note: note, token: token, background: token == 0}
	if len(h.order) > 2*maxHeld { // forgotten ones: drop their places
		h.order = slices.DeleteFunc(h.order, func(k dedupe.Key) bool { return h.notes[k] == nil })
	}
	for len(h.notes) > maxHeld {
		h.drop(h.order[0])
		h.order = h.order[1:]
	}
	if token != 0 && h.dir != "" {
		b := binary.BigEndian.AppendUint64(nil, token)
		b = append(b, note...)
		if h.box != nil {
			b = h.box.Seal(k, heldKind, b)
		}
		// Not synced, as the LLM cache's held answers are not: it is written
		// for every answer, and a process's crash does not lose it.
		if err := os.WriteFile(filepath.Join(h.dir, k.String()), b, 0o600); err != nil {
			h.log.Warn("a held answer was not written to disk: a crash would lose it", "key", k.String(), "err", err)
		}
	}
}

// giveUp marks k's note for flush to write.
func (h *heldNotes) giveUp(k dedupe.Key) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.notes[k]; n != nil && n.token != 0 {
		n.background = true
	}
}

func (h *heldNotes) get(k dedupe.Key) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.notes[k]; n != nil {
		return n.note
	}
	return nil
}

func (h *heldNotes) forget(k dedupe.Key) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drop(k) // its place in order goes when it comes up
}

// drop forgets k and removes its file. The caller holds h.mu.
func (h *heldNotes) drop(k dedupe.Key) {
	if n := h.notes[k]; n != nil && n.token != 0 && h.dir != "" {
		os.Remove(filepath.Join(h.dir, k.String()))
	}
	delete(h.notes, k)
}

// flushEvery runs flush every d until ctx ends.
func (h *heldNotes) flushEvery(ctx context.Context, l ledger.Ledger, d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		h.flush(ctx, l)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// flush writes the notes whose steps gave up on the ledger into their
// records, with the token each was paid under and a lease that ends at
// once (the work may have half happened: its next claim is a takeover,
// told to reconcile, that finds the note). A note the ledger refuses for
// its token — the intent was taken over, and its new holder may have died
// before it could ask for the answer or write it — is deposited in the
// record as it is now, if it is pending without a note: whoever holds or
// next claims the intent finds it there. A note whose intent is done, or
// noted, is forgotten.
func (h *heldNotes) flush(ctx context.Context, l ledger.Ledger) {
	h.mu.Lock()
	var due []dedupe.Key
	for k, n := range h.notes {
		if n.background {
			due = append(due, k)
		}
	}
	h.mu.Unlock()
	for _, k := range due {
		h.mu.Lock()
		n := h.notes[k]
		h.mu.Unlock()
		if n == nil || !n.background {
			continue
		}
		done, err := h.write(ctx, l, k, n)
		if err != nil {
			return // the ledger is still away: the rest wait too
		}
		if done {
			h.mu.Lock()
			if h.notes[k] == n {
				h.drop(k)
			}
			h.mu.Unlock()
		}
	}
}

// write writes n into k's record (see flush), and reports whether n is
// done with; an error says the ledger did not answer.
func (h *heldNotes) write(ctx context.Context, l ledger.Ledger, k dedupe.Key, n *held) (bool, error) {
	if n.token != 0 {
		_, err := l.Note(ctx, k, n.token, n.note, time.Nanosecond)
		switch {
		case err == nil:
			h.log.Info("a held answer is kept in its intent's record", "key", k.String())
			return true, nil
		case errors.Is(err, ledger.ErrNotFound), errors.Is(err, ledger.ErrResultTooLarge), errors.Is(err, ledger.ErrInvalidLedger):
			return true, nil
		case !errors.Is(err, ledger.ErrStaleToken):
			return false, err
		}
	}
	rec, err := l.Get(ctx, k)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return true, nil
	case err != nil:
		return false, err
	case rec.State != ledger.StatePending || len(rec.Note) > 0:
		return true, nil // done, failed, or noted by its holder
	}
	_, err = l.Note(ctx, k, rec.Token, n.note, 0) // the holder's lease as it is
	switch {
	case err == nil:
		h.log.Info("a held answer is kept in its intent's record, under its new holder", "key", k.String())
		return true, nil
	case errors.Is(err, ledger.ErrStaleToken):
		return false, nil // claimed again meanwhile: look next time
	case errors.Is(err, ledger.ErrNotFound), errors.Is(err, ledger.ErrResultTooLarge), errors.Is(err, ledger.ErrInvalidLedger):
		return true, nil
	}
	return false, err
}
