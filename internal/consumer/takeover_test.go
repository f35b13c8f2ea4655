package consumer_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Work taken over: leases kept alive while the work runs, a holder that
// stalls or pauses and the one that takes its work over, and a duplicate
// that waits for local work. The ones that need a process killed are in
// cmd/consumer (crash_recovery_test.go, crash_outage_test.go).

// TestSlowDispatchKeepsItsLease: a one-shot send slower than the
// lease and than its outbox entry's ack wait keeps both alive. The
// dispatcher once renewed neither: the entry came back, on a second
// replica, which found the lease run out and reported the effect as an
// unknown outcome while it was being sent.
func TestSlowDispatchKeepsItsLease(t *testing.T) {
	slowTest(t)
	release := make(chan struct{})
	calls := make(chan struct{}, 4)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls <- struct{}{}
		<-release
		w.WriteHeader(http.StatusAccepted)
	}))
	defer hs.Close()
	defer close(release)
	f := start(t, func(c *config.Config) {
		withOneShot(hs.URL, 0, "")(c)
		c.Ledger.Lease = time.Second
		for i := range c.Pipelines {
			c.Pipelines[i].AckWait = time.Second
		}
	}, standin.Options{})
	// A second replica of the one-shot pipeline, on the same ledger.
	cfg := *f.cfg
	cfg.Pipelines = slices.DeleteFunc(slices.Clone(cfg.Pipelines), func(p config.Pipeline) bool { return p.Name != "messages" })
	other, err := consumer.New(consumer.Options{Config: &cfg, Conn: f.nc, Ledger: f.ledger, Owner: "replica-2", DrainTimeout: 5 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- other.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("second replica: %v", err)
		}
	}()
	waitFor(t, 10*time.Second, "the second replica", func() bool { return other.Ready() == nil })

	f.publish("triggers.messages", message("m-slow", 0))
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("no send")
	}
	// Hold the send past the lease (1s) and past the outbox entry's ack
	// wait (at least 5s), then let it answer.
	timer := time.NewTimer(6 * time.Second)
	select {
	case <-calls:
		t.Fatal("the one-shot effect was sent twice")
	case <-timer.C:
	}
	release <- struct{}{}
	sent := func() int64 { return f.dispatchStats().Sent + other.DispatchStats()[0].Sent }
	unknown := func() int64 { return f.dispatchStats().Unknown + other.DispatchStats()[0].Unknown }
	waitFor(t, 10*time.Second, "the send settled", func() bool { return sent()+unknown() >= 1 }, f)
	if dead := f.subjectCount("ONCEGATE_DEAD", "oncegate.dead.messages"); sent() != 1 || unknown() != 0 || dead != 0 {
		t.Errorf("%d sent, %d unknown outcomes, %d dead letters; want the slow send recorded as sent, nothing else", sent(), unknown(), dead)
	}
}

// pastClock is a ledger clock set back by d.
type pastClock time.Duration

func (c pastClock) Now() time.Time { return time.Now().Add(-time.Duration(c)) }

// TestTakeoverPastDuplicateWindow (at run time): a holder claimed
// the work longer ago than the effect stream's duplicate window and
// stopped (an outage longer than the window). Its effect may be in the
// stream, and a redo would not be dropped: the trigger is dead-lettered as
// an unknown outcome instead of redone.
func TestTakeoverPastDuplicateWindow(t *testing.T) {
	f := start(t, nil, standin.Options{})
	payload := []byte(`{"invoice":"in_1"}`)
	k := f.keyOf("webhooks", payload)
	// What the holder left: a claim made 6 minutes ago (the window is 5m),
	// whose lease has run out.
	past, err := badgerstore.New(f.db, badgerstore.Options{Options: ledger.Options{Clock: pastClock(6 * time.Minute)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := past.Begin(context.Background(), k, ledger.BeginOptions{Owner: "holder-before-the-outage", Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	past.Close()
	f.publish("triggers.webhooks", payload)
	waitFor(t, 10*time.Second, "the trigger settled", func() bool { return settled(f.stats("webhooks")) == 1 }, f)
	if n := f.subjectCount("ONCEGATE_EFFECTS", "effects.webhooks"); n != 0 {
		t.Errorf("%d effects; want none: the redo would land past the duplicate window", n)
	}
	dead := f.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.webhooks")
	if len(dead) != 1 || dead[0].Headers().Get(consumer.HeaderReason) != string(outcome.ReasonUnknownOutcome) {
		t.Errorf("%d dead letters; want one with reason unknown_outcome", len(dead))
	}
	// Within the window, a takeover redoes the effect: the stream drops a
	// repeat.
	payload = []byte(`{"invoice":"in_2"}`)
	k = f.keyOf("webhooks", payload)
	if _, err := f.ledger.Begin(context.Background(), k, ledger.BeginOptions{Owner: "holder-just-before", Lease: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	f.publish("triggers.webhooks", payload)
	waitFor(t, 10*time.Second, "the second trigger settled", func() bool { return settled(f.stats("webhooks")) == 2 }, f)
	if s := f.stats("webhooks"); s.Effects != 1 || s.TakenOver != 2 {
		t.Errorf("stats %+v; want the recent takeover redone", s)
	}
}

// setupOnly returns a server's JetStream, the default configuration cut to
// the webhooks gate in gate-window mode (no ledger or model needed), and a
// function that runs a new Consumer's Setup with that configuration as it
// stands when called.
func setupOnly(t *testing.T) (jetstream.JetStream, *config.Config, func() error) {
	t.Helper()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.Pipelines = cfg.Pipelines[1:]
	cfg.Pipelines[0].Mode = config.ModeGateWindow
	return js, cfg, func() error {
		c, err := consumer.New(consumer.Options{Config: cfg, Conn: nc})
		if err != nil {
			return err
		}
		return c.Setup(context.Background())
	}
}

// stallFirst is a sink whose first call stalls until release says so, and
// then fails as a retryable error; the others go to the real sink.
type stallFirst struct {
	sink.Sink
	once    sync.Once
	release func() bool
}

func (s *stallFirst) Deliver(ctx context.Context, e sink.Effect) (sink.Result, error) {
	first := false
	s.once.Do(func() { first = true })
	if !first {
		return s.Sink.Deliver(ctx, e)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !s.release() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return sink.Result{}, fmt.Errorf("%w: stalled and failed", sink.ErrRetryable)
}

// TestGateWindowStaleDelivery: on a gate-window pipeline, a
// delivery stalls at its effect past its ack wait, and the server delivers
// the trigger again. The window once said the redelivery was a duplicate
// (the key was added before the effect) and acked it; then the stalled
// effect failed, and its nak went to a message already acked: the trigger
// was lost. The window now learns a key once its effect is out.
func TestGateWindowStaleDelivery(t *testing.T) {
	var f *fixture
	st := &stallFirst{release: func() bool { return f.stats("webhooks").Deliveries >= 2 }}
	f = start(t, func(c *config.Config) {
		for i := range c.Pipelines {
			if c.Pipelines[i].Name == "webhooks" {
				c.Pipelines[i].Mode = config.ModeGateWindow
				c.Pipelines[i].AckWait = time.Second
				c.Pipelines[i].Concurrency = 2
			}
		}
	}, standin.Options{}, func(o *consumer.Options) {
		st.Sink = webhooksSink(t, o)
		o.Sinks = map[string]sink.Sink{"webhooks": st}
	})
	f.publish("triggers.webhooks", []byte(`{"event":"invoice.paid","invoice":{"id":"in_1"}}`))
	waitFor(t, 15*time.Second, "the effect of the redelivery", func() bool {
		return f.subjectCount("ONCEGATE_EFFECTS", "effects.webhooks") == 1
	}, f)
	waitFor(t, 15*time.Second, "the trigger acked", func() bool { return f.allAcked("webhooks") }, f)
}

// stallBegin is a ledger whose first Begin for the message at stream
// sequence seq stalls until release says so.
type stallBegin struct {
	ledger.Ledger
	ref     string
	once    sync.Once
	release func() bool
}

func (l *stallBegin) Begin(ctx context.Context, key dedupe.Key, opts ledger.BeginOptions) (ledger.Claim, error) {
	if strings.HasSuffix(opts.Owner, l.ref) {
		first := false
		l.once.Do(func() { first = true })
		deadline := time.Now().Add(15 * time.Second)
		for first && !l.release() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return l.Ledger.Begin(ctx, key, opts)
}

// stallCalls is a sink whose first calls each stall until their release
// says so, and then fail as retryable; the calls after them go through.
type stallCalls struct {
	sink.Sink
	mu       sync.Mutex
	calls    int
	releases []func() bool
	returned atomic.Int32
}

func (s *stallCalls) Deliver(ctx context.Context, e sink.Effect) (sink.Result, error) {
	s.mu.Lock()
	n := s.calls
	s.calls++
	s.mu.Unlock()
	if n >= len(s.releases) {
		return s.Sink.Deliver(ctx, e)
	}
	deadline := time.Now().Add(15 * time.Second)
	for !s.releases[n]() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	s.returned.Add(1)
	return sink.Result{}, fmt.Errorf("%w: stalled and failed", sink.ErrRetryable)
}

// TestStaleHolderLosesNothing: a duplicate was acked because
// another message's work held its intent; but that holder can be a stale
// delivery, stalled before its claim past its ack wait, whose message the
// server delivered again and another worker acked. Here: A's work holds
// the intent and fails; B's first delivery, stalled until then, takes the
// work over, while B's redelivery was acked as a duplicate of A's work;
// A's redelivery is acked as a duplicate of B's work; B's work fails, and
// its nak goes to a message acked already. No message carried the intent
// any more. A duplicate of held work now waits instead, and the intent is
// done once.
func TestStaleHolderLosesNothing(t *testing.T) {
	slowTest(t)
	var f *fixture
	held := func(n int64) func() bool {
		return func() bool { s := f.stats("webhooks"); return s.Held+s.DuplicatesLedger >= n }
	}
	out := &stallCalls{releases: []func() bool{held(1), held(2)}}
	var led *stallBegin
	f = start(t, func(c *config.Config) {
		for i := range c.Pipelines {
			c.Pipelines[i].AckWait = time.Second
			c.Pipelines[i].Concurrency = 4
		}
	}, standin.Options{}, func(o *consumer.Options) {
		out.Sink = webhooksSink(t, o)
		o.Sinks = map[string]sink.Sink{"webhooks": out}
		// B (the second message) stalls before its claim until A's work
		// has failed: by then the server has delivered B again.
		led = &stallBegin{Ledger: o.Ledger, ref: "#ONCEGATE:2", release: func() bool { return out.returned.Load() >= 1 }}
		o.Ledger = led
	})
	f.publish("triggers.webhooks", []byte(`{"event":"invoice.paid","invoice":{"id":"in_1"},"delivery_id":"a"}`))
	waitFor(t, 10*time.Second, "A's work at the sink", func() bool { return f.stats("webhooks").Deliveries >= 1 }, f)
	f.publish("triggers.webhooks", []byte(`{"event":"invoice.paid","invoice":{"id":"in_1"},"delivery_id":"b"}`))
	waitFor(t, 30*time.Second, "the intent's effect", func() bool {
		return f.subjectCount("ONCEGATE_EFFECTS", "effects.webhooks") == 1
	}, f)
	waitFor(t, 30*time.Second, "both triggers acked", func() bool { return f.allAcked("webhooks") }, f)
	if n := f.subjectCount("ONCEGATE_EFFECTS", "effects.webhooks"); n != 1 {
		t.Errorf("%d effects; want 1", n)
	}
}

// webhooksSink is the real JetStream sink of the webhooks pipeline, for a
// test sink to wrap.
func webhooksSink(t *testing.T, o *consumer.Options) sink.Sink {
	t.Helper()
	js, err := jetstream.New(o.Conn)
	if err != nil {
		t.Fatal(err)
	}
	out, err := sink.NewJetStream(js, sink.JetStreamOptions{Subject: "effects.webhooks"})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// allAcked reports whether the pipeline's durable consumer has nothing
// pending and nothing unacknowledged.
func (f *fixture) allAcked(pipeline string) bool {
	cons, err := f.js.Consumer(context.Background(), "ONCEGATE", consumer.Durable(pipeline))
	if err != nil {
		return false
	}
	ci, err := cons.Info(context.Background())
	return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0
}

// slowFirst is a sink whose first call waits until release says so, and
// then goes through.
type slowFirst struct {
	sink.Sink
	once    sync.Once
	release func() bool
}

func (s *slowFirst) Deliver(ctx context.Context, e sink.Effect) (sink.Result, error) {
	s.once.Do(func() {
		deadline := time.Now().Add(10 * time.Second)
		for !s.release() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	})
	return s.Sink.Deliver(ctx, e)
}

// TestDuplicateAwaitsLocalWork: a duplicate that arrives while this
// process's work holds its intent waits for that work in the process and
// is acked once it commits, on its first delivery, instead of being put
// back to come again.
func TestDuplicateAwaitsLocalWork(t *testing.T) {
	var f *fixture
	out := &slowFirst{release: func() bool { return f.stats("webhooks").Deliveries >= 2 }}
	f = start(t, nil, standin.Options{}, func(o *consumer.Options) {
		out.Sink = webhooksSink(t, o)
		o.Sinks = map[string]sink.Sink{"webhooks": out}
	})
	f.publish("triggers.webhooks", []byte(`{"event":"invoice.paid","invoice":{"id":"in_1"},"delivery_id":"a"}`))
	waitFor(t, 10*time.Second, "the first at work", func() bool { return f.stats("webhooks").Deliveries == 1 }, f)
	f.publish("triggers.webhooks", []byte(`{"event":"invoice.paid","invoice":{"id":"in_1"},"delivery_id":"b"}`))
	waitFor(t, 10*time.Second, "both acked", func() bool { return f.allAcked("webhooks") && f.stats("webhooks").Effects == 1 }, f)
	s := f.stats("webhooks")
	if s.Deliveries != 2 || s.DuplicatesLedger != 1 || s.Held != 0 {
		t.Errorf("stats %+v; want 2 deliveries, 1 ledger duplicate acked on its first delivery, none held", s)
	}
}

// slowExtend is a ledger whose lease renewals take longer and longer to
// be written, as on a KV bucket electing a leader: the first at once, the
// second after delays[0], every later one after delays[1].
type slowExtend struct {
	ledger.Ledger
	delays [2]time.Duration
	calls  atomic.Int32
}

func (l *slowExtend) Extend(ctx context.Context, key dedupe.Key, token uint64, d time.Duration) (ledger.Lease, error) {
	switch n := l.calls.Add(1); {
	case n == 2:
		time.Sleep(l.delays[0])
	case n > 2:
		time.Sleep(l.delays[1])
	}
	return l.Ledger.Extend(ctx, key, token, d)
}

// slowSink is a sink whose first call takes a while before it goes
// through: work that outlasts its lease.
type slowSink struct {
	sink.Sink
	once sync.Once
	took time.Duration
}

func (s *slowSink) Deliver(ctx context.Context, e sink.Effect) (sink.Result, error) {
	s.once.Do(func() { time.Sleep(s.took) })
	return s.Sink.Deliver(ctx, e)
}

// TestSlowRenewalKeepsTheLease: a held trigger's lease is renewed every
// third of the lease from when the last renewal began, not from when it
// ended. With a 3s lease, renewals due every 1s and taking 0s, 1.5s, then
// 2.4s each are written at 1s, 3.5s, 5.9s, 8.3s: each within the lease of
// the one before. Counted from their ends, the third was written at 6.9s,
// after the second's lease ran out at 6.5s: the work was cancelled and
// another delivery took it over.
func TestSlowRenewalKeepsTheLease(t *testing.T) {
	slowTest(t)
	const lease = 3 * time.Second
	longWork(t, lease, 8500*time.Millisecond, func(l ledger.Ledger) ledger.Ledger {
		return &slowExtend{Ledger: l, delays: [2]time.Duration{lease / 2, lease * 8 / 10}}
	}, "in_1")
}

// longWork runs one webhooks trigger whose effect takes took under a
// lease of lease (its ack wait the same), on the ledger wrap makes, and
// checks that it settles on its first delivery with one effect: no retry,
// takeover or stale commit.
func longWork(t *testing.T, lease, took time.Duration, wrap func(ledger.Ledger) ledger.Ledger, invoice string) {
	t.Helper()
	out := &slowSink{took: took}
	f := start(t, func(c *config.Config) {
		c.Ledger.Lease = lease
		for i := range c.Pipelines {
			c.Pipelines[i].AckWait = lease
		}
	}, standin.Options{}, func(o *consumer.Options) {
		out.Sink = webhooksSink(t, o)
		o.Sinks = map[string]sink.Sink{"webhooks": out}
		o.Ledger = wrap(o.Ledger)
	})
	f.publish("triggers.webhooks", fmt.Appendf(nil, `{"event":"invoice.paid","invoice":{"id":%q},"delivery_id":%q}`, invoice, invoice))
	waitFor(t, 30*time.Second, "the trigger settled", func() bool { return f.allAcked("webhooks") && f.stats("webhooks").Effects == 1 }, f)
	if s := f.stats("webhooks"); s.Deliveries != 1 || s.Retries != 0 || s.TakenOver != 0 || s.Stale != 0 {
		t.Errorf("stats %+v; want the one delivery settled on its first try, no retry, takeover or stale commit", s)
	}
}

// lostExtend is a ledger whose first renewal is never answered, as a write
// whose reply a leaving node lost: it waits for its caller's context, or
// for the KV store's own timeout (5s, longer than a lease).
type lostExtend struct {
	ledger.Ledger
	calls atomic.Int32
}

func (l *lostExtend) Extend(ctx context.Context, key dedupe.Key, token uint64, d time.Duration) (ledger.Lease, error) {
	if l.calls.Add(1) == 1 {
		select {
		case <-ctx.Done():
			return ledger.Lease{}, ctx.Err()
		case <-time.After(5 * time.Second):
			return ledger.Lease{}, context.DeadlineExceeded
		}
	}
	return l.Ledger.Extend(ctx, key, token, d)
}

// TestRenewalAfterALostReply: a held trigger's first lease renewal gets no
// reply. Another try starts beside it a quarter of the lease later and
// renews the lease, and the work (an effect that takes 5s under a 3s
// lease) goes on to its end on its first delivery. Waiting for the lost
// try alone, the lease ran out two seconds before its 5s timeout: the work
// was cancelled and done again.
func TestRenewalAfterALostReply(t *testing.T) {
	slowTest(t)
	var l *lostExtend
	longWork(t, 3*time.Second, 5*time.Second, func(inner ledger.Ledger) ledger.Ledger { l = &lostExtend{Ledger: inner}; return l }, "in_2")
	if n := l.calls.Load(); n < 2 {
		t.Errorf("%d renewals asked; want the lost one and another", n)
	}
}

// pausingLedger pauses the first claim's caller after the claim, for
// longer than the lease (as SIGSTOP pauses a process), while another
// replica takes the work over and gives it up.
type pausingLedger struct {
	ledger.Ledger
	b      ledger.Batcher
	lease  time.Duration
	skew   time.Duration // the clock skew the ledger allows for
	paused atomic.Bool
	took   atomic.Bool
}

func (l *pausingLedger) BeginBatch(ctx context.Context, reqs []ledger.BeginRequest) []ledger.BeginResult {
	out := l.b.BeginBatch(ctx, reqs)
	if l.paused.CompareAndSwap(false, true) {
		time.Sleep(l.lease + l.skew + 300*time.Millisecond) // the pause itself, not a wait for a condition
		c, err := l.Ledger.Begin(ctx, reqs[0].Key, ledger.BeginOptions{Owner: "other-replica", Lease: time.Minute})
		if err == nil && c.Status == ledger.StatusTakenOver &&
			l.Ledger.Fail(ctx, reqs[0].Key, c.Lease.Token, "unknown_outcome: given up by the other replica") == nil {
			l.took.Store(true)
		}
	}
	return out
}

func (l *pausingLedger) CommitBatch(ctx context.Context, reqs []ledger.CommitRequest) []error {
	return l.b.CommitBatch(ctx, reqs)
}

// TestPausedHolderSendsNothing (the soak's duplicated hooks effects): a
// holder paused past its lease (here between its claim and its effect)
// while another replica took the work over and dead-lettered it. Woken, it
// published its effect all the same: the ledger fenced its commit, but
// nothing fenced the effect, and a JetStream publish heeds no context. The
// effect now goes out only while the holder's lease holds by its own
// clock; the intent ends as the other replica left it, dead-lettered, with
// no effect.
func TestPausedHolderSendsNothing(t *testing.T) {
	slowTest(t)
	var pl *pausingLedger
	f := start(t, func(c *config.Config) {
		c.Ledger.Lease = time.Second
	}, standin.Options{}, func(o *consumer.Options) {
		// The other replica takes the claim over once the lease has been
		// out for the clock skew the ledger allows for (the default, 1s).
		pl = &pausingLedger{Ledger: o.Ledger, b: o.Ledger.(ledger.Batcher), lease: time.Second, skew: config.DefaultMaxClockSkew}
		o.Ledger = pl
	})
	f.publish("triggers.webhooks", []byte(`{"repository":{"id":9},"after":"def456"}`))
	waitFor(t, 20*time.Second, "the trigger dead-lettered", func() bool {
		return f.subjectCount("ONCEGATE_DEAD", "oncegate.dead.webhooks") == 1
	}, f)
	if !pl.took.Load() {
		t.Fatal("the other replica did not take the work over")
	}
	if n := f.subjectCount("ONCEGATE_EFFECTS", "effects.webhooks"); n != 0 {
		t.Errorf("%d effects: the paused holder published after its lease ran out and another replica gave the work up", n)
	}
}
