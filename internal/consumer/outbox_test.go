package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// oneShot is an effect target with no idempotency support: it counts every
// call per key.
type oneShot struct {
	mu    sync.Mutex
	calls map[string]int
	at    map[string]time.Time
}

func (o *oneShot) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	o.mu.Lock()
	defer o.mu.Unlock()
	k := r.Header.Get("Idempotency-Key")
	o.calls[k]++
	o.at[k] = time.Now()
	w.WriteHeader(http.StatusAccepted)
}

func (o *oneShot) snapshot() (map[string]int, map[string]time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, a := map[string]int{}, map[string]time.Time{}
	for k, v := range o.calls {
		c[k] = v
	}
	for k, v := range o.at {
		a[k] = v
	}
	return c, a
}

// withOneShot adds pipeline "messages": a gate on triggers.messages whose
// effect, a one-shot HTTP call, goes through the outbox.
func withOneShot(url string, delay time.Duration, approval string) func(*config.Config) {
	return func(c *config.Config) {
		p := c.Pipelines[1] // webhooks: a gate-ledger pipeline with every default set
		p.Name, p.Subject = "messages", "triggers.messages"
		p.Key = config.Key{Fields: []string{"/msg"}}
		p.Effect = config.Effect{Sink: config.SinkHTTP, URL: url, Class: config.ClassOneShot, Delay: delay, ApprovalSubject: approval}
		c.Pipelines = append(c.Pipelines, p)
	}
}

func message(id string, delivery int) []byte {
	b, _ := json.Marshal(map[string]any{"msg": id, "delivery": delivery, "text": "Your order shipped"})
	return b
}

func (f *fixture) keyOf(pipeline string, payload []byte) dedupe.Key {
	f.t.Helper()
	for i := range f.cfg.Pipelines {
		if f.cfg.Pipelines[i].Name == pipeline {
			k, err := dedupe.NewKeyer(consumer.KeySpec(&f.cfg.Pipelines[i]))
			if err != nil {
				f.t.Fatal(err)
			}
			in, err := k.Intent(payload)
			if err != nil {
				f.t.Fatal(err)
			}
			return in.Key
		}
	}
	f.t.Fatalf("no pipeline %s", pipeline)
	return dedupe.Key{}
}

func (f *fixture) dispatchStats() consumer.DispatchStats {
	for _, s := range f.c.DispatchStats() {
		return s
	}
	return consumer.DispatchStats{}
}

func TestOneShotSentOnce(t *testing.T) {
	target := &oneShot{calls: map[string]int{}, at: map[string]time.Time{}}
	hs := httptest.NewServer(target)
	defer hs.Close()
	f := start(t, withOneShot(hs.URL, 0, ""), standin.Options{})
	for i := range 10 {
		for d := range 3 {
			f.publish("triggers.messages", message(fmt.Sprintf("m-%d", i), d))
		}
	}
	waitFor(t, 20*time.Second, "10 one-shot effects", func() bool { return f.dispatchStats().Sent == 10 }, f)
	calls, _ := target.snapshot()
	if len(calls) != 10 {
		t.Errorf("%d keys called; want 10", len(calls))
	}
	for k, n := range calls {
		if n != 1 {
			t.Errorf("key %s called %d times", k, n)
		}
	}
}

func TestOneShotDelayAndCancel(t *testing.T) {
	target := &oneShot{calls: map[string]int{}, at: map[string]time.Time{}}
	hs := httptest.NewServer(target)
	defer hs.Close()
	const delay = 1500 * time.Millisecond
	f := start(t, withOneShot(hs.URL, delay, ""), standin.Options{})
	keep, drop := message("keep", 0), message("drop", 0)
	t0 := time.Now()
	f.publish("triggers.messages", keep)
	f.publish("triggers.messages", drop)
	f.publish("triggers.messages", message("drop", 1)) // a duplicate within the delay window
	dropKey := f.keyOf("messages", drop)
	waitFor(t, 10*time.Second, "the effects in the outbox", func() bool { return f.stats("messages").Effects == 2 }, f)
	reply, err := f.nc.Request(consumer.CancelSubject("messages"), []byte(dropKey.String()), 5*time.Second)
	if err != nil || string(reply.Data) != "cancelled" {
		t.Fatalf("cancel: %v %q", err, replyData(reply))
	}
	waitFor(t, 20*time.Second, "the kept effect", func() bool { return f.dispatchStats().Sent == 1 }, f)
	waitFor(t, 10*time.Second, "the cancelled one seen", func() bool { return f.dispatchStats().Cancelled == 1 }, f)
	calls, at := target.snapshot()
	keepKey := f.keyOf("messages", keep).String()
	if calls[keepKey] != 1 || calls[dropKey.String()] != 0 {
		t.Errorf("calls %v; want keep once and drop never", calls)
	}
	if waited := at[keepKey].Sub(t0); waited < delay {
		t.Errorf("sent after %v; want at least the delay %v", waited, delay)
	}
	reply, err = f.nc.Request(consumer.CancelSubject("messages"), []byte(keepKey), 5*time.Second)
	if err != nil || string(reply.Data) != "already sent" {
		t.Errorf("cancel after sending: %v %q; want \"already sent\"", err, replyData(reply))
	}
}

func TestOneShotApproval(t *testing.T) {
	target := &oneShot{calls: map[string]int{}, at: map[string]time.Time{}}
	hs := httptest.NewServer(target)
	defer hs.Close()
	f := start(t, withOneShot(hs.URL, 0, "approvals.messages"), standin.Options{})
	payload := message("refund-77", 0)
	f.publish("triggers.messages", payload)
	waitFor(t, 10*time.Second, "the effect parked to wait for approval", func() bool { return f.dispatchStats().Parked == 1 }, f)
	if calls, _ := target.snapshot(); len(calls) != 0 {
		t.Fatalf("sent before approval: %v", calls)
	}
	reply, err := f.nc.Request("approvals.messages", []byte(f.keyOf("messages", payload).String()), 5*time.Second)
	if err != nil || string(reply.Data) != "approved" {
		t.Fatalf("approve: %v %q", err, replyData(reply))
	}
	waitFor(t, 10*time.Second, "the approved effect", func() bool { return f.dispatchStats().Sent == 1 }, f)
}

// TestOneShotUnknownOutcome: a dispatcher that claimed an effect and died
// before recording the outcome leaves a pending dispatch record whose lease
// runs out. The effect may have gone out; it is reported on the
// dead-letter subject and never sent again.
func TestOneShotUnknownOutcome(t *testing.T) {
	target := &oneShot{calls: map[string]int{}, at: map[string]time.Time{}}
	hs := httptest.NewServer(target)
	defer hs.Close()
	f := start(t, withOneShot(hs.URL, 0, ""), standin.Options{})
	payload := message("m-1", 0)
	k := f.keyOf("messages", payload)
	// What a dispatcher that died after its claim leaves behind.
	if _, err := f.ledger.Begin(context.Background(), consumer.DispatchKey(k), ledger.BeginOptions{Owner: "dead-dispatcher", Lease: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	f.publish("triggers.messages", payload)
	waitFor(t, 20*time.Second, "the unknown outcome reported", func() bool {
		return f.dispatchStats().Unknown == 1 && f.subjectCount("ONCEGATE_DEAD", "oncegate.dead.messages") == 1
	}, f)
	dead := f.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.messages")
	if len(dead) != 1 || dead[0].Headers().Get(consumer.HeaderReason) != string(outcome.ReasonUnknownOutcome) {
		t.Errorf("%d dead letters; want one with reason unknown_outcome", len(dead))
	}
	if calls, _ := target.snapshot(); len(calls) != 0 {
		t.Errorf("a one-shot effect of unknown outcome was sent: %v", calls)
	}
}

func replyData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}

// TestTakeoverKeyReused: a holder sent the effect and died before its
// commit; its work is taken over with a reworded duplicate, whose effect
// body differs. The receiver (IETF Idempotency-Key semantics) answers 422:
// the key was used with another body. The effect happened; the intent is
// committed, not dead-lettered.
func TestTakeoverKeyReused(t *testing.T) {
	var mu sync.Mutex
	bodies := map[string]string{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		k := r.Header.Get("Idempotency-Key")
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := bodies[k]; ok && prev != string(b) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		bodies[k] = string(b)
	}))
	defer hs.Close()
	f := start(t, chargesPipeline(hs.URL), standin.Options{})
	first, second := []byte(`{"charge":"ch_1","note":"first wording"}`), []byte(`{"charge":"ch_1","note":"reworded"}`)
	k := f.keyOf("charges", first)
	// What the dead holder left: the effect sent with the first body, and
	// a pending record whose lease has run out.
	mu.Lock()
	bodies[k.String()] = string(first)
	mu.Unlock()
	if _, err := f.ledger.Begin(context.Background(), k, ledger.BeginOptions{Owner: "dead-holder", Lease: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	f.publish("triggers.charges", second)
	waitFor(t, 20*time.Second, "the takeover settled", func() bool { return settled(f.stats("charges")) == 1 }, f)
	if s := f.stats("charges"); s.Effects != 1 || s.DeadLetters != 0 || s.TakenOver != 1 {
		t.Errorf("stats %+v; want the takeover committed, no dead letter", s)
	}
	if rec, err := f.ledger.Get(context.Background(), k); err != nil || rec.State != ledger.StateCommitted {
		t.Errorf("record %v, %v; want committed", rec.State, err)
	}
}

// TestRefusedAfterTakeover: this worker's effect is refused for good (a
// 422), but meanwhile another worker took the work over: the intent is the
// new holder's to settle, and this trigger is acked, not dead-lettered.
func TestRefusedAfterTakeover(t *testing.T) {
	var f *fixture
	var k dedupe.Key
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// While this request is in flight, another worker takes over:
		// the record gets a higher token.
		rec, err := f.ledger.Get(context.Background(), k)
		if err == nil && rec.State == ledger.StatePending {
			f.ledger.Extend(context.Background(), k, rec.Token, time.Nanosecond)
			f.ledger.Begin(context.Background(), k, ledger.BeginOptions{Owner: "new-holder", Lease: time.Minute})
		}
		w.WriteHeader(http.StatusUnprocessableEntity)
	}))
	defer hs.Close()
	f = start(t, func(c *config.Config) {
		chargesPipeline(hs.URL)(c)
		c.Ledger.MaxClockSkew = 0 // a lease cut to end now is out for every clock: the takeover above comes at once
	}, standin.Options{})
	payload := []byte(`{"charge":"ch_2"}`)
	k = f.keyOf("charges", payload)
	f.publish("triggers.charges", payload)
	waitFor(t, 20*time.Second, "the trigger settled", func() bool {
		s := f.stats("charges")
		return s.Stale+s.DeadLetters == 1
	}, f)
	if s := f.stats("charges"); s.DeadLetters != 0 || s.Stale != 1 {
		t.Errorf("stats %+v; want the trigger acked as stale, no dead letter", s)
	}
	if rec, err := f.ledger.Get(context.Background(), k); err != nil || rec.State != ledger.StatePending || rec.Owner != "new-holder" {
		t.Errorf("record %v owned by %q (%v); want the new holder's pending claim untouched", rec.State, rec.Owner, err)
	}
}

// chargesPipeline adds a pipeline "charges" on triggers.charges, keyed by
// /charge, whose replayable effect is an HTTP POST to url.
func chargesPipeline(url string) func(*config.Config) {
	return func(c *config.Config) {
		p := c.Pipelines[1]
		p.Name, p.Subject = "charges", "triggers.charges"
		p.Key = config.Key{Fields: []string{"/charge"}}
		p.Effect = config.Effect{Sink: config.SinkHTTP, URL: url, Class: config.ClassReplayable}
		c.Pipelines = append(c.Pipelines, p)
	}
}

// TestDeadLetterRefusedThenKept: a one-shot effect refused for
// good is given up (its record failed) and dead-lettered; when the dead
// letter cannot be published (its stream gone, a cluster node's fault),
// the entry comes back. It used to be acked then, as "dead-lettered
// before", and vanished; it is dead-lettered again now, until the dead
// letter is kept.
func TestDeadLetterRefusedThenKept(t *testing.T) {
	slowTest(t)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such recipient", http.StatusBadRequest)
	}))
	defer hs.Close()
	f := start(t, withOneShot(hs.URL, 0, ""), standin.Options{})
	ctx := context.Background()
	dlq, err := f.js.Stream(ctx, "ONCEGATE_DEAD")
	if err != nil {
		t.Fatal(err)
	}
	info, err := dlq.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.js.DeleteStream(ctx, "ONCEGATE_DEAD"); err != nil {
		t.Fatal(err)
	}
	f.publish("triggers.messages", message("m-refused", 0))
	waitFor(t, 20*time.Second, "the entry given up, and back twice after its dead letter was refused", func() bool {
		return f.dispatchStats().Failed >= 1 && outboxDeliveries(f) >= 3
	}, f)
	if _, err := f.js.CreateStream(ctx, info.Config); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the dead letter kept", func() bool {
		return f.subjectCount("ONCEGATE_DEAD", "oncegate.dead.messages") == 1
	}, f)
}

// outboxDeliveries is how many deliveries the outbox's durable consumers
// have made.
func outboxDeliveries(f *fixture) uint64 {
	st, err := f.js.Stream(context.Background(), "ONCEGATE_OUTBOX")
	if err != nil {
		return 0
	}
	var n uint64
	for ci := range st.ListConsumers(context.Background()).Info() {
		n += ci.Delivered.Consumer
	}
	return n
}
