package jsstore

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/jsretry"
)

// attemptTimeout bounds one request to the servers within a call: a
// request sent while a bucket elects a leader, or while the connection
// fails over to another server, gets no answer, and the next one may.
const attemptTimeout = time.Second

// retry runs op, each attempt under attemptTimeout, until it succeeds,
// fails for good, or ctx is done. An op that writes must be one that a
// second attempt after a lost answer cannot hurt, or must tell that case
// apart itself.
func retry(ctx context.Context, op func(ctx context.Context) error) error {
	wait := 20 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := op(actx)
		cancel()
		if err == nil || !jsretry.Transient(err) || ctx.Err() != nil {
			if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
				return errors.Join(ctx.Err(), err)
			}
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), err)
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// maxWatchAttempt bounds the growth of a watch's attempts (see watch).
const maxWatchAttempt = 8 * time.Second

// watch starts a watch of the bucket's keys matching filter, retrying as
// retry does; the watch lives until ctx is done or it is stopped. It cannot
// use retry: nats.go keeps the context a watch was started with, to create
// its consumer again after a reconnect, so an attempt that succeeds must
// keep its context. An attempt that has no answer after attemptTimeout (its
// request sent as the server went away: nats.go waits for that answer as
// long as the context allows) is abandoned, its context cancelled, and
// another made; each waits twice as long as the one before, up to
// maxWatchAttempt, so that a slow server is not asked again and again.
func (s *Store) watch(ctx context.Context, filter string) (jetstream.KeyWatcher, error) {
	type started struct {
		w   jetstream.KeyWatcher
		err error
	}
	wait, attempt := 20*time.Millisecond, attemptTimeout
	for {
		actx, cancel := context.WithCancel(ctx)
		ch := make(chan started, 1)
		go func() {
			w, err := s.kv.Watch(actx, filter)
			ch <- started{w, err}
		}()
		t := time.NewTimer(attempt)
		var err error
		select {
		case r := <-ch:
			t.Stop()
			if r.err == nil {
				return stoppingWatch{r.w, cancel}, nil
			}
			cancel()
			err = r.err
		case <-t.C:
			cancel()
			if r := <-ch; r.err == nil {
				r.w.Stop() // it started as it was abandoned
			}
			err = context.DeadlineExceeded
			attempt = min(2*attempt, maxWatchAttempt)
		}
		if !jsretry.Transient(err) || ctx.Err() != nil {
			if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
				return nil, errors.Join(ctx.Err(), err)
			}
			return nil, err
		}
		t = time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(ctx.Err(), err)
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// stoppingWatch is a watch that cancels its context when it is stopped.
type stoppingWatch struct {
	jetstream.KeyWatcher
	cancel context.CancelFunc
}

func (w stoppingWatch) Stop() error {
	defer w.cancel()
	return w.KeyWatcher.Stop()
}
