package jsstore

import (
	"context"
	"errors"
	"time"

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
