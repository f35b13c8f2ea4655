package llmcache

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"
)

// Answers kept on this process's disk (Options.HoldDir) until the store has
// them. A file per answer, named by its key in hex: the magic, a flag byte
// (sealed or not), the namespace and step it was paid for (length-prefixed;
// its counters are theirs), then the entry as the store would get it, or,
// sealed, a random 96-bit nonce and the entry under AES-GCM with the key as
// additional data. The entry's checksum, or the seal, tells a file cut
// short by a death mid-write from a whole one.
const (
	holdMagic  = "OGH1"
	holdSealed = 1
)

// holdFiles keeps paid answers in a directory until the store has them; nil
// without Options.HoldDir.
type holdFiles struct {
	dir  string
	aead cipher.AEAD // nil: the answers are written as they are
}

func newHoldFiles(dir string, key []byte) (*holdFiles, error) {
	if dir == "" {
		return nil, nil
	}
	h := &holdFiles{dir: dir}
	if key != nil {
		if n := len(key); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("%w: HoldKey is %d bytes; want 16, 24 or 32", ErrInvalidOptions, n)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("%w: HoldKey: %w", ErrInvalidOptions, err)
		}
		if h.aead, err = cipher.NewGCM(block); err != nil {
			return nil, fmt.Errorf("%w: HoldKey: %w", ErrInvalidOptions, err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("llmcache: HoldDir: %w", err)
	}
	return h, nil
}

func (h *holdFiles) path(k Key) string { return filepath.Join(h.dir, k.String()) }

// write keeps a, paid for in namespace ns and step, in the file of k.
func (h *holdFiles) write(k Key, ns, step string, a *storedAnswer) error {
	entry := a.marshal()
	b := make([]byte, 0, len(holdMagic)+1+2*binary.MaxVarintLen64+len(ns)+len(step)+len(entry)+28)
	b = append(b, holdMagic...)
	if h.aead != nil {
		b = append(b, holdSealed)
	} else {
		b = append(b, 0)
	}
	for _, s := range []string{ns, step} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	if h.aead != nil {
		nonce := make([]byte, h.aead.NonceSize())
		crand.Read(nonce)
		b = append(b, nonce...)
		b = h.aead.Seal(b, nonce, entry, k[:])
	} else {
		b = append(b, entry...)
	}
	return os.WriteFile(h.path(k), b, 0o600)
}

// remove forgets the file of k, once the store has its answer.
func (h *holdFiles) remove(k Key) error {
	if err := os.Remove(h.path(k)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// read decodes a file of the directory.
func (h *holdFiles) read(b []byte, k Key) (ns, step string, a *storedAnswer, err error) {
	if len(b) < len(holdMagic)+1 || string(b[:len(holdMagic)]) != holdMagic {
		return "", "", nil, fmt.Errorf("%w: not a held answer", ErrCorruptEntry)
	}
	sealed := b[len(holdMagic)] == holdSealed
	rest := b[len(holdMagic)+1:]
	var parts [2]string
	for i := range parts {
		n, m := binary.Uvarint(rest)
		if m <= 0 || n > uint64(len(rest)-m) {
			return "", "", nil, fmt.Errorf("%w: truncated", ErrCorruptEntry)
		}
		parts[i], rest = string(rest[m:m+int(n)]), rest[m+int(n):]
	}
	switch {
	case sealed && h.aead == nil:
		return "", "", nil, fmt.Errorf("%w: sealed, and no HoldKey to open it", ErrCorruptEntry)
	case !sealed && h.aead != nil:
		return "", "", nil, fmt.Errorf("%w: in plain text where HoldKey seals the answers", ErrCorruptEntry)
	case sealed:
		ns := h.aead.NonceSize()
		if len(rest) < ns+h.aead.Overhead() {
			return "", "", nil, fmt.Errorf("%w: truncated", ErrCorruptEntry)
		}
		if rest, err = h.aead.Open(nil, rest[:ns], rest[ns:], k[:]); err != nil {
			return "", "", nil, fmt.Errorf("%w: does not open: %w", ErrCorruptEntry, err)
		}
	}
	a, err = unmarshalEntry(rest)
	return parts[0], parts[1], a, err
}

// spool keeps a, paid for by f, on disk until the store has it, if the
// Cache has a HoldDir; it reports whether it did.
func (f *fill) spool(a *storedAnswer) bool {
	c := f.t.c
	if c.holdFiles == nil {
		return false
	}
	if err := c.holdFiles.write(f.key, f.call.Namespace, f.call.Step, a); err != nil {
		c.opts.Logger.Warn("llmcache: keeping a paid answer in HoldDir failed; it lives in memory until stored", "key", f.key.String(), "err", err)
		return false
	}
	return true
}

// unspool forgets the file of k, once the store has its answer.
func (c *Cache) unspool(k Key) {
	if c.holdFiles == nil {
		return
	}
	if err := c.holdFiles.remove(k); err != nil {
		c.opts.Logger.Warn("llmcache: removing a stored answer from HoldDir failed; the next start stores it again", "key", k.String(), "err", err)
	}
}

// reclaim takes up the answers a process before this one left in HoldDir,
// paid for and not stored (it died first): each is held, served to this
// process's lookups, and stored as storeLater stores an answer the store
// refused, unless the store has a live answer for its key by then (another
// process paid for one meanwhile: the stored answer stays, ours is
// dropped). A file that does not decode (cut short by a death mid-write,
// or sealed with another key) or whose answer has expired is removed.
func (c *Cache) reclaim() error {
	if c.holdFiles == nil {
		return nil
	}
	des, err := os.ReadDir(c.holdFiles.dir)
	if err != nil {
		return fmt.Errorf("llmcache: HoldDir: %w", err)
	}
	for _, de := range des {
		var k Key
		name := de.Name()
		if raw, err := hex.DecodeString(name); err != nil || len(raw) != len(k) || !de.Type().IsRegular() {
			continue // not a held answer's file
		} else {
			copy(k[:], raw)
		}
		b, err := os.ReadFile(filepath.Join(c.holdFiles.dir, name))
		if err != nil {
			c.opts.Logger.Warn("llmcache: a held answer in HoldDir is unreadable", "key", name, "err", err)
			continue
		}
		ns, step, a, err := c.holdFiles.read(b, k)
		switch {
		case err != nil:
			c.opts.Logger.Warn("llmcache: a held answer in HoldDir does not decode; removed", "key", name, "err", err)
			c.unspool(k)
			continue
		case !c.opts.Clock().Before(a.Expires):
			c.unspool(k)
			continue
		}
		st := c.stats.step(ns, step)
		c.hold(k, a)
		st.held.Add(1)
		c.opts.Logger.Info("llmcache: a paid answer left in HoldDir by an earlier process is held, to be stored", "key", name)
		c.fills.Add(1)
		go func() {
			defer c.fills.Done()
			c.storeHeld(k, a, st, 0, true)
		}()
	}
	return nil
}

// errStoredMeanwhile says that the store has a live answer for a key whose
// held answer was to be stored: another process paid for one meanwhile.
var errStoredMeanwhile = errors.New("llmcache: another answer stored meanwhile")

// storeHeld retries, with backoff, the write of a paid answer a for k that
// the store refused, or that an earlier process left in HoldDir, until it
// lands: it is held meanwhile (get serves it). attempt numbers the tries
// made already. With check, each try first looks at the store and drops a
// (stored is the answer another process paid for meanwhile) if it holds a
// live answer. Only Close ends the retries early, after one last attempt:
// the answer then stays in HoldDir for the next process, or, without one,
// is lost with the process, as a kill would lose it.
func (c *Cache) storeHeld(k Key, a *storedAnswer, st *stepCounters, attempt int, check bool) {
	defer c.unhold(k, a)
	defer st.held.Add(-1)
	try := func(ctx context.Context) error {
		if check {
			switch old, err := c.store.Get(ctx, k); {
			case errors.Is(err, ErrNotFound):
			case err != nil:
				return err
			default:
				if o, err := unmarshalEntry(old); err == nil && c.opts.Clock().Before(o.Expires) {
					return errStoredMeanwhile
				}
			}
		}
		return c.put(ctx, k, a)
	}
	done := func(err error) bool {
		switch {
		case errors.Is(err, errStoredMeanwhile):
			c.opts.Logger.Info("llmcache: a held answer is dropped: another process stored one for its key meanwhile", "key", k.String())
		case err == nil:
			st.stored.Add(1)
		default:
			return false
		}
		c.unspool(k)
		return true
	}
	wait := 100 * time.Millisecond
	for attempt++; ; attempt++ {
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), storeLastTry)
			err := try(ctx)
			cancel()
			if done(err) {
				return
			}
			if c.holdFiles != nil {
				c.opts.Logger.Warn("llmcache: cache closed before a paid answer could be stored; it stays in HoldDir for the next start",
					"key", k.String(), "attempts", attempt, "err", err)
			} else {
				c.opts.Logger.Warn("llmcache: cache closed before a paid answer could be stored; it is lost",
					"key", k.String(), "attempts", attempt, "err", err)
			}
			st.notStored.Add(1)
			return
		}
		ctx, cancel := context.WithTimeout(c.ctx, storeFirstTry)
		err := try(ctx)
		cancel()
		if done(err) {
			if err == nil {
				c.opts.Logger.Info("llmcache: a held answer is stored", "key", k.String(), "attempts", attempt)
			}
			return
		}
		if attempt%10 == 0 {
			c.opts.Logger.Warn("llmcache: store still failing; holding the answer", "key", k.String(), "attempts", attempt, "err", err)
		}
		wait = min(2*wait, storeMaxBackoff)
	}
}
