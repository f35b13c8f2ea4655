package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/standin"
)

// The streams and durable consumers the consumer sets up or finds: what it
// refuses, what it replays, what it leaves alone, and readiness.

// TestAckedTriggersAreRemoved: on a work-queue stream a trigger
// is removed once its pipeline acks it, so that a recreated durable
// consumer (a deleted consumer, a renamed pipeline) never replays history.
// (On the default limits stream, TestLimitsStreamNoReplay.)
func TestAckedTriggersAreRemoved(t *testing.T) {
	f := start(t, func(c *config.Config) { c.Stream.Retention, c.Stream.MaxAge = config.RetentionWorkQueue, 0 }, standin.Options{})
	for i := range 5 {
		f.publish("triggers.webhooks", []byte(`{"n":`+string(rune('0'+i))+`}`))
	}
	waitFor(t, 10*time.Second, "the webhooks", func() bool { return f.stats("webhooks").Effects == 5 }, f)
	waitFor(t, 10*time.Second, "the acked triggers removed", func() bool { return f.subjectCount("ONCEGATE", "triggers.webhooks") == 0 }, f)
	st, err := f.js.Stream(context.Background(), "ONCEGATE")
	if err != nil {
		t.Fatal(err)
	}
	if r := st.CachedInfo().Config.Retention; r != jetstream.WorkQueuePolicy {
		t.Errorf("trigger stream retention %v; want work queue", r)
	}
}

// TestConsumerDeletedUnderUs: a durable consumer deleted under a
// running Consumer makes it not ready, and it sets the consumer up again
// and goes on; it once stopped taking triggers while it reported ready.
//
// It deletes the consumer again the moment it is back: the second deletion
// then lands before the new subscription's first pull request reaches the
// server, which the server never answers (no consumer to answer it), so
// nothing in the subscription itself ends it.
func TestConsumerDeletedUnderUs(t *testing.T) {
	f := start(t, nil, standin.Options{})
	for i := range 3 {
		if err := f.js.DeleteConsumer(context.Background(), "ONCEGATE", consumer.Durable("webhooks")); err != nil {
			t.Fatalf("deletion %d: %v", i+1, err)
		}
		waitFor(t, 10*time.Second, "the consumer to be set up again", func() bool {
			_, err := f.js.Consumer(context.Background(), "ONCEGATE", consumer.Durable("webhooks"))
			return err == nil
		}, f)
	}
	waitFor(t, 10*time.Second, "the consumer to be set up again and consuming", func() bool {
		_, err := f.js.Consumer(context.Background(), "ONCEGATE", consumer.Durable("webhooks"))
		return err == nil && f.c.Ready() == nil
	}, f)
	f.publish("triggers.webhooks", []byte(`{"after":"the deletion"}`))
	waitFor(t, 10*time.Second, "the trigger after the deletion", func() bool { return f.stats("webhooks").Effects == 1 }, f)
}

// TestReadyFollowsConsuming: Ready reports an error while a durable
// consumer is gone.
func TestReadyFollowsConsuming(t *testing.T) {
	f := start(t, nil, standin.Options{})
	if err := f.c.Ready(); err != nil {
		t.Fatalf("Ready() = %v after start", err)
	}
	seen := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if err := f.c.Ready(); err != nil {
				seen <- err
				return
			}
			time.Sleep(time.Millisecond)
		}
		seen <- nil
	}()
	if err := f.js.DeleteConsumer(context.Background(), "ONCEGATE", consumer.Durable("alerts")); err != nil {
		t.Fatal(err)
	}
	if err := <-seen; err == nil || !strings.Contains(err.Error(), "not consuming") {
		t.Errorf("Ready() stayed %v while the durable consumer was gone", err)
	}
}

// TestSetupRefusesIncompatibleStreams: a trigger stream kept as a log
// (limits retention) where Oncegate is configured for a work queue, and an
// effect stream whose duplicate window is shorter than the redelivery
// horizon, are refused at start with what to do, never rewritten.
func TestSetupRefusesIncompatibleStreams(t *testing.T) {
	js, cfg, run := setupOnly(t)
	ctx := context.Background()
	cfg.Stream.Retention, cfg.Stream.MaxAge = config.RetentionWorkQueue, 0
	// A stream kept as a log where the configuration asks for a work queue.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ONCEGATE", Subjects: []string{"triggers.>"}}); err != nil {
		t.Fatal(err)
	}
	if err := run(); !errors.Is(err, consumer.ErrIncompatibleStream) || !strings.Contains(err.Error(), "retention") {
		t.Errorf("Setup on a limits stream = %v; want ErrIncompatibleStream about retention", err)
	}
	if err := js.DeleteStream(ctx, "ONCEGATE"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "THEIRS", Subjects: []string{"effects.webhooks"}, Duplicates: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := run(); !errors.Is(err, consumer.ErrIncompatibleStream) || !strings.Contains(err.Error(), "duplicate window") {
		t.Errorf("Setup with a 10s effect duplicate window = %v; want ErrIncompatibleStream about the duplicate window", err)
	}
	st, err := js.Stream(ctx, "THEIRS")
	if err != nil {
		t.Fatal(err)
	}
	if d := st.CachedInfo().Config.Duplicates; d != 10*time.Second {
		t.Errorf("the operator's stream was changed: duplicate window %v", d)
	}
}

// TestLimitsStreamNoReplay: on a limits stream (triggers kept until their
// max age), a durable consumer recreated under a running process replays
// what the stream holds; the ledger answers every replayed trigger whose
// work was committed, and no effect is redone.
func TestLimitsStreamNoReplay(t *testing.T) {
	f := start(t, nil, standin.Options{}) // limits, the default
	for i := range 5 {
		f.publish("triggers.webhooks", []byte(`{"n":`+string(rune('0'+i))+`}`))
	}
	waitFor(t, 10*time.Second, "the webhooks", func() bool { return f.stats("webhooks").Effects == 5 }, f)
	if err := f.js.DeleteConsumer(context.Background(), "ONCEGATE", consumer.Durable("webhooks")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the replay answered", func() bool {
		s := f.stats("webhooks")
		return s.DuplicatesWindow+s.DuplicatesLedger == 5
	}, f)
	if n := f.subjectCount("ONCEGATE_EFFECTS", "effects.webhooks"); n != 5 {
		t.Errorf("%d effects after the replay; want the 5 of the first pass", n)
	}
}

// refusals counts the replies an Observer was told were refused.
type refusals struct {
	*leaseObserver
	n atomic.Int64
}

func (r *refusals) ReplyRefused(string) { r.n.Add(1) }

// TestReplySubjectRefused: a trigger's Oncegate-Reply header cannot make
// Oncegate publish into an effect subject, the KV ledger, the JetStream API
// or its own outbox; such replies are refused and counted, while a reply
// under _INBOX. gets the stored result.
func TestReplySubjectRefused(t *testing.T) {
	obs := &refusals{leaseObserver: newLeaseObserver()}
	f := start(t, nil, standin.Options{}, func(o *consumer.Options) { o.Observer = obs })
	var mu sync.Mutex
	var got []string
	for _, subj := range []string{"effects.>", "$KV.>", "$JS.API.>", "oncegate.>", "_INBOX.>"} {
		sub, err := f.nc.Subscribe(subj, func(m *nats.Msg) {
			if strings.HasPrefix(m.Subject, "effects.") && m.Header.Get(nats.MsgIdHdr) != "" {
				return // the pipeline's own effects
			}
			mu.Lock()
			got = append(got, m.Subject)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	hostile := []string{"effects.alerts", "$KV.oncegate-ledger.x", "$JS.API.STREAM.DELETE.ONCEGATE", "oncegate.outbox.alerts", "_INBOX.*"}
	for i, to := range append(hostile, "_INBOX.caller") {
		m := nats.NewMsg("triggers.alerts")
		m.Data = alert(fmt.Sprintf("reply-%d", i), 1, 0)
		m.Header.Set(consumer.HeaderReply, to)
		if _, err := f.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	received := func(subject string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, s := range got {
			if s == subject {
				n++
			}
		}
		return n
	}
	waitFor(t, 20*time.Second, "the allowed reply and the refusals", func() bool {
		return received("_INBOX.caller") == 1 && obs.n.Load() == int64(len(hostile))
	}, f)
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, to := range hostile {
		if n := received(to); n != 0 {
			t.Errorf("%d replies published to %s; want none", n, to)
		}
	}
	if _, err := f.js.Stream(context.Background(), "ONCEGATE"); err != nil {
		t.Errorf("the trigger stream: %v", err)
	}
}

// TestUnmanagedStreams: with stream.manage: false Oncegate runs on streams
// an operator made (as with nats stream add) when they are compatible,
// changes nothing in them, and refuses, saying why, when they are not.
func TestUnmanagedStreams(t *testing.T) {
	js, cfg, setup := setupOnly(t)
	ctx := context.Background()
	cfg.Stream.Manage = false
	add := func(sc jetstream.StreamConfig) {
		t.Helper()
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	want := func(what, substr string) {
		t.Helper()
		err := setup()
		if !errors.Is(err, consumer.ErrIncompatibleStream) || !strings.Contains(err.Error(), substr) {
			t.Errorf("%s: Setup = %v; want ErrIncompatibleStream mentioning %q", what, err, substr)
		}
	}
	want("no stream", "does not exist")
	add(jetstream.StreamConfig{Name: "ONCEGATE", Subjects: []string{"triggers.alerts"}, MaxAge: 24 * time.Hour, Duplicates: time.Minute})
	want("subject not captured", "not captured")
	add(jetstream.StreamConfig{Name: "ONCEGATE", Subjects: []string{"triggers.>"}, Duplicates: time.Minute})
	want("kept for ever", "for ever")
	add(jetstream.StreamConfig{Name: "ONCEGATE", Subjects: []string{"triggers.>"}, MaxAge: 24 * time.Hour, Duplicates: time.Minute})
	want("no dead-letter stream", "dead letters")
	add(jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"oncegate.dead.>"}})
	add(jetstream.StreamConfig{Name: "EFFECTS", Subjects: []string{"effects.>"}, Duplicates: 10 * time.Second})
	want("effect duplicate window", "duplicate window")
	add(jetstream.StreamConfig{Name: "EFFECTS", Subjects: []string{"effects.>"}, Duplicates: 10 * time.Minute, MaxAge: time.Hour})
	if err := setup(); err != nil {
		t.Fatalf("compatible streams: Setup = %v", err)
	}
	st, err := js.Stream(ctx, "ONCEGATE")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config; got.MaxAge != 24*time.Hour || got.Duplicates != time.Minute {
		t.Errorf("the operator's stream was changed: max age %v, duplicates %v", got.MaxAge, got.Duplicates)
	}
	for _, name := range []string{"ONCEGATE_EFFECTS", "ONCEGATE_DEAD"} {
		if _, err := js.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("stream %s was created (%v)", name, err)
		}
	}
}
