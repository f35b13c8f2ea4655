package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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

// The tests in this file each close a hole in "once" found by trying the
// consumer adversarially; each failed before its fix. The ones that need a
// process killed are in cmd/consumer (TestLastDeliveryCrash,
// TestRedoPastDuplicateWindow, TestKeyReusedAfterCrash).

// TestSettleIsTheOnlyAcker: acks, naks, terms and in-progress marks are
// made in settle.go alone, so that every path ends in one decision.
func TestSettleIsTheOnlyAcker(t *testing.T) {
	acks := []string{"Ack", "DoubleAck", "Nak", "NakWithDelay", "Term", "TermWithReason", "InProgress"}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	found := map[string][]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && slices.Contains(acks, sel.Sel.Name) {
				found[name] = append(found[name], fset.Position(call.Pos()).String()+" "+sel.Sel.Name)
			}
			return true
		})
	}
	for name, calls := range found {
		if name != "settle.go" {
			t.Errorf("%s settles messages; only settle.go may: %v", name, calls)
		}
	}
	if len(found["settle.go"]) == 0 {
		t.Error("settle.go settles nothing: the check looks at the wrong files")
	}
}

// TestDeadLetterIDsDoNotCollide (hole 2): a trigger and an outbox entry of
// one pipeline that share a stream sequence number are both dead-lettered.
// Their Nats-Msg-Ids once named only the pipeline and the sequence, so the
// second was dropped as a duplicate of the first, and its message termed.
func TestDeadLetterIDsDoNotCollide(t *testing.T) {
	target := &oneShot{calls: map[string]int{}, at: map[string]time.Time{}}
	hs := httptest.NewServer(target)
	defer hs.Close()
	f := start(t, withOneShot(hs.URL, 0, ""), standin.Options{})
	// Trigger stream sequence 1: not JSON, dead-lettered.
	f.publish("triggers.messages", []byte("not json"))
	waitFor(t, 10*time.Second, "the bad trigger dead-lettered", func() bool { return f.subjectCount("ONCEGATE_DEAD", "oncegate.dead.messages") == 1 }, f)
	// Outbox sequence 1: its dispatch was claimed by a dispatcher that
	// died, so it is dead-lettered as an unknown outcome.
	payload := message("m-1", 0)
	if _, err := f.ledger.Begin(context.Background(), consumer.DispatchKey(f.keyOf("messages", payload)), ledger.BeginOptions{Owner: "dead-dispatcher", Lease: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	f.publish("triggers.messages", payload)
	waitFor(t, 20*time.Second, "both dead letters", func() bool { return f.subjectCount("ONCEGATE_DEAD", "oncegate.dead.messages") == 2 }, f)
	reasons := map[string]bool{}
	for _, m := range f.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.messages") {
		reasons[m.Headers().Get(consumer.HeaderReason)+" from "+m.Headers().Get(consumer.HeaderStream)] = true
	}
	if !reasons["invalid_json from ONCEGATE"] || !reasons["unknown_outcome from ONCEGATE_OUTBOX"] {
		t.Errorf("dead letters: %v; want the bad trigger's and the outbox entry's", reasons)
	}
}

// TestMismatchRejectBypassesNoWindow (hole 4): under ledger.mismatch:
// reject, the same key with another payload is dead-lettered even while
// the window remembers the key; the window once acked it as a duplicate.
func TestMismatchRejectBypassesNoWindow(t *testing.T) {
	f := start(t, func(c *config.Config) {
		c.Ledger.Mismatch = config.MismatchReject
		p := c.Pipelines[1]
		p.Name, p.Subject = "invoices", "triggers.invoices"
		p.Key = config.Key{Fields: []string{"/invoice/id"}}
		p.Effect = config.Effect{Sink: config.SinkJetStream, Subject: "effects.invoices", Class: config.ClassReplayable}
		c.Pipelines = append(c.Pipelines, p)
	}, standin.Options{})
	first := []byte(`{"invoice":{"id":"in_1","amount":100}}`)
	again := first
	other := []byte(`{"invoice":{"id":"in_1","amount":999}}`) // the same key, another payload
	f.publish("triggers.invoices", first)
	waitFor(t, 10*time.Second, "the first invoice", func() bool { return f.stats("invoices").Effects == 1 }, f)
	f.publish("triggers.invoices", again)
	waitFor(t, 10*time.Second, "the repeat", func() bool { return f.stats("invoices").DuplicatesWindow == 1 }, f)
	f.publish("triggers.invoices", other)
	waitFor(t, 10*time.Second, "the reused key settled", func() bool { return settled(f.stats("invoices")) == 3 }, f)
	if s := f.stats("invoices"); s.DeadLetters != 1 || s.Effects != 1 {
		t.Fatalf("stats %+v; want the reused key dead-lettered", s)
	}
	dead := f.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.invoices")
	if len(dead) != 1 || dead[0].Headers().Get(consumer.HeaderReason) != string(outcome.ReasonMismatch) {
		t.Errorf("%d dead letters; want one with reason mismatch", len(dead))
	}
}

// TestFileKeyConflictIsDone (hole 5, the file sink): a file already
// written for the key with other content means the intent's effect
// exists. It is recorded as done, never failed and dead-lettered.
func TestFileKeyConflictIsDone(t *testing.T) {
	dir := t.TempDir()
	f := start(t, func(c *config.Config) {
		p := c.Pipelines[1]
		p.Name, p.Subject = "files", "triggers.files"
		p.Key = config.Key{Fields: []string{"/doc"}}
		p.Effect = config.Effect{Sink: config.SinkFile, Dir: dir, Class: config.ClassReplayable}
		c.Pipelines = append(c.Pipelines, p)
	}, standin.Options{})
	payload := []byte(`{"doc":"d-1","text":"reworded"}`)
	k := f.keyOf("files", payload)
	if err := os.WriteFile(filepath.Join(dir, k.String()+".json"), []byte(`{"doc":"d-1","text":"first wording"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f.publish("triggers.files", payload)
	waitFor(t, 10*time.Second, "the trigger settled", func() bool { return settled(f.stats("files")) == 1 }, f)
	if s := f.stats("files"); s.DeadLetters != 0 || s.Effects != 1 {
		t.Errorf("stats %+v; want the effect recorded as done", s)
	}
	if rec, err := f.ledger.Get(context.Background(), k); err != nil || rec.State.String() != "committed" {
		t.Errorf("record %v (%v); want committed", rec.State, err)
	}
}

// TestAckedTriggersAreRemoved (hole 6): on a work-queue stream a trigger
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

// TestConsumerDeletedUnderUs (hole 7): a durable consumer deleted under a
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

// TestSlowDispatchKeepsItsLease (hole 7): a one-shot send slower than the
// lease and than its outbox entry's ack wait keeps both alive. The
// dispatcher once renewed neither: the entry came back, on a second
// replica, which found the lease run out and reported the effect as an
// unknown outcome while it was being sent.
func TestSlowDispatchKeepsItsLease(t *testing.T) {
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

// TestTakeoverPastDuplicateWindow (hole 3, at run time): a holder claimed
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

// TestGateWindowStaleDelivery (hole 8): on a gate-window pipeline, a
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

// TestStaleHolderLosesNothing (hole 9): a duplicate was acked because
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
	const lease = 3 * time.Second
	var f *fixture
	out := &slowSink{took: 8500 * time.Millisecond}
	f = start(t, func(c *config.Config) {
		c.Ledger.Lease = lease
		for i := range c.Pipelines {
			c.Pipelines[i].AckWait = lease
		}
	}, standin.Options{}, func(o *consumer.Options) {
		out.Sink = webhooksSink(t, o)
		o.Sinks = map[string]sink.Sink{"webhooks": out}
		o.Ledger = &slowExtend{Ledger: o.Ledger, delays: [2]time.Duration{lease / 2, lease * 8 / 10}}
	})
	f.publish("triggers.webhooks", []byte(`{"event":"invoice.paid","invoice":{"id":"in_1"},"delivery_id":"a"}`))
	waitFor(t, 30*time.Second, "the trigger settled", func() bool { return f.allAcked("webhooks") && f.stats("webhooks").Effects == 1 }, f)
	if s := f.stats("webhooks"); s.Deliveries != 1 || s.Retries != 0 || s.TakenOver != 0 || s.Stale != 0 {
		t.Errorf("stats %+v; want the one delivery settled on its first try, no retry, takeover or stale commit", s)
	}
}
