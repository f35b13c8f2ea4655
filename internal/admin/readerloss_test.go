package admin_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/consumer"
)

// noRespondersMidRead has the second fetch of every reader of a stream
// find no responder, as a pull right after the reader's consumer is
// recreated (an ordered consumer makes a new one per fetch) does on a
// cluster whose routes have not carried the new consumer's interest yet
// (after a leader moved, a node came back).
type noRespondersMidRead struct {
	jetstream.JetStream
	failed atomic.Int32
}

func (j *noRespondersMidRead) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	st, err := j.JetStream.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return &flakyStream{Stream: st, j: j}, nil
}

type flakyStream struct {
	jetstream.Stream
	j *noRespondersMidRead
}

func (s *flakyStream) OrderedConsumer(ctx context.Context, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	c, err := s.Stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &flakyReader{Consumer: c, j: s.j}, nil
}

type flakyReader struct {
	jetstream.Consumer
	j       *noRespondersMidRead
	fetches int
}

func (c *flakyReader) FetchNoWait(n int) (jetstream.MessageBatch, error) {
	c.fetches++
	if c.fetches == 2 {
		c.j.failed.Add(1)
		return nil, nats.ErrNoResponders
	}
	return c.Consumer.FetchNoWait(n)
}

// TestRedriveOutlivesNoResponders: a redrive reads the dead letters a
// batch at a time; on the cluster soak (seed 515151), 60s after its faults
// ended, a fetch past the first batch found no responder and the redrive
// gave up half-way ("admin: reading stream ONCEGATE_DEAD: nats: no
// responders available for request"), the letters it had taken redriven
// and the rest not, every run of it alike. A read that fails on the way now
// goes on from the letter after the last one it handed out: here every
// reader's second fetch finds no responder, and the redrive takes each of
// the 300 letters once.
func TestRedriveOutlivesNoResponders(t *testing.T) {
	f := start(t)
	dead := f.app.Config.Stream.DeadLetter("orders")
	const n = 300
	for i := range n {
		m := nats.NewMsg(dead)
		m.Data = fmt.Appendf(nil, `{"order":"L-%d"}`, i)
		for h, v := range map[string]string{
			consumer.HeaderReason: "permanent_effect", consumer.HeaderPipeline: "orders",
			consumer.HeaderSubject: "triggers.unread", consumer.HeaderKey: fmt.Sprintf("%032x", i+1),
		} {
			m.Header.Set(h, v)
		}
		if _, err := f.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	js := &noRespondersMidRead{}
	admin.WrapJetStream(f.app.Admin, func(inner jetstream.JetStream) jetstream.JetStream { js.JetStream = inner; return js })
	r, err := f.app.Admin.Redrive(ctx, admin.RedriveRequest{Selection: admin.Selection{Limit: admin.MaxLimit}, Yes: true, By: alice})
	if err != nil {
		t.Fatalf("Redrive through a fetch that found no responder: %v (%d letters taken)", err, len(r.Results))
	}
	if js.failed.Load() == 0 {
		t.Fatal("no fetch was made to fail: the test tests nothing")
	}
	done := map[uint64]int{}
	for _, x := range r.Results {
		if x.Outcome == admin.OutcomeRedriven {
			done[x.Seq]++
		}
	}
	if len(r.Results) != n || len(done) != n {
		t.Errorf("Redrive took %d letters, %d redriven; want every one of %d once", len(r.Results), len(done), n)
	}
}
