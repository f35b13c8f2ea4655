// Package kvbucket holds what the two JetStream key-value stores share:
// the cache's (pkg/llmcache/jsstore) and the ledger's
// (internal/ledger/jskvstore, behind pkg/dedupe/jskv). Each opens its
// buckets with Open, bounds a call whose context has no deadline with
// WithTimeout, and tells a closed connection with Closed.
package kvbucket

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Open returns the bucket cfg names, creating it with cfg if it does not
// exist. An existing bucket is used as it is: Open never changes it, and
// the caller checks that it fits (its status holds its configuration).
// Errors are JetStream's as they are (jetstream.ErrInvalidBucketName for a
// name no bucket can have), for the caller to wrap.
func Open(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, cfg.Bucket)
	}
	return kv, err
}

// WithTimeout bounds ctx by d if it has no deadline.
func WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// Closed reports whether err says that the connection is closed or
// closing: the store's error then wraps its package's ErrClosed.
func Closed(err error) bool {
	return errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionDraining)
}
