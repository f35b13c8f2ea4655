package kvbucket_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/kvbucket"
	"github.com/oncegate/oncegate/internal/natstest"
)

// TestOpen: Open creates a bucket that does not exist, and uses one that
// does as it is, whatever the config it is given.
func TestOpen(t *testing.T) {
	_, js := natstest.Connect(t, natstest.RunServer(t))
	ctx := context.Background()
	kv, err := kvbucket.Open(ctx, js, jetstream.KeyValueConfig{Bucket: "b", History: 1, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	again, err := kvbucket.Open(ctx, js, jetstream.KeyValueConfig{Bucket: "b", History: 5, TTL: time.Minute})
	if err != nil {
		t.Fatalf("Open of an existing bucket with another config: %v", err)
	}
	st, err := again.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != time.Hour || st.History() != 1 {
		t.Errorf("existing bucket: TTL %v, history %d; want it unchanged (1h, 1)", st.TTL(), st.History())
	}
	if e, err := again.Get(ctx, "k"); err != nil || string(e.Value()) != "v" {
		t.Errorf("existing bucket lost its value: %v", err)
	}
	if _, err := kvbucket.Open(ctx, js, jetstream.KeyValueConfig{Bucket: "no spaces"}); !errors.Is(err, jetstream.ErrInvalidBucketName) {
		t.Errorf("Open of an invalid name = %v; want ErrInvalidBucketName", err)
	}
}

// TestWithTimeout: a context with a deadline keeps it; one without gets d.
func TestWithTimeout(t *testing.T) {
	dl := time.Now().Add(time.Hour)
	parent, cancel := context.WithDeadline(context.Background(), dl)
	defer cancel()
	ctx, done := kvbucket.WithTimeout(parent, time.Second)
	done()
	if got, _ := ctx.Deadline(); !got.Equal(dl) || ctx.Err() != nil {
		t.Errorf("with a deadline: %v, %v; want the parent's %v, not canceled", got, ctx.Err(), dl)
	}
	ctx, done = kvbucket.WithTimeout(context.Background(), time.Second)
	defer done()
	if got, ok := ctx.Deadline(); !ok || time.Until(got) > time.Second {
		t.Errorf("without a deadline: %v, %v; want one within 1s", got, ok)
	}
}

// TestClosed: a closed or draining connection's errors, wrapped or not.
func TestClosed(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nats.ErrConnectionClosed, true},
		{fmt.Errorf("get: %w", nats.ErrConnectionDraining), true},
		{nats.ErrTimeout, false},
		{nil, false},
	} {
		if got := kvbucket.Closed(tt.err); got != tt.want {
			t.Errorf("Closed(%v) = %v; want %v", tt.err, got, tt.want)
		}
	}
}
