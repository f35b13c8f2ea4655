package jsstore

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// attemptTimeout bounds one request to the servers within a call: a
// request sent while a bucket elects a leader, or while the connection
// fails over to another server, gets no answer, and the next one may.
const attemptTimeout = time.Second

// transient reports whether err may pass by itself: no answer in time, no
// responder (no stream leader yet), a connection in the middle of a
// reconnect.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, jetstream.ErrNoStreamResponse):
		return true
	case errors.As(err, &apiErr):
		return apiErr.Code == 503 || apiErr.Code == 408
	}
	return false
}

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
		if err == nil || !transient(err) || ctx.Err() != nil {
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
