package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/llmcache"
	llmbadger "github.com/oncegate/oncegate/pkg/llmcache/badgerstore"
)

// fixture is a consumer on an embedded server with a Badger ledger, the
// LLM cache and the stand-in model, all real.
type fixture struct {
	t      testing.TB
	nc     *nats.Conn
	js     jetstream.JetStream
	c      *consumer.Consumer
	cfg    *config.Config
	model  *standin.Server
	cache  *llmcache.Cache
	ledger ledger.Ledger
	db     *badger.DB
	cancel context.CancelFunc
	done   chan error
}

func start(t testing.TB, mutate func(*config.Config), modelOpts standin.Options, opts ...func(*consumer.Options)) *fixture {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.DataDir = dir
	for i := range cfg.Pipelines {
		cfg.Pipelines[i].Concurrency = 16
		cfg.Pipelines[i].AckWait = 5 * time.Second
		cfg.Pipelines[i].Backoff = nil
	}
	if mutate != nil {
		mutate(cfg)
	}
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)

	db, err := badgerstore.Open(filepath.Join(dir, "ledger"), badgerstore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	led, err := badgerstore.New(db, badgerstore.Options{Options: app.LedgerOptions(cfg.Ledger)})
	if err != nil {
		t.Fatal(err)
	}
	model, err := standin.New(modelOpts)
	if err != nil {
		t.Fatal(err)
	}
	url, stopModel, err := model.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	prices := llmcache.Prices{}
	for m, p := range cfg.LLM.Prices {
		prices[m] = llmcache.Price{Prompt: p.PromptPerMTok, Completion: p.CompletionPerMTok}
	}
	cache, err := llmbadger.Open(filepath.Join(dir, "cache"), llmcache.Options{Prices: prices})
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	ocfg := openai.DefaultConfig("sk-test")
	ocfg.BaseURL = url
	ocfg.HTTPClient = cache.HTTPClient(&http.Client{Transport: tr})

	copts := consumer.Options{
		Config: cfg, Conn: nc, Ledger: led, Model: openai.NewClientWithConfig(ocfg), DrainTimeout: 5 * time.Second,
		Logger: testLogger(t),
	}
	for _, o := range opts {
		o(&copts)
	}
	c, err := consumer.New(copts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &fixture{t: t, nc: nc, js: js, c: c, cfg: cfg, model: model, cache: cache, ledger: led, db: db, cancel: cancel, done: make(chan error, 1)}
	go func() { f.done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-f.done; err != nil {
			t.Errorf("Run: %v", err)
		}
		cache.Close()
		tr.CloseIdleConnections()
		stopModel()
		led.Close()
		db.Close()
	})
	waitFor(t, 10*time.Second, "the consumer to be ready", func() bool { return c.Ready() == nil })
	return f
}

func (f *fixture) publish(subject string, payload []byte) {
	f.t.Helper()
	if _, err := f.js.Publish(context.Background(), subject, payload); err != nil {
		f.t.Fatalf("publish %s: %v", subject, err)
	}
}

// settled is the number of deliveries of pipeline that reached a verdict.
func settled(s consumer.PipelineStats) int64 {
	return s.Effects + s.DuplicatesWindow + s.DuplicatesLedger + s.DeadLetters
}

func (f *fixture) stats(name string) consumer.PipelineStats {
	for _, s := range f.c.Stats() {
		if s.Pipeline == name {
			return s
		}
	}
	f.t.Fatalf("no pipeline %s", name)
	return consumer.PipelineStats{}
}

// subjectCount is the number of messages of stream on subject, 0 if the
// stream does not exist yet.
func (f *fixture) subjectCount(stream, subject string) int {
	f.t.Helper()
	st, err := f.js.Stream(context.Background(), stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0
	}
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		f.t.Fatal(err)
	}
	return int(info.State.Subjects[subject])
}

// streamMsgs returns the messages of stream on subject.
func (f *fixture) streamMsgs(stream, subject string) []jetstream.Msg {
	f.t.Helper()
	ctx := context.Background()
	st, err := f.js.Stream(ctx, stream)
	if err != nil {
		f.t.Fatalf("stream %s: %v", stream, err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		f.t.Fatal(err)
	}
	n := int(info.State.Subjects[subject])
	var out []jetstream.Msg
	for len(out) < n {
		b, err := cons.Fetch(n-len(out), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			f.t.Fatal(err)
		}
		for m := range b.Messages() {
			out = append(out, m)
		}
		if b.Error() != nil && !errors.Is(b.Error(), nats.ErrTimeout) {
			f.t.Fatal(b.Error())
		}
	}
	return out
}

func alert(fingerprint string, occurrence int, delivery int) []byte {
	b, _ := json.Marshal(map[string]any{
		"receiver": "oncall", "status": "firing",
		"delivery_id": fmt.Sprintf("d-%s-%d-%d", fingerprint, occurrence, delivery),
		"sent_at":     time.Now().UTC().Format(time.RFC3339Nano),
		"alert": map[string]any{
			"fingerprint": fingerprint, "occurrence": occurrence,
			"labels":      map[string]string{"alertname": "DiskAlmostFull", "instance": "db-" + fingerprint, "severity": "page"},
			"annotations": map[string]string{"summary": "Disk is 93% full", "runbook": "https://runbooks.example/disk"},
			"startsAt":    "2026-11-29T07:09:03Z",
		},
	})
	return b
}

// TestDuplicatesAreSuppressed publishes 40 alerts, each 1 to 3 times with
// other delivery ids and timestamps: one effect per alert, one model call
// per alert, and everything acked.
func TestDuplicatesAreSuppressed(t *testing.T) {
	f := start(t, nil, standin.Options{})
	const alerts = 40
	published := 0
	for i := range alerts {
		for d := range 1 + i%3 {
			f.publish("triggers.alerts", alert(fmt.Sprintf("fp%03d", i), 1, d))
			published++
		}
	}
	waitFor(t, 30*time.Second, "every alert delivery settled", func() bool { return settled(f.stats("alerts")) == int64(published) })
	s := f.stats("alerts")
	if s.Effects != alerts || s.DuplicatesWindow+s.DuplicatesLedger != int64(published-alerts) || s.DeadLetters != 0 {
		t.Errorf("stats %+v; want %d effects and %d duplicates", s, alerts, published-alerts)
	}
	effects := f.streamMsgs("ONCEGATE_EFFECTS", "effects.alerts")
	keys := map[string]bool{}
	for _, m := range effects {
		var e struct{ Key, Answer string }
		if err := json.Unmarshal(m.Data(), &e); err != nil {
			t.Fatal(err)
		}
		if keys[e.Key] {
			t.Errorf("two effects for key %s", e.Key)
		}
		keys[e.Key] = true
		if !strings.HasPrefix(e.Answer, standin.Label) {
			t.Errorf("effect answer %q does not come from the stand-in", e.Answer)
		}
		if m.Headers().Get(nats.MsgIdHdr) != e.Key {
			t.Errorf("effect Nats-Msg-Id %q; want the key %s", m.Headers().Get(nats.MsgIdHdr), e.Key)
		}
	}
	if len(effects) != alerts {
		t.Errorf("%d effects in the stream; want %d", len(effects), alerts)
	}
	if got := f.model.Stats().Completions; got != alerts {
		t.Errorf("model calls = %d; want %d (one per alert)", got, alerts)
	}
	// A new occurrence is new work.
	f.publish("triggers.alerts", alert("fp000", 2, 0))
	waitFor(t, 10*time.Second, "the new occurrence", func() bool { return f.stats("alerts").Effects == alerts+1 })
}

// TestRedeliveryAfterCommitIsAcked: a trigger whose work is committed but
// whose ack was lost comes back; the ledger answers it, nothing is redone.
func TestGatePipeline(t *testing.T) {
	f := start(t, nil, standin.Options{})
	hook := func(i, d int) []byte {
		b, _ := json.Marshal(map[string]any{
			"delivery_id": fmt.Sprintf("del-%d-%d", i, d), "sent_at": time.Now().Format(time.RFC3339Nano),
			"event": "invoice.paid", "invoice": map[string]any{"id": fmt.Sprintf("in_%d", i), "amount": 1000 + i},
		})
		return b
	}
	published := 0
	for i := range 30 {
		for d := range 1 + i%4 {
			f.publish("triggers.webhooks", hook(i, d))
			published++
		}
	}
	waitFor(t, 30*time.Second, "every webhook settled", func() bool { return settled(f.stats("webhooks")) == int64(published) }, f)
	if got := len(f.streamMsgs("ONCEGATE_EFFECTS", "effects.webhooks")); got != 30 {
		t.Errorf("%d webhooks forwarded; want 30", got)
	}
	if got := f.model.Stats().Requests; got != 0 {
		t.Errorf("a gate pipeline called the model %d times", got)
	}
}

// TestGateWindowPipeline: a gate with the window alone forwards each
// distinct webhook once, whether its repeats arrive in one fetched batch or
// in later ones, and counts the repeats at the window.
func TestGateWindowPipeline(t *testing.T) {
	f := start(t, func(c *config.Config) {
		for i := range c.Pipelines {
			if c.Pipelines[i].Name == "webhooks" {
				c.Pipelines[i].Mode = config.ModeGateWindow
			}
		}
	}, standin.Options{})
	hook := func(i, d int) []byte {
		b, _ := json.Marshal(map[string]any{
			"delivery_id": fmt.Sprintf("del-%d-%d", i, d), "event": "invoice.paid",
			"invoice": map[string]any{"id": fmt.Sprintf("in_%d", i), "amount": 1000 + i},
		})
		return b
	}
	// Repeats back to back (likely one batch), then all of them again.
	published := 0
	for round := range 2 {
		for i := range 50 {
			for d := range 1 + i%3 {
				f.publish("triggers.webhooks", hook(i, 10*round+d))
				published++
			}
		}
	}
	waitFor(t, 30*time.Second, "every webhook settled", func() bool { return settled(f.stats("webhooks")) == int64(published) }, f)
	if got := len(f.streamMsgs("ONCEGATE_EFFECTS", "effects.webhooks")); got != 50 {
		t.Errorf("%d webhooks forwarded; want 50", got)
	}
	// A repeat that came while its key was at work was published too, and
	// dropped by the effect stream; the others stopped at the window.
	st := f.stats("webhooks")
	if st.Effects-st.DuplicatesStream != 50 || st.DuplicatesWindow+st.DuplicatesStream != int64(published-50) || st.DuplicatesLedger != 0 {
		t.Errorf("stats %+v; want 50 effects and %d duplicates at the window or the stream", st, published-50)
	}
}

// TestBadInputIsDeadLettered: each kind of bad payload lands on the
// dead-letter subject with its reason, and good triggers after them still
// flow.
func TestBadInputIsDeadLettered(t *testing.T) {
	f := start(t, nil, standin.Options{})
	bad := []struct {
		payload []byte
		reason  outcome.Reason
	}{
		{[]byte("not json at all"), outcome.ReasonInvalidJSON},
		{[]byte(`{"alert":{"fingerprint":"x","occurrence":1}} trailing`), outcome.ReasonInvalidJSON},
		{[]byte(`{"alert":{"fingerprint":"x","fingerprint":"y","occurrence":1}}`), outcome.ReasonInvalidJSON},
		{[]byte("{\"alert\":{\"fingerprint\":\"\xff\",\"occurrence\":1}}"), outcome.ReasonInvalidJSON},
		{[]byte(`{"alert":{"occurrence":1}}`), outcome.ReasonMissingField},
		{[]byte(strings.Repeat("[", 100000) + strings.Repeat("]", 100000)), outcome.ReasonTooLarge},
		{[]byte(`{"alert":{"fingerprint":"` + strings.Repeat("a", 300<<10) + `","occurrence":1}}`), outcome.ReasonTooLarge},
	}
	for _, b := range bad {
		f.publish("triggers.alerts", b.payload)
	}
	f.publish("triggers.alerts", alert("good", 1, 0))
	waitFor(t, 30*time.Second, "all settled", func() bool { return settled(f.stats("alerts")) == int64(len(bad)+1) })
	s := f.stats("alerts")
	if s.DeadLetters != int64(len(bad)) || s.Effects != 1 {
		t.Errorf("stats %+v; want %d dead letters and 1 effect", s, len(bad))
	}
	dead := f.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.alerts")
	if len(dead) != len(bad) {
		t.Fatalf("%d dead letters; want %d", len(dead), len(bad))
	}
	for _, m := range dead {
		// Triggers are handled concurrently; the stream sequence says which
		// one a dead letter is.
		i, err := strconv.Atoi(m.Headers().Get(consumer.HeaderStreamSeq))
		if err != nil || i < 1 || i > len(bad) {
			t.Fatalf("dead letter with stream sequence %q", m.Headers().Get(consumer.HeaderStreamSeq))
		}
		i--
		if got := m.Headers().Get(consumer.HeaderReason); got != string(bad[i].reason) {
			t.Errorf("dead letter %d: reason %q (%s); want %q", i, got, m.Headers().Get(consumer.HeaderDetail), bad[i].reason)
		}
		if m.Headers().Get(consumer.HeaderPipeline) != "alerts" || m.Headers().Get(consumer.HeaderStreamSeq) == "" {
			t.Errorf("dead letter %d headers %v", i, m.Headers())
		}
	}
}

// TestModelFailuresRetry: the model fails half the time; every alert still
// gets exactly one effect, after retries.
func TestModelFailuresRetry(t *testing.T) {
	slowTest(t)
	f := start(t, func(c *config.Config) {
		c.Pipelines[0].MaxDeliver = 20
		// Retries come back after 300ms (a plain NAK would come back at
		// once; the consumer paces them by the backoff).
		c.Pipelines[0].Backoff = []time.Duration{300 * time.Millisecond}
		c.Pipelines[0].AckWait = 300 * time.Millisecond
		c.Ledger.Lease = 2 * time.Second
	}, standin.Options{ErrorRate: 0.5, Seed: 7})
	const alerts = 20
	for i := range alerts {
		f.publish("triggers.alerts", alert(fmt.Sprintf("flaky%02d", i), 1, 0))
	}
	waitFor(t, 60*time.Second, "every alert's effect", func() bool { return f.stats("alerts").Effects == alerts }, f)
	s := f.stats("alerts")
	if s.Retries == 0 || s.DeadLetters != 0 {
		t.Errorf("stats %+v; want retries and no dead letters", s)
	}
	if got := len(f.streamMsgs("ONCEGATE_EFFECTS", "effects.alerts")); got != alerts {
		t.Errorf("%d effects; want %d", got, alerts)
	}
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool, fs ...*fixture) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			for _, f := range fs {
				t.Logf("stats: %+v", f.c.Stats())
			}
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testLogger logs to the test's output when -v is given.
func testLogger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return nil
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestReplySubject: a trigger that names a reply subject gets the stored
// result there when its work is done.
func TestReplySubject(t *testing.T) {
	f := start(t, nil, standin.Options{})
	replies := make(chan *nats.Msg, 4)
	sub, err := f.nc.ChanSubscribe("_INBOX.triage", replies)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	send := func(delivery int) {
		m := nats.NewMsg("triggers.alerts")
		m.Data = alert("reply-1", 1, delivery)
		m.Header.Set(consumer.HeaderReply, "_INBOX.triage")
		if _, err := f.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	send(0)
	select {
	case m := <-replies:
		var e struct{ Answer string }
		if json.Unmarshal(m.Data, &e) != nil || !strings.HasPrefix(e.Answer, standin.Label) {
			t.Fatalf("reply %s; want the effect body with the model's answer", m.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reply")
	}
}

// TestLargeEffectIsCommitted: an effect body larger than the ledger keeps
// (a 100 KiB alert) still goes out once and is committed; the body is just
// not kept for replies.
func TestLargeEffectIsCommitted(t *testing.T) {
	f := start(t, nil, standin.Options{})
	b, _ := json.Marshal(map[string]any{"alert": map[string]any{
		"fingerprint": "big", "occurrence": 1, "annotations": map[string]string{"summary": strings.Repeat("disk full ", 10<<10)},
	}})
	f.publish("triggers.alerts", b)
	waitFor(t, 20*time.Second, "the large alert settled", func() bool { return settled(f.stats("alerts")) == 1 }, f)
	if s := f.stats("alerts"); s.Effects != 1 || s.DeadLetters != 0 {
		t.Errorf("stats %+v; want one effect, no dead letter", s)
	}
}

// TestKeyHeaders: a key spec that names a header (as the webhook ingress
// sets Oncegate-Event) keys the same payload under two events as two
// intents, and dead-letters a trigger without the header.
func TestKeyHeaders(t *testing.T) {
	f := start(t, func(c *config.Config) {
		for i := range c.Pipelines {
			if c.Pipelines[i].Name == "webhooks" {
				c.Pipelines[i].Key.Headers = []string{"Oncegate-Event"}
			}
		}
	}, standin.Options{})
	send := func(event string) {
		m := nats.NewMsg("triggers.webhooks")
		m.Data = []byte(`{"repository":{"id":7},"after":"abc123"}`)
		if event != "" {
			m.Header.Set("Oncegate-Event", event)
		}
		if _, err := f.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	send("push")
	send("push")
	send("create")
	send("")
	waitFor(t, 10*time.Second, "every trigger settled", func() bool { return settled(f.stats("webhooks")) == 4 }, f)
	if s := f.stats("webhooks"); s.Effects != 2 || s.DuplicatesWindow+s.DuplicatesLedger != 1 || s.DeadLetters != 1 {
		t.Errorf("stats %+v; want 2 effects (push, create), 1 duplicate, 1 dead letter", s)
	}
	dead := f.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.webhooks")
	if len(dead) != 1 || dead[0].Headers().Get(consumer.HeaderReason) != string(outcome.ReasonMissingField) {
		t.Errorf("%d dead letters; want one with reason missing_field", len(dead))
	}
}
