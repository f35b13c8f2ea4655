package consumer_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Failures: a dead letter keeps the trigger's headers and waits for the
// ledger to record the failure; a panic is the trigger's failure, not the
// process's; a ledger outage is no try.

// TestDeadLetterKeepsHeaders: a dead letter is a faithful copy of
// what arrived. A trigger keyed on a header, with a run id and trace
// context, is refused for good by its effect's target; its dead letter once
// kept none of its headers, so that replaying it gave missing_field or
// another key. It now keeps every header but the server's Nats-* ones
// (the trigger's Nats-Msg-Id is kept as Oncegate-Msg-Id), and a trigger's
// own Oncegate-Reason cannot pass for the dead letter's.
func TestDeadLetterKeepsHeaders(t *testing.T) {
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"invalid_payload"}`, http.StatusBadRequest)
	}))
	defer refuse.Close()
	f := start(t, func(c *config.Config) {
		p := c.Pipelines[1]
		p.Name, p.Subject = "hooks", "triggers.hooks"
		p.Key = config.Key{Fields: []string{"/id"}, Headers: []string{"Oncegate-Event"}}
		p.Effect = config.Effect{Sink: config.SinkHTTP, URL: refuse.URL, Class: config.ClassReplayable}
		c.Pipelines = append(c.Pipelines, p)
	}, standin.Options{})

	m := nats.NewMsg("triggers.hooks")
	m.Data = []byte(`{"id":"evt_1","action":"opened"}`)
	m.Header.Set("Oncegate-Event", "issues")
	m.Header.Set(consumer.HeaderRunID, "run-7")
	m.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	m.Header.Add("X-Custom", "a")
	m.Header.Add("X-Custom", "b")
	m.Header.Set(nats.MsgIdHdr, "github:delivery-1")
	m.Header.Set(consumer.HeaderReason, "forged")
	if _, err := f.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the trigger dead-lettered", func() bool { return f.subjectCount("ONCEGATE_DEAD", "oncegate.dead.hooks") == 1 }, f)
	d := f.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.hooks")[0]
	h := d.Headers()
	for name, want := range map[string]string{
		"Oncegate-Event":       "issues",
		consumer.HeaderRunID:   "run-7",
		"traceparent":          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		consumer.HeaderMsgID:   "github:delivery-1",
		consumer.HeaderReason:  string(outcome.ReasonPermanentEffect),
		consumer.HeaderSubject: "triggers.hooks",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("dead letter header %s = %q; want %q", name, got, want)
		}
	}
	if got := h.Values("X-Custom"); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("dead letter X-Custom = %q; want [a b]", got)
	}
	if got := h.Values(consumer.HeaderReason); len(got) != 1 {
		t.Errorf("dead letter has %d Oncegate-Reason headers %q; want only its own", len(got), got)
	}
	// Replayed, it is the same intent.
	var spec config.Pipeline
	for _, p := range f.cfg.Pipelines {
		if p.Name == "hooks" {
			spec = p
		}
	}
	k, err := dedupe.NewKeyer(consumer.KeySpec(&spec))
	if err != nil {
		t.Fatal(err)
	}
	in, err := k.HeaderIntent("", h.Get, d.Data())
	if err != nil {
		t.Fatalf("the dead letter cannot be keyed as its trigger was: %v", err)
	}
	if got := in.Key.String(); got != h.Get(consumer.HeaderKey) {
		t.Errorf("the dead letter keys to %s; its trigger's key was %s", got, h.Get(consumer.HeaderKey))
	}
}

// panicSink panics on the effects whose body contains poison, and records
// the others.
type panicSink struct {
	poison string
	mu     sync.Mutex
	done   map[string]int
}

func (s *panicSink) Deliver(_ context.Context, e sink.Effect) (sink.Result, error) {
	if strings.Contains(string(e.Body), s.poison) {
		panic("the sink cannot handle " + s.poison)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done[e.Key]++
	return sink.Result{}, nil
}

func (s *panicSink) Close() error { return nil }

func (s *panicSink) effects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.done)
}

// TestPanicIsTheTriggersFailure: a trigger whose work panics
// (here in its sink) once took the whole process down, and with it every
// pipeline; restarted, the process got the trigger back and died again.
// The panic is now recovered in the trigger's goroutine, counted, and
// settled as a failed try: its last try dead-letters it with reason panic,
// and the other triggers go through.
func TestPanicIsTheTriggersFailure(t *testing.T) {
	obs := newLeaseObserver()
	ps := &panicSink{poison: "POISON", done: map[string]int{}}
	f := start(t, func(c *config.Config) {
		p := c.Pipelines[1]
		p.Name, p.Subject, p.MaxDeliver = "hooks", "triggers.hooks", 2
		p.Key = config.Key{Fields: []string{"/id"}}
		p.Effect = config.Effect{Sink: config.SinkHTTP, URL: "http://127.0.0.1:1/unused", Class: config.ClassReplayable}
		c.Pipelines = append(c.Pipelines, p)
	}, standin.Options{}, func(o *consumer.Options) {
		o.Sinks = map[string]sink.Sink{"hooks": ps}
		o.Observer = obs
	})
	f.publish("triggers.hooks", []byte(`{"id":"h-1","text":"fine"}`))
	f.publish("triggers.hooks", []byte(`{"id":"h-2","text":"POISON"}`))
	f.publish("triggers.hooks", []byte(`{"id":"h-3","text":"fine"}`))
	waitFor(t, 20*time.Second, "the poison dead-lettered and the rest done", func() bool {
		return f.subjectCount("ONCEGATE_DEAD", "oncegate.dead.hooks") == 1 && ps.effects() == 2
	}, f)
	d := f.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.hooks")[0]
	if r := d.Headers().Get(consumer.HeaderReason); r != string(outcome.ReasonPanic) {
		t.Errorf("dead letter reason %q (%s); want %q", r, d.Headers().Get(consumer.HeaderDetail), outcome.ReasonPanic)
	}
	if !strings.Contains(d.Headers().Get(consumer.HeaderDetail), "the sink cannot handle POISON") {
		t.Errorf("dead letter detail %q; want the panic's value", d.Headers().Get(consumer.HeaderDetail))
	}
	if n := obs.panics.Load(); n != 2 {
		t.Errorf("%d panics counted; want 2 (one per try, max_deliver 2)", n)
	}
	if err := f.c.Ready(); err != nil {
		t.Errorf("not ready after the panics: %v", err)
	}
	// The intent is recorded failed: a duplicate is dead-lettered at once,
	// never tried again.
	f.publish("triggers.hooks", []byte(`{"id":"h-2","text":"POISON again"}`))
	waitFor(t, 10*time.Second, "the duplicate dead-lettered", func() bool {
		return f.subjectCount("ONCEGATE_DEAD", "oncegate.dead.hooks") == 2
	}, f)
	if n := obs.panics.Load(); n != 2 {
		t.Errorf("%d panics counted after the duplicate; want still 2", n)
	}
}

// outageLedger is a ledger whose writes fail while down is set, as a KV
// bucket electing a leader or a full disk refuses them.
type outageLedger struct {
	ledger.Ledger
	down   atomic.Bool
	begins atomic.Int64 // Begins refused
}

var errLedgerDown = errors.New("ledger unreachable (test outage)")

func (l *outageLedger) Begin(ctx context.Context, k dedupe.Key, o ledger.BeginOptions) (ledger.Claim, error) {
	if l.down.Load() {
		l.begins.Add(1)
		return ledger.Claim{}, errLedgerDown
	}
	return l.Ledger.Begin(ctx, k, o)
}

func (l *outageLedger) Commit(ctx context.Context, k dedupe.Key, token uint64, r ledger.Result) error {
	if l.down.Load() {
		return errLedgerDown
	}
	return l.Ledger.Commit(ctx, k, token, r)
}

func (l *outageLedger) Fail(ctx context.Context, k dedupe.Key, token uint64, reason string) error {
	if l.down.Load() {
		return errLedgerDown
	}
	return l.Ledger.Fail(ctx, k, token, reason)
}

func (l *outageLedger) Get(ctx context.Context, k dedupe.Key) (ledger.Record, error) {
	if l.down.Load() {
		return ledger.Record{}, errLedgerDown
	}
	return l.Ledger.Get(ctx, k)
}

// TestLedgerOutageIsNoTry: the ledger refuses claims for a few
// seconds. Each refused claim once counted as a try: with max_deliver 5
// the trigger was dead-lettered exhausted after five refused Begins
// (3.8 s), though it never claimed anything. Now it waits with a backoff,
// the consumer reports not ready and counts the refusals, and when the
// ledger is back the effect happens once and nothing is dead-lettered.
func TestLedgerOutageIsNoTry(t *testing.T) {
	slowTest(t)
	obs := newLeaseObserver()
	var ol *outageLedger
	f := start(t, nil, standin.Options{}, func(o *consumer.Options) {
		ol = &outageLedger{Ledger: o.Ledger}
		ol.down.Store(true)
		o.Ledger = ol
		o.Observer = obs
	})
	f.publish("triggers.webhooks", []byte(`{"repository":{"id":7},"after":"abc123"}`))
	waitFor(t, 10*time.Second, "the consumer not ready for the ledger", func() bool { return f.c.Ready() != nil }, f)
	// The outage lasts past what five tries once took.
	waitFor(t, 20*time.Second, "the outage past five refused claims and 4s", func() bool {
		return ol.begins.Load() >= 6 && obs.ledgerDown.Load() >= 6
	}, f)
	ol.down.Store(false)
	waitFor(t, 20*time.Second, "the trigger settled", func() bool { return settled(f.stats("webhooks")) == 1 }, f)
	waitFor(t, 10*time.Second, "the consumer ready again", func() bool { return f.c.Ready() == nil }, f)
	if s := f.stats("webhooks"); s.Effects != 1 || s.DeadLetters != 0 {
		t.Errorf("stats %+v; want one effect and no dead letter", s)
	}
	if n := f.subjectCount("ONCEGATE_DEAD", "oncegate.dead.webhooks"); n != 0 {
		t.Errorf("%d dead letters; want none", n)
	}
}

// TestDeadLetterWaitsForTheFailure (and the first "also check"):
// the effect's target refuses the trigger for good while the ledger cannot
// record the failure. The dead letter was published all the same, with the
// record left pending: a duplicate then took the work over and did the
// effect, after a dead letter that told a person it was not done. Now no
// dead letter goes out before the failure is recorded: the trigger waits,
// and the intent ends with the effect or a dead letter, never both.
func TestDeadLetterWaitsForTheFailure(t *testing.T) {
	slowTest(t)
	var refuse atomic.Bool
	refuse.Store(true)
	var calls, effects atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if refuse.Load() {
			http.Error(w, `{"error":"invalid_payload"}`, http.StatusBadRequest)
			return
		}
		effects.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer target.Close()
	var fails atomic.Int64
	var ol *failLedger
	f := start(t, func(c *config.Config) {
		c.Ledger.Lease = 2 * time.Second
		p := c.Pipelines[1]
		p.Name, p.Subject = "hooks", "triggers.hooks"
		p.Key = config.Key{Fields: []string{"/id"}}
		p.Effect = config.Effect{Sink: config.SinkHTTP, URL: target.URL, Class: config.ClassReplayable}
		c.Pipelines = append(c.Pipelines, p)
	}, standin.Options{}, func(o *consumer.Options) {
		ol = &failLedger{Ledger: o.Ledger, refused: &fails}
		ol.down.Store(true)
		o.Ledger = ol
	})
	f.publish("triggers.hooks", []byte(`{"id":"h-1","v":1}`))
	waitFor(t, 20*time.Second, "the failure refused by the ledger", func() bool { return fails.Load() >= 1 }, f)
	// The receiver is fixed and the ledger answers again; a duplicate comes.
	refuse.Store(false)
	ol.down.Store(false)
	f.publish("triggers.hooks", []byte(`{"id":"h-1","v":2}`))
	waitFor(t, 30*time.Second, "both triggers settled", func() bool {
		s := f.stats("hooks")
		return s.Effects+s.DuplicatesWindow+s.DuplicatesLedger+s.DeadLetters >= 2
	}, f)
	dead := f.subjectCount("ONCEGATE_DEAD", "oncegate.dead.hooks")
	if n := effects.Load(); n > 0 && dead > 0 {
		t.Errorf("%d effects and %d dead letters: the intent was both done and dead-lettered", n, dead)
	}
	if n := effects.Load(); n+int64(dead) == 0 {
		t.Errorf("neither an effect nor a dead letter")
	}
}
