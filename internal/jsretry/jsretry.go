// Package jsretry tells which errors of a NATS or JetStream request may
// pass if the request is sent again.
package jsretry

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Transient reports whether err may pass by itself: no answer in time, no
// responder (a node's JetStream coming back, a stream or consumer leader
// being elected), a connection in the middle of a reconnect, or the
// server's 503 and 408. The caller decides how long to keep trying: a
// context.DeadlineExceeded is the attempt's own, or the caller's.
func Transient(err error) bool {
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
