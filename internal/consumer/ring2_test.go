package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// The tests in this file close the holes of the second ring (issue 21):
// where the gate meets volatile claims, the outbox's human controls, dead
// letters, replies and the ledger's outages. Each failed on the code before
// its fix; the ones that kill a process are in cmd/consumer.

// TestDeadLetterKeepsHeaders (hole 6): a dead letter is a faithful copy of
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

// TestPanicIsTheTriggersFailure (hole 2a): a trigger whose work panics
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

// TestLedgerOutageIsNoTry (hole 5): the ledger refuses claims for a few
// seconds. Each refused claim once counted as a try: with max_deliver 5
// the trigger was dead-lettered exhausted after five refused Begins
// (3.8 s), though it never claimed anything. Now it waits with a backoff,
// the consumer reports not ready and counts the refusals, and when the
// ledger is back the effect happens once and nothing is dead-lettered.
func TestLedgerOutageIsNoTry(t *testing.T) {
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

// TestDeadLetterWaitsForTheFailure (hole 12, and the first "also check"):
// the effect's target refuses the trigger for good while the ledger cannot
// record the failure. The dead letter was published all the same, with the
// record left pending: a duplicate then took the work over and did the
// effect, after a dead letter that told a person it was not done. Now no
// dead letter goes out before the failure is recorded: the trigger waits,
// and the intent ends with the effect or a dead letter, never both.
func TestDeadLetterWaitsForTheFailure(t *testing.T) {
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

// failLedger refuses Fail while down is set.
type failLedger struct {
	ledger.Ledger
	down    atomic.Bool
	refused *atomic.Int64
}

func (l *failLedger) Fail(ctx context.Context, k dedupe.Key, token uint64, reason string) error {
	if l.down.Load() {
		l.refused.Add(1)
		return errLedgerDown
	}
	return l.Ledger.Fail(ctx, k, token, reason)
}

// TestCancelAfterDispatcherDied (hole 3): a dispatcher claimed a one-shot
// effect, sent it, and died before recording the send. After its lease a
// cancel came in and was answered "cancelled", and the entry was acked as
// cancelled, with no dead letter, though the target may well have had the
// message. A dispatch taken over has an unknown outcome: the cancel now
// says "unknown", and the entry is dead-lettered unknown_outcome, never
// sent.
func TestCancelAfterDispatcherDied(t *testing.T) {
	target := &oneShot{calls: map[string]int{}, at: map[string]time.Time{}}
	hs := httptest.NewServer(target)
	defer hs.Close()
	f := start(t, withOneShot(hs.URL, 2*time.Second, ""), standin.Options{})
	payload := message("m-cancel", 0)
	k := f.keyOf("messages", payload)
	// What a dispatcher that died after its claim leaves behind.
	if _, err := f.ledger.Begin(context.Background(), consumer.DispatchKey(k), ledger.BeginOptions{Owner: "dead-dispatcher", Lease: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	f.publish("triggers.messages", payload)
	waitFor(t, 10*time.Second, "the effect in the outbox", func() bool { return f.stats("messages").Effects == 1 }, f)
	reply, err := f.nc.Request(consumer.CancelSubject("messages"), []byte(k.String()), 5*time.Second)
	if err != nil || !strings.HasPrefix(string(reply.Data), "unknown") {
		t.Fatalf("cancel: %v %q; want unknown", err, replyData(reply))
	}
	waitFor(t, 20*time.Second, "the entry dead-lettered", func() bool { return f.subjectCount("ONCEGATE_DEAD", "oncegate.dead.messages") == 1 }, f)
	d := f.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.messages")[0]
	if r := d.Headers().Get(consumer.HeaderReason); r != string(outcome.ReasonUnknownOutcome) {
		t.Errorf("dead letter reason %q; want %s", r, outcome.ReasonUnknownOutcome)
	}
	if s := f.dispatchStats(); s.Cancelled != 0 {
		t.Errorf("dispatch stats %+v; want nothing counted cancelled", s)
	}
	if calls, _ := target.snapshot(); len(calls) != 0 {
		t.Errorf("the effect of unknown outcome was sent again: %v", calls)
	}
	// Asked again, the cancel says what the record says.
	reply, err = f.nc.Request(consumer.CancelSubject("messages"), []byte(k.String()), 5*time.Second)
	if err != nil || !strings.HasPrefix(string(reply.Data), "already unknown_outcome") {
		t.Errorf("second cancel: %v %q; want already unknown_outcome", err, replyData(reply))
	}
}

// TestWaitingDoesNotBlockApproved (hole 4): with max_ack_pending 2, two
// entries cancelled (never approved) and three never approved came back
// every second and held the dispatcher's slots: the approved one was never
// sent, and the cancelled ones never settled. An entry waiting for a person
// is now parked, out of the slots approved work needs, and a cancel settles
// it at once.
func TestWaitingDoesNotBlockApproved(t *testing.T) {
	target := &oneShot{calls: map[string]int{}, at: map[string]time.Time{}}
	hs := httptest.NewServer(target)
	defer hs.Close()
	f := start(t, func(c *config.Config) {
		withOneShot(hs.URL, 0, "approvals.messages")(c)
		c.Pipelines[len(c.Pipelines)-1].MaxAckPending = 2
	}, standin.Options{})
	var keys []dedupe.Key
	for i := range 6 {
		p := message(fmt.Sprintf("m-%d", i), 0)
		keys = append(keys, f.keyOf("messages", p))
		f.publish("triggers.messages", p)
	}
	waitFor(t, 10*time.Second, "the effects in the outbox", func() bool { return f.stats("messages").Effects == 6 }, f)
	for _, k := range keys[:2] {
		reply, err := f.nc.Request(consumer.CancelSubject("messages"), []byte(k.String()), 5*time.Second)
		if err != nil || string(reply.Data) != "cancelled" {
			t.Fatalf("cancel: %v %q", err, replyData(reply))
		}
	}
	reply, err := f.nc.Request("approvals.messages", []byte(keys[5].String()), 5*time.Second)
	if err != nil || string(reply.Data) != "approved" {
		t.Fatalf("approve: %v %q", err, replyData(reply))
	}
	waitFor(t, 15*time.Second, "the approved effect sent", func() bool { return f.dispatchStats().Sent == 1 }, f)
	calls, _ := target.snapshot()
	if len(calls) != 1 || calls[keys[5].String()] != 1 {
		t.Errorf("calls %v; want the approved one once", calls)
	}
	// The cancelled entries are gone from the outbox, parked or not; the
	// three waiting ones are parked.
	waitFor(t, 15*time.Second, "the cancelled entries settled", func() bool {
		for _, k := range keys[:2] {
			if f.subjectCount("ONCEGATE_OUTBOX", "oncegate.outbox.messages.parked."+k.String()) != 0 {
				return false
			}
		}
		return f.subjectCount("ONCEGATE_OUTBOX", "oncegate.outbox.messages") == 0
	}, f)
	for _, k := range keys[2:5] {
		if n := f.subjectCount("ONCEGATE_OUTBOX", "oncegate.outbox.messages.parked."+k.String()); n != 1 {
			t.Errorf("entry %s: %d parked; want 1", k, n)
		}
	}
	// A cancelled effect approved late is not sent.
	reply, err = f.nc.Request("approvals.messages", []byte(keys[0].String()), 5*time.Second)
	if err != nil || string(reply.Data) != "already cancelled" {
		t.Errorf("approve after cancel: %v %q; want already cancelled", err, replyData(reply))
	}
}

// TestApprovalTimeout: an effect parked for its approval past
// approval_timeout is dead-lettered not_approved (its dispatch recorded
// failed, fenced), and a late approval is answered so and sends nothing.
func TestApprovalTimeout(t *testing.T) {
	target := &oneShot{calls: map[string]int{}, at: map[string]time.Time{}}
	hs := httptest.NewServer(target)
	defer hs.Close()
	f := start(t, func(c *config.Config) {
		withOneShot(hs.URL, 0, "approvals.messages")(c)
		c.Pipelines[len(c.Pipelines)-1].Effect.ApprovalTimeout = time.Second
	}, standin.Options{})
	payload := message("refund-9", 0)
	k := f.keyOf("messages", payload)
	f.publish("triggers.messages", payload)
	waitFor(t, 15*time.Second, "the effect dead-lettered not_approved", func() bool {
		return f.subjectCount("ONCEGATE_DEAD", "oncegate.dead.messages") == 1
	}, f)
	d := f.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.messages")[0]
	if r := d.Headers().Get(consumer.HeaderReason); r != string(outcome.ReasonNotApproved) {
		t.Errorf("dead letter reason %q (%s); want not_approved", r, d.Headers().Get(consumer.HeaderDetail))
	}
	reply, err := f.nc.Request("approvals.messages", []byte(k.String()), 5*time.Second)
	if err != nil || !strings.HasPrefix(string(reply.Data), "already not_approved") {
		t.Errorf("late approve: %v %q; want already not_approved", err, replyData(reply))
	}
	if s := f.dispatchStats(); s.NotApproved != 1 || s.Sent != 0 {
		t.Errorf("dispatch stats %+v; want 1 not approved, none sent", s)
	}
	if calls, _ := target.snapshot(); len(calls) != 0 {
		t.Errorf("calls %v; want none", calls)
	}
}

// parkedWithDeadApproval publishes a one-shot effect that waits for an
// approval, waits for it to be parked, and leaves what an approval request
// that died after its claim leaves behind: the approval record claimed,
// never committed.
func parkedWithDeadApproval(t *testing.T, id string) (*fixture, dedupe.Key, *oneShot) {
	t.Helper()
	target := &oneShot{calls: map[string]int{}, at: map[string]time.Time{}}
	hs := httptest.NewServer(target)
	t.Cleanup(hs.Close)
	f := start(t, withOneShot(hs.URL, 0, "approvals.messages"), standin.Options{})
	payload := message(id, 0)
	k := f.keyOf("messages", payload)
	f.publish("triggers.messages", payload)
	waitFor(t, 10*time.Second, "the effect parked", func() bool {
		return f.subjectCount("ONCEGATE_OUTBOX", "oncegate.outbox.messages.parked."+k.String()) == 1
	}, f)
	if _, err := f.ledger.Begin(context.Background(), consumer.ApprovalKey(k), ledger.BeginOptions{Owner: "dead-replica#approve", Lease: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	return f, k, target
}

// TestApprovalClaimIsNotLeftPending (hole 12, the cluster soak's claims
// left pending): an approval is a claim of the approval record and its
// commit. A request that died between the two left the claim pending; the
// person asked again, heard that the effect was settled meanwhile
// ("already cancelled"), and the claim stayed pending for ever after every
// trigger had settled. The request that hears the effect settled now
// finishes the approval claim left behind.
func TestApprovalClaimIsNotLeftPending(t *testing.T) {
	f, k, target := parkedWithDeadApproval(t, "m-approve-died")
	ctx := context.Background()
	reply, err := f.nc.Request(consumer.CancelSubject("messages"), []byte(k.String()), 5*time.Second)
	if err != nil || string(reply.Data) != "cancelled" {
		t.Fatalf("cancel: %v %q", err, replyData(reply))
	}
	// The person asks again for the approval whose answer never came.
	reply, err = f.nc.Request("approvals.messages", []byte(k.String()), 5*time.Second)
	if err != nil || string(reply.Data) != "already cancelled" {
		t.Fatalf("approve after cancel: %v %q; want already cancelled", err, replyData(reply))
	}
	rec, err := f.ledger.Get(ctx, consumer.ApprovalKey(k))
	if err != nil {
		t.Fatal(err)
	}
	if rec.State == ledger.StatePending {
		t.Errorf("the approval record is left pending (owner %s, token %d) after the effect was settled", rec.Owner, rec.Token)
	}
	for r, err := range f.ledger.Pending(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("record %s still pending (owner %s)", r.Key, r.Owner)
	}
	if calls, _ := target.snapshot(); len(calls) != 0 {
		t.Errorf("the cancelled effect was sent: %v", calls)
	}
}

// TestApprovalClaimFinishedByCancel: an approval request that died after
// its claim, and a cancel; the person never asks to approve again. The
// cancel settles the effect and finishes the approval's claim: no record is
// left pending (a full soak, seed 232730139, left one: owner …#approve).
func TestApprovalClaimFinishedByCancel(t *testing.T) {
	f, k, target := parkedWithDeadApproval(t, "m-approve-died-cancelled")
	ctx := context.Background()
	reply, err := f.nc.Request(consumer.CancelSubject("messages"), []byte(k.String()), 10*time.Second)
	if err != nil || string(reply.Data) != "cancelled" {
		t.Fatalf("cancel: %v %q", err, replyData(reply))
	}
	waitFor(t, 10*time.Second, "no record pending", func() bool {
		for _, err := range f.ledger.Pending(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			return false
		}
		return true
	}, f)
	if calls, _ := target.snapshot(); len(calls) != 0 {
		t.Errorf("the cancelled effect was sent: %v", calls)
	}
}

// TestReplyToAnotherPayload (hole 7): a publisher who knows only an
// alert's key fields (fingerprint, occurrence) sends them with
// Oncegate-Reply once the window has forgotten the key. The reply carried
// the first trigger's whole payload (the effect body embeds it) and the
// model's answer. A duplicate whose payload differs from the one the work
// was done for now gets the status and key only; the same payload still
// gets the stored response.
func TestReplyToAnotherPayload(t *testing.T) {
	f := start(t, func(c *config.Config) {
		c.Pipelines[0].Window.TTL = 200 * time.Millisecond // the window forgets soon: the ledger answers
	}, standin.Options{})
	// forgotten waits until the alerts window holds no key.
	forgotten := func() {
		waitFor(t, 10*time.Second, "the window to forget the key", func() bool {
			for _, w := range f.c.WindowStats() {
				if w.Pipeline == "alerts" {
					return w.Live == 0
				}
			}
			return false
		}, f)
	}
	replies := make(chan *nats.Msg, 4)
	sub, err := f.nc.ChanSubscribe("_INBOX.probe", replies)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	send := func(data []byte) *nats.Msg {
		m := nats.NewMsg("triggers.alerts")
		m.Data = data
		m.Header.Set(consumer.HeaderReply, "_INBOX.probe")
		if _, err := f.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-replies:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no reply")
		}
		return nil
	}
	secret := alert("fp-secret", 1, 0) // its annotations are the victim's
	first := send(secret)
	if !strings.Contains(string(first.Data), "runbooks.example") {
		t.Fatalf("the first reply %s; want the effect body", first.Data)
	}
	forgotten()
	probe := send([]byte(`{"alert":{"fingerprint":"fp-secret","occurrence":1}}`))
	if strings.Contains(string(probe.Data), "runbooks.example") || strings.Contains(string(probe.Data), standin.Label) {
		t.Errorf("the reply to another payload discloses the first trigger's: %s", probe.Data)
	}
	var st struct {
		Key, Status string
		Mismatch    bool
	}
	if err := json.Unmarshal(probe.Data, &st); err != nil || st.Status != "committed" || !st.Mismatch || st.Key == "" {
		t.Errorf("the reply to another payload %s; want its key, status committed and mismatch", probe.Data)
	}
	// The same payload again gets the stored response.
	forgotten()
	if again := send(secret); string(again.Data) != string(first.Data) {
		t.Errorf("the reply to the same payload %s; want the stored response %s", again.Data, first.Data)
	}
}

// pausingLedger pauses the first claim's caller after the claim, for
// longer than the lease (as SIGSTOP pauses a process), while another
// replica takes the work over and gives it up.
type pausingLedger struct {
	ledger.Ledger
	b      ledger.Batcher
	lease  time.Duration
	paused atomic.Bool
	took   atomic.Bool
}

func (l *pausingLedger) BeginBatch(ctx context.Context, reqs []ledger.BeginRequest) []ledger.BeginResult {
	out := l.b.BeginBatch(ctx, reqs)
	if l.paused.CompareAndSwap(false, true) {
		time.Sleep(l.lease + 300*time.Millisecond) // the pause itself, not a wait for a condition
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
	var pl *pausingLedger
	f := start(t, func(c *config.Config) {
		c.Ledger.Lease = time.Second
	}, standin.Options{}, func(o *consumer.Options) {
		pl = &pausingLedger{Ledger: o.Ledger, b: o.Ledger.(ledger.Batcher), lease: time.Second}
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

// commitRefuser is a ledger whose commits are refused for a while after
// the first approval claim, as a ledger blip (a full disk) between the
// claim and its commit refuses them.
type commitRefuser struct {
	ledger.Ledger
	armed atomic.Bool
	until atomic.Int64 // unix ns
	for_  time.Duration
}

func (r *commitRefuser) Begin(ctx context.Context, k dedupe.Key, o ledger.BeginOptions) (ledger.Claim, error) {
	c, err := r.Ledger.Begin(ctx, k, o)
	if err == nil && strings.HasSuffix(o.Owner, "#approve") && r.armed.CompareAndSwap(true, false) {
		r.until.Store(time.Now().Add(r.for_).UnixNano())
	}
	return c, err
}

func (r *commitRefuser) Commit(ctx context.Context, k dedupe.Key, token uint64, res ledger.Result) error {
	if time.Now().UnixNano() < r.until.Load() {
		return errLedgerDown
	}
	return r.Ledger.Commit(ctx, k, token, res)
}

// TestApprovalCommitOutlastsABlip: the ledger refuses writes for 1.5s
// between an approval's claim and its commit. The approval used to try
// its commit for 0.75s and answer an error, leaving its claim pending; when
// the request's asker had gone (a replica resuming from a pause answers a
// request whose asker heard from another replica meanwhile), nothing
// finished the claim (the short soak, seed 333646345, left one: owner
// …#approve, claims left pending 1). The commit is now retried for 10s:
// the approval is recorded, its claim is not left pending, and the effect
// goes out once.
func TestApprovalCommitOutlastsABlip(t *testing.T) {
	target := &oneShot{calls: map[string]int{}, at: map[string]time.Time{}}
	hs := httptest.NewServer(target)
	defer hs.Close()
	refuser := &commitRefuser{for_: 1500 * time.Millisecond}
	f := start(t, withOneShot(hs.URL, 0, "approvals.messages"), standin.Options{}, func(o *consumer.Options) {
		refuser.Ledger = o.Ledger
		o.Ledger = refuser
	})
	payload := message("m-approve-blip", 0)
	k := f.keyOf("messages", payload)
	f.publish("triggers.messages", payload)
	waitFor(t, 10*time.Second, "the effect parked", func() bool {
		return f.subjectCount("ONCEGATE_OUTBOX", "oncegate.outbox.messages.parked."+k.String()) == 1
	}, f)
	refuser.armed.Store(true)
	reply, err := f.nc.Request("approvals.messages", []byte(k.String()), 15*time.Second)
	if err != nil || string(reply.Data) != "approved" {
		t.Errorf("approve through a blip: %v %q; want approved", err, replyData(reply))
	}
	ctx := context.Background()
	if rec, err := f.ledger.Get(ctx, consumer.ApprovalKey(k)); err != nil || rec.State != ledger.StateCommitted {
		t.Errorf("the approval record: %+v, %v; want it committed", rec, err)
	}
	waitFor(t, 10*time.Second, "the approved effect sent", func() bool {
		calls, _ := target.snapshot()
		return len(calls) == 1
	}, f)
	waitFor(t, 10*time.Second, "no record pending", func() bool {
		for _, err := range f.ledger.Pending(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			return false
		}
		return true
	}, f)
}
