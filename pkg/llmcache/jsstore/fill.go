package jsstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/kvbucket"
	"github.com/oncegate/oncegate/pkg/llmcache"
)

// A claim's value: a state byte (held or released), the lease in
// nanoseconds, and the holder's id.
const (
	claimReleased = 0
	claimHeld     = 1
)

func (s *Store) claimValue(state byte) []byte {
	b := []byte{state}
	b = binary.BigEndian.AppendUint64(b, uint64(s.opts.Lease))
	return append(b, s.owner[:]...)
}

// parseClaim returns a claim value's state, lease and holder; a value it
// cannot read is taken for a released claim.
func parseClaim(v []byte) (held bool, lease time.Duration, owner []byte) {
	if len(v) < 9 || v[0] != claimHeld {
		return false, 0, nil
	}
	return true, time.Duration(binary.BigEndian.Uint64(v[1:])), v[9:]
}

// Fill implements llmcache.Filler; see the package documentation.
func (s *Store) Fill(ctx context.Context, k llmcache.Key, wait time.Duration, live func([]byte) bool) (llmcache.Claim, []byte, error) {
	if s.closed.Load() {
		return nil, nil, llmcache.ErrClosed
	}
	key := claimKey(k)
	mine := s.claimValue(claimHeld)
	cctx, cancel := kvbucket.WithTimeout(ctx, s.opts.Timeout)
	rev, err := s.create(cctx, key, mine)
	cancel()
	if err == nil {
		return s.claimed(ctx, k, rev, live)
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, nil, wrapErr("claim "+k.String(), err)
	}
	return s.await(ctx, k, wait, live)
}

// await watches the answer and the claim of k until a live answer is
// stored, the claim can be taken, wait passes or ctx is done. An answer
// live rejects (the bucket keeps answers past the cache's TTL) is no
// answer: the watch goes on to the claim, and takes it as for a new key,
// so that two processes missing on an expired answer make one call.
func (s *Store) await(ctx context.Context, k llmcache.Key, wait time.Duration, live func([]byte) bool) (llmcache.Claim, []byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	key := claimKey(k)
	mine := s.claimValue(claimHeld)
	w, err := s.watch(ctx, "*."+k.String())
	if err != nil {
		return nil, nil, wrapErr("watch "+k.String(), err)
	}
	defer w.Stop()
	bound := time.NewTimer(wait)
	defer bound.Stop()
	tick := time.NewTicker(max(s.opts.Lease/8, 10*time.Millisecond))
	defer tick.Stop()

	var (
		rev    uint64        // the claim's revision last seen
		seen   time.Time     // when it was seen, on this process's monotonic clock
		lease  time.Duration // the holder's lease
		exists bool          // a claim entry (or its delete marker) was seen
		read   = time.Now()  // when the answer was last read (the watch's start reads it first)
	)
	// take tries to replace the claim at revision rev (0: absent) by ours;
	// having it, it returns what claimed returns.
	take := func() (llmcache.Claim, []byte, bool, error) {
		cctx, cancel := kvbucket.WithTimeout(ctx, s.opts.Timeout)
		defer cancel()
		var r uint64
		var err error
		if rev == 0 && !exists {
			r, err = s.create(cctx, key, mine)
		} else {
			r, err = s.update(cctx, s.kv, key, mine, rev)
		}
		switch {
		case err == nil:
			c, v, err := s.claimed(ctx, k, r, live)
			return c, v, true, err
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			return nil, nil, false, nil // another waiter won; the watch shows its claim
		case ctx.Err() != nil:
			return nil, nil, false, ctx.Err()
		default:
			return nil, nil, false, nil // a store hiccup: the next tick tries again
		}
	}
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, nil, wrapErr("watch "+k.String(), errors.New("watch ended"))
			}
			if e == nil { // the current values have been delivered
				if !exists {
					if c, v, ok, err := take(); ok || err != nil {
						return c, v, err
					}
				}
				continue
			}
			switch e.Key() {
			case headKey(k):
				if e.Operation() != jetstream.KeyValuePut {
					continue
				}
				cctx, cancel := kvbucket.WithTimeout(ctx, s.opts.Timeout)
				v, err := s.assemble(cctx, k, e.Value())
				cancel()
				if err == nil && (live == nil || live(v)) {
					return nil, v, nil
				}
			case key:
				rev, seen, exists = e.Revision(), lastWrite(e), true
				var held bool
				var owner []byte
				if e.Operation() == jetstream.KeyValuePut {
					held, lease, owner = parseClaim(e.Value())
				}
				// A claim of this store's own is one whose create was
				// retried after its answer was lost: one process never
				// fills a key twice at once.
				if !held || bytes.Equal(owner, s.owner[:]) {
					if c, v, ok, err := take(); ok || err != nil {
						return c, v, err
					}
				}
			}
		case <-tick.C:
			// The watch may have ended with the connection to its server
			// (a restart) and be slow to start again: look at the
			// answer itself too, at most twice a second.
			if time.Since(read) >= 500*time.Millisecond {
				read = time.Now()
				if v, ok := s.liveAnswer(ctx, k, live); ok {
					return nil, v, nil
				}
			}
			if exists && time.Since(seen) > lease {
				if c, v, ok, err := take(); ok || err != nil {
					return c, v, err
				}
				seen = time.Now() // lost the race: wait for the winner's claim
			}
		case <-bound.C:
			return nil, nil, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// claimed holds the claim of k just written at revision rev, and then reads
// k's answer from the stream leader, as Filler requires: an answer stored
// after the caller's lookup, but before the claim, is returned instead of
// the claim, which is released. An answer that is expired, damaged or
// missing a chunk is none. If the read fails, so does claimed, and the
// claim is released: the caller must not call the model on a key whose
// answer may be stored.
func (s *Store) claimed(ctx context.Context, k llmcache.Key, rev uint64, live func([]byte) bool) (llmcache.Claim, []byte, error) {
	c := s.hold(k, rev)
	rctx, cancel := kvbucket.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	head, _, found, err := s.leaderRead(rctx, s.last, headKey(k))
	var v []byte
	if err == nil && found {
		v, err = s.assemble(rctx, k, head)
	}
	switch {
	case err != nil && !errors.Is(err, llmcache.ErrNotFound) && !errors.Is(err, llmcache.ErrCorruptEntry):
		c.Release(context.WithoutCancel(ctx))
		return nil, nil, wrapErr("read "+k.String(), err)
	case err == nil && found && (live == nil || live(v)):
		c.Release(context.WithoutCancel(ctx))
		return nil, v, nil
	}
	return c, nil, nil
}

// liveAnswer reads the answer of k, if the store has a live one.
func (s *Store) liveAnswer(ctx context.Context, k llmcache.Key, live func([]byte) bool) ([]byte, bool) {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	v, err := s.Get(ctx, k)
	if err != nil || (live != nil && !live(v)) {
		return nil, false
	}
	return v, true
}

// lastWrite returns when e was written, by the server's clock as this
// process reads it: a waiter may wait less than a lease (its caller's
// bound), and a claim whose holder died must still lapse for the next
// one. A write stamped in this process's future counts from now.
func lastWrite(e jetstream.KeyValueEntry) time.Time {
	now := time.Now()
	if c := e.Created(); c.Before(now) {
		// Keep the monotonic reading: now less the entry's age.
		return now.Add(-now.Sub(c))
	}
	return now
}

// claim is a held fill claim, renewed until released.
type claim struct {
	s    *Store
	k    llmcache.Key
	mu   sync.Mutex
	rev  uint64
	lost bool
	stop chan struct{}
	done chan struct{}
}

func (s *Store) hold(k llmcache.Key, rev uint64) *claim {
	c := &claim{s: s, k: k, rev: rev, stop: make(chan struct{}), done: make(chan struct{})}
	s.renew.Add(1)
	go c.renew()
	return c
}

// renew rewrites the claim every third of the lease, on the revision it
// wrote last, until released or lost (taken over by a waiter that saw it
// lapse).
func (c *claim) renew() {
	defer c.s.renew.Done()
	defer close(c.done)
	t := time.NewTicker(c.s.opts.Lease / 3)
	defer t.Stop()
	v := c.s.claimValue(claimHeld)
	for {
		select {
		case <-c.stop:
			return
		case <-c.s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.s.opts.Lease/3)
		c.mu.Lock()
		rev, err := c.s.kv.Update(ctx, claimKey(c.k), v, c.rev)
		switch {
		case err == nil:
			c.rev = rev
		case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			// Taken over, or a renewal whose answer was lost applied.
			e, gerr := c.s.kv.Get(ctx, claimKey(c.k))
			if gerr != nil {
				break // try again at the next tick
			}
			if held, _, owner := parseClaim(e.Value()); held && bytes.Equal(owner, c.s.owner[:]) {
				c.rev = e.Revision()
			} else {
				c.lost = true
			}
		}
		lost := c.lost
		c.mu.Unlock()
		cancel()
		if lost {
			return
		}
	}
}

// Release implements llmcache.Claim: it marks the claim released, unless
// another process has taken it over.
func (c *claim) Release(ctx context.Context) error {
	select {
	case <-c.stop:
		return nil
	default:
	}
	close(c.stop)
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost || c.s.closed.Load() {
		return nil
	}
	ctx, cancel := kvbucket.WithTimeout(ctx, c.s.opts.Timeout)
	defer cancel()
	_, err := c.s.update(ctx, c.s.kv, claimKey(c.k), c.s.claimValue(claimReleased), c.rev)
	if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return wrapErr("release "+c.k.String(), err)
	}
	return nil
}
