package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/jsretry"
)

// jsErrNoPeers is the JetStream API's error code for a stream or bucket
// that cannot be placed: not enough peers up for its replicas (a node of
// the cluster down).
const jsErrNoPeers = 10005

// retriable reports whether creating or reading an admin stream or bucket
// may pass if tried again: what jsretry.Transient says, and a placement
// that finds too few peers while a node is down.
func retriable(err error) bool {
	var apiErr *jetstream.APIError
	return jsretry.Transient(err) || errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrNoPeers
}

// again calls op until it succeeds, fails for good, or ctx ends, waiting
// between tries; what it returns is op's last error.
func (a *Admin) again(ctx context.Context, what string, op func(context.Context) error) error {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		err := op(ctx)
		if err == nil || !retriable(err) || ctx.Err() != nil || !sleepCtx(ctx, wait) {
			return err
		}
		a.log.Warn("admin: "+what+" failed; trying again", "err", err)
	}
}

// Setup creates what the operations keep their state in, if it does not
// exist: the audit stream, the redrive marks bucket and the bulk redrives'
// bucket, with the trigger stream's replicas. A consumer calls it as it
// starts, when its cluster is whole: created later, in an incident, a
// replicated stream cannot be placed while a node is down. The operations
// create what is missing themselves all the same.
func (a *Admin) Setup(ctx context.Context) error {
	if err := a.aud.ensure(ctx); err != nil {
		return err
	}
	if a.marks(ctx, true) == nil {
		return fmt.Errorf("admin: the redrive marks bucket %s cannot be opened or created", MarksBucket)
	}
	_, err := a.jobs(ctx)
	return err
}
