package jsretry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/jsretry"
)

func TestTransient(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nats.ErrNoResponders, true},
		{fmt.Errorf("admin: reading stream D: %w", nats.ErrNoResponders), true},
		{nats.ErrTimeout, true},
		{context.DeadlineExceeded, true},
		{nats.ErrConnectionReconnecting, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008}, true},
		{&jetstream.APIError{Code: 408}, true},
		{&jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound}, false},
		{jetstream.ErrStreamNotFound, false},
		{context.Canceled, false},
		{errors.New("permissions violation"), false},
	} {
		if got := jsretry.Transient(tt.err); got != tt.want {
			t.Errorf("Transient(%v) = %v; want %v", tt.err, got, tt.want)
		}
	}
}
