package jsstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/natstest"
)

// lostWatch is a bucket on a real server whose first Watch request gets no
// answer, as happens to one sent as the server goes away: nats.go waits for
// the answer for as long as the context allows.
type lostWatch struct {
	jetstream.KeyValue
	calls atomic.Int32
}

func (kv *lostWatch) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	if kv.calls.Add(1) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return kv.KeyValue.Watch(ctx, keys, opts...)
}

// TestWatchAfterALostAnswer: a watch whose request had no answer is asked
// again, and the watch that starts then sees the bucket's changes. (CI's run
// of TestWaiterThroughRestart once caught the lost answer for real: the
// waiter's only watch request was in flight as the server shut down, and
// it waited out the whole wait for it.)
func TestWatchAfterALostAnswer(t *testing.T) {
	srv := natstest.RunServer(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(ctx, js, Options{Bucket: "lost"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	kv := &lostWatch{KeyValue: s.kv}
	s.kv = kv

	w, err := s.watch(ctx, "answer.*")
	if err != nil {
		t.Fatalf("watch: %v; want a watch after the lost answer", err)
	}
	defer w.Stop()
	if n := kv.calls.Load(); n != 2 {
		t.Fatalf("%d watch requests; want 2 (the lost one, then one answered)", n)
	}
	// It is a working watch: it sees a put made after it started.
	if e := <-w.Updates(); e != nil {
		t.Fatalf("first update %v; want the end of the (empty) current values", e.Key())
	}
	if _, err := s.kv.Put(ctx, "answer.x", []byte("yes")); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-w.Updates():
		if e == nil || e.Key() != "answer.x" || string(e.Value()) != "yes" {
			t.Fatalf("update %v; want answer.x = yes", e)
		}
	case <-ctx.Done():
		t.Fatal("the watch saw no put")
	}
}
