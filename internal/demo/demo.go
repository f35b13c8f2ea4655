// Package demo runs Oncegate's whole story on a fresh machine, in one
// process: the command `consumer demo` is its flags.
package demo

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/natsrun"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/internal/standin"
)

// demoWorkload is what the demo publishes and what it knows to be true.
type demoWorkload struct {
	published  int // publish calls
	viaIngress int // triggers that came through the ingress (an Alertmanager group's alerts each), stored or dropped as duplicates
	ingestDups int // of all triggers, dropped by the trigger stream's Nats-Msg-Id window
	alertKeys  int // unique alert intents (fingerprint, occurrence)
	hookKeys   int // unique webhook intents
	malformed  int // payloads that must be dead-lettered
	kinds      map[string]int
	inStream   int // messages that entered the stream
	redrive    *demoRedrive
	ingress    ingressTally
}

// Options are a demo run's workload and faults. Run fills in the zero
// ones from DefaultOptions.
type Options struct {
	Alerts       int           // distinct alerts to publish (each 1 to 4 times)
	Webhooks     int           // distinct webhooks to publish (each 1 to 3 times)
	Seed         uint64        // the workload's and the faults' seed
	Keep         bool          // keep the data directory (printed)
	Timeout      time.Duration // give up if the work is not done by then
	ModelErrors  float64       // share of model calls answered 500
	Model429     float64       // share of model calls answered 429
	EffectErrors float64       // share of effects that fail (retryably) before they are sent
	RecipeAlerts int           // distinct alerts for the Alertmanager recipe
	// Logger receives what the consumer does; nil discards it.
	Logger *slog.Logger
}

// DefaultOptions are the command's defaults: a run of under a minute.
var DefaultOptions = Options{Alerts: 150, Webhooks: 100, Timeout: 50 * time.Second, ModelErrors: 0.08, Model429: 0.04, EffectErrors: 0.1, RecipeAlerts: 40}

// ErrOptions is what Run returns for options out of range.
var ErrOptions = errors.New("demo: invalid options")

// Run runs the whole story on cfg (the built-in configuration, as the
// command loads it), in this process: the embedded NATS server, the ledger,
// the LLM cache and the stand-in model in a fresh data directory; a burst
// of webhook and alert triggers with provider retries, redeliveries and
// reworded duplicates; the consumer restarted half-way; and the report of
// what each guard suppressed and what the effects were, written to stdout.
func Run(ctx context.Context, cfg *config.Config, o Options, stdout io.Writer) error {
	switch {
	case o.Alerts < 0 || o.Webhooks < 0 || o.RecipeAlerts < 0:
		return fmt.Errorf("%w: -alerts and -webhooks must not be negative", ErrOptions)
	case o.Timeout <= 0:
		return fmt.Errorf("%w: -timeout must be positive", ErrOptions)
	case o.ModelErrors < 0 || o.ModelErrors > 1 || o.Model429 < 0 || o.Model429 > 1 || o.EffectErrors < 0 || o.EffectErrors > 1:
		return fmt.Errorf("%w: -model-errors, -model-429 and -effect-errors are shares from 0 to 1", ErrOptions)
	}
	alerts, hooks, seed, keep, timeout := &o.Alerts, &o.Webhooks, &o.Seed, &o.Keep, &o.Timeout
	errRate, rateRate, effRate, amAlerts := &o.ModelErrors, &o.Model429, &o.EffectErrors, &o.RecipeAlerts
	start := time.Now()
	// Every line goes through prog, which adds a progress line whenever
	// the run has been quiet for a few seconds.
	prog := startDemoProgress(stdout, demoQuiet)
	defer prog.Stop()
	stdout = prog
	dir, err := os.MkdirTemp("", "oncegate-demo-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Fprintln(stdout, "data directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	cfg.DataDir = dir
	cfg.NATS.URL = ""
	cfg.NATS.Embedded.Listen = "127.0.0.1:0"
	cfg.NATS.Embedded.StoreDir = dir + "/nats"
	cfg.Metrics.Listen = ""
	// The demo asks for the stand-in model by name: it runs offline.
	cfg.LLM.BaseURL, cfg.LLM.Standin = "", true
	cfg.LLM.Timeout = 2 * time.Second
	cfg.Ledger.Lease = 5 * time.Second
	demoIngress(cfg)
	rcv, err := demoRecipe(cfg)
	if err != nil {
		return err
	}
	defer rcv.Close()
	for i := range cfg.Pipelines {
		p := &cfg.Pipelines[i]
		// Retries come back fast, so the demo ends quickly; NATS uses the
		// first backoff as the ack wait, which keep-alives renew.
		p.Backoff = []time.Duration{time.Second, 2 * time.Second, 2 * time.Second}
		p.AckWait = p.Backoff[0]
		p.MaxDeliver = 12
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("demo configuration: %w", err)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	frng := rand.New(rand.NewPCG(*seed, 2))
	var fmu sync.Mutex
	var effectFaults atomic.Int64
	red := newDemoRedrive(*hooks)
	a, err := app.Start(ctx, cfg, app.Options{
		Logger: log, Getenv: demoGetenv,
		// Some effects fail once after the model answered, as a sink that
		// times out would: the retry must not pay for the model again.
		WrapSink: func(name string, s sink.Sink) sink.Sink {
			if name == demoRecipeName+"/slack" {
				// One-shot (an incoming webhook): a failure after sending
				// would be reported unknown_outcome, never resent.
				return s
			}
			return red.wrap(name, &flakySink{Sink: s, fail: func() int {
				fmu.Lock()
				defer fmu.Unlock()
				if frng.Float64() >= *effRate {
					return 0
				}
				effectFaults.Add(1)
				return 1 + frng.IntN(2)
			}})
		},
		Standin: standin.Options{
			Latency: 20 * time.Millisecond, ErrorRate: *errRate, RateLimitRate: *rateRate, Seed: *seed,
			RetryAfter: time.Second,
		},
	})
	if err != nil {
		return err
	}
	defer a.Close()

	fmt.Fprintf(stdout, "Oncegate demo: embedded NATS at %s, ledger and cache in %s, model: offline stand-in (%s)\n",
		a.Embedded.ClientURL(), dir, a.ModelURL)
	fmt.Fprintf(stdout, "publishing %d alerts and %d webhooks with retries and duplicates; seed %d\n", *alerts, *hooks, *seed)

	run := func() (context.CancelFunc, chan error) {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(rctx) }()
		return cancel, done
	}
	var stats [][]consumer.PipelineStats
	cancel, done := run()
	if err := waitReady(ctx, a); err != nil {
		cancel()
		return err
	}

	// With the same authentication as the consumer: the embedded server
	// requires it when ONCEGATE_NATS_TOKEN (say) is set.
	nc, err := natsrun.Connect(ctx, a.Embedded.ClientURL(), app.NATSOptions(cfg.NATS, "oncegate-demo-publisher", log))
	if err != nil {
		cancel()
		return err
	}
	defer natsrun.Close(nc)
	js, _ := jetstream.New(nc)

	rng := rand.New(rand.NewPCG(*seed, 1))
	w := &demoWorkload{kinds: map[string]int{}, redrive: red}
	pub := newPublisher(ctx, js, w)
	msgs := buildDemo(rng, *alerts, *hooks, w)
	half := len(msgs) / 2
	prog.total.Store(int64(len(msgs)))
	prog.setPhase("publishing")
	for i, m := range msgs[:half] {
		if err := pub.send(m); err != nil {
			cancel()
			return err
		}
		prog.published.Add(1)
		pace(i)
	}
	prog.setPhase("restarting the consumer")
	// A restart half-way: the new process's window is empty, so the
	// ledger has to catch what the window caught before.
	cancel()
	if err := <-done; err != nil {
		return err
	}
	stats = append(stats, a.Consumer.Stats())
	if err := a.RestartConsumer(); err != nil {
		return err
	}
	cancel, done = run()
	defer func() {
		cancel()
		<-done
	}()
	prog.setPhase("publishing")
	for i, m := range msgs[half:] {
		if err := pub.send(m); err != nil {
			return err
		}
		prog.published.Add(1)
		pace(i)
	}
	prog.setPhase("sending webhooks through the ingress")
	fmt.Fprintf(stdout, "published %d triggers (%d dropped at ingest by the stream's Nats-Msg-Id window); consumer restarted once half-way\n",
		w.published, w.ingestDups)
	// Part of the traffic arrives as webhooks, signed as the providers
	// sign them, through the ingress.
	if w.ingress, err = driveIngress(ctx, "http://"+a.IngressAddr, cfg, rng, w, 15, 8); err != nil {
		return err
	}

	// Done when no pipeline's durable consumer has a message pending or
	// unacknowledged: the server's view, which counts redeliveries right.
	deadline := time.Now().Add(*timeout)
	prog.setPhase("settling")
	for {
		left, err := a.Outstanding(ctx)
		if err != nil {
			return err
		}
		prog.unsettled.Store(int64(left))
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: %d triggers still unsettled after %v", left, *timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	prog.setPhase("the Alertmanager recipe")
	rw, err := driveRecipe(ctx, a, js, rng, *amAlerts, *timeout)
	if err != nil {
		return err
	}
	// The last act: a receiver bug refused a few webhooks for good; fix it
	// and redrive their dead letters.
	prog.setPhase("redriving after the fix")
	if err := w.redrive.run(ctx, a, js, deadline); err != nil {
		return err
	}
	stats = append(stats, a.Consumer.Stats())
	prog.setPhase("counting the effects")
	err = demoReport(ctx, stdout, a, js, w, stats, effectFaults.Load(), time.Since(start))
	return errors.Join(err, recipeReport(stdout, a, rcv, rw))
}

// pace spreads the burst over a few seconds, as real traffic arrives.
func pace(i int) {
	if i%20 == 19 {
		time.Sleep(40 * time.Millisecond)
	}
}

// flakySink fails some deliveries: half before they reach the real sink
// (a connection refused), half after (the effect happened and the response
// was lost, so the retry sends it again under the same key).
type flakySink struct {
	sink.Sink
	fail func() int // 0: no fault; 1: before sending; 2: after
}

func (f *flakySink) Deliver(ctx context.Context, e sink.Effect) (sink.Result, error) {
	injected := func(what string) error {
		return &sink.Error{Sink: "demo", Key: e.Key, Retryable: true, Err: errors.New("injected effect failure: " + what)}
	}
	switch f.fail() {
	case 1:
		return sink.Result{}, injected("refused before sending")
	case 2:
		if _, err := f.Sink.Deliver(ctx, e); err != nil {
			return sink.Result{}, err
		}
		return sink.Result{}, injected("sent, response lost")
	}
	return f.Sink.Deliver(ctx, e)
}

// waitReady waits up to 15s for a's consumer to be consuming.
func waitReady(ctx context.Context, a *app.App) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return a.WaitReady(ctx)
}

type demoMsg struct {
	subject string
	msgID   string // the provider's delivery id, as Nats-Msg-Id
	payload []byte
	kind    string
}

// buildDemo makes the workload: every intent delivered 1 to 4 times, as
// providers and pipelines really do it.
func buildDemo(rng *rand.Rand, alerts, hooks int, w *demoWorkload) []demoMsg {
	var out []demoMsg
	services := []string{"db", "api", "queue", "cache", "edge"}
	names := []string{"DiskAlmostFull", "HighLatency", "ErrorBudgetBurn", "ReplicaLag", "CertExpiring"}
	summaries := map[string][2]string{
		"DiskAlmostFull":  {"Disk %s is 93%% full", "Filesystem %s above 90%% usage"},
		"HighLatency":     {"p99 latency on %s is 2.4s", "%s responds slowly: p99 2.4s"},
		"ErrorBudgetBurn": {"%s burns its error budget 14x", "Error budget of %s burning fast"},
		"ReplicaLag":      {"Replica %s lags 40s", "%s replication delay 40 seconds"},
		"CertExpiring":    {"Certificate of %s expires in 3 days", "%s TLS cert expiry in 72h"},
	}
	t0 := time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)
	for i := range alerts {
		name := names[i%len(names)]
		inst := fmt.Sprintf("%s-%d", services[rng.IntN(len(services))], i)
		occurrences := 1
		if rng.IntN(10) == 0 {
			occurrences = 2 // it fired again later: new work
		}
		for occ := 1; occ <= occurrences; occ++ {
			w.alertKeys++
			fp := fmt.Sprintf("%016x", uint64(i)*0x9e3779b97f4a7c15)
			at := t0.Add(time.Duration(i) * time.Second)
			mk := func(delivery, wording int) []byte {
				b, _ := json.Marshal(map[string]any{
					"receiver": "oncall", "status": "firing",
					"delivery_id": fmt.Sprintf("am-%s-%d-%d", fp[:8], occ, delivery),
					"sent_at":     at.Add(time.Duration(delivery) * 7 * time.Second).Format(time.RFC3339Nano),
					"alert": map[string]any{
						"fingerprint": fp, "occurrence": occ,
						"labels":      map[string]string{"alertname": name, "instance": inst, "severity": []string{"page", "ticket"}[i%2]},
						"annotations": map[string]string{"summary": fmt.Sprintf(summaries[name][wording], inst), "runbook": "https://runbooks.example/" + strings.ToLower(name)},
						"startsAt":    at.Format(time.RFC3339),
					},
				})
				return b
			}
			first := demoMsg{"triggers.alerts", fmt.Sprintf("am-%s-%d-0", fp[:8], occ), mk(0, 0), "original"}
			out = append(out, first)
			for d := 1; d < 1+rng.IntN(4); d++ {
				switch rng.IntN(3) {
				case 0: // the provider retries the same delivery (lost response)
					out = append(out, demoMsg{first.subject, first.msgID, first.payload, "provider retry"})
				case 1: // a redelivery with a new delivery id and timestamp
					out = append(out, demoMsg{first.subject, fmt.Sprintf("am-%s-%d-%d", fp[:8], occ, d), mk(d, 0), "redelivery"})
				default: // regenerated upstream, reworded
					out = append(out, demoMsg{first.subject, fmt.Sprintf("am-%s-%d-%d", fp[:8], occ, d), mk(d, 1), "reworded duplicate"})
				}
			}
		}
	}
	for i := range hooks {
		w.hookKeys++
		mk := func(delivery int) []byte {
			b, _ := json.Marshal(map[string]any{
				"delivery_id": fmt.Sprintf("wh_%05d_%d", i, delivery),
				"sent_at":     t0.Add(time.Duration(i*10+delivery) * time.Second).Format(time.RFC3339),
				"event":       "invoice.paid",
				"invoice":     map[string]any{"id": fmt.Sprintf("in_%05d", i), "amount_cents": 1000 + 37*i, "currency": "eur"},
			})
			return b
		}
		first := demoMsg{"triggers.webhooks", fmt.Sprintf("wh_%05d_0", i), mk(0), "original"}
		out = append(out, first)
		for d := 1; d < 1+rng.IntN(3); d++ {
			if rng.IntN(2) == 0 {
				out = append(out, demoMsg{first.subject, first.msgID, first.payload, "provider retry"})
			} else {
				out = append(out, demoMsg{first.subject, fmt.Sprintf("wh_%05d_%d", i, d), mk(d), "redelivery"})
			}
		}
	}
	for i, bad := range []string{
		`{"alert": {"fingerprint": "truncated"`,
		`{"alert": {"occurrence": 1}}`,
		`{"alert": {"fingerprint": "a", "fingerprint": "b", "occurrence": 1}}`,
		strings.Repeat("[", 200) + strings.Repeat("]", 200),
		"not json at all",
	} {
		out = append(out, demoMsg{"triggers.alerts", fmt.Sprintf("bad-%d", i), []byte(bad), "malformed"})
		w.malformed++
	}
	// Interleave as real traffic does: each duplicate moves 0 to 300
	// places later than its original, so some race the first delivery and
	// most come after it is done.
	type placed struct {
		at float64
		m  demoMsg
	}
	ps := make([]placed, len(out))
	for i, m := range out {
		at := float64(i)
		if m.kind != "original" && m.kind != "malformed" {
			at += float64(rng.IntN(300))
		}
		ps[i] = placed{at, m}
	}
	slices.SortStableFunc(ps, func(a, b placed) int { return cmp.Compare(a.at, b.at) })
	for i := range ps {
		out[i] = ps[i].m
	}
	return out
}

type publisher struct {
	ctx context.Context
	js  jetstream.JetStream
	w   *demoWorkload
}

func newPublisher(ctx context.Context, js jetstream.JetStream, w *demoWorkload) *publisher {
	return &publisher{ctx, js, w}
}

func (p *publisher) send(m demoMsg) error {
	ack, err := p.js.PublishMsg(p.ctx, &nats.Msg{Subject: m.subject, Data: m.payload, Header: nats.Header{}},
		jetstream.WithMsgID(m.msgID))
	if err != nil {
		return fmt.Errorf("demo: publish: %w", err)
	}
	p.w.published++
	p.w.kinds[m.kind]++
	if ack.Duplicate {
		p.w.ingestDups++
	} else {
		p.w.inStream++
	}
	return nil
}

// sumStats adds up the pipelines' figures of runs, less those of the
// pipeline named except.
func sumStats(runs [][]consumer.PipelineStats, except string) consumer.PipelineStats {
	var t consumer.PipelineStats
	for _, run := range runs {
		for _, s := range run {
			if s.Pipeline == except {
				continue
			}
			t.Deliveries += s.Deliveries
			t.Effects += s.Effects
			t.DuplicatesWindow += s.DuplicatesWindow
			t.DuplicatesLedger += s.DuplicatesLedger
			t.DuplicatesStream += s.DuplicatesStream
			t.Held += s.Held
			t.Retries += s.Retries
			t.DeadLetters += s.DeadLetters
			t.TakenOver += s.TakenOver
			t.ModelCalls += s.ModelCalls
			t.RecordAnswers += s.RecordAnswers
			t.SavedTokens += s.SavedTokens
		}
	}
	return t
}

// countEffects reads the effects a pipeline published and returns how many
// there are and how many distinct keys they carry.
func countEffects(ctx context.Context, js jetstream.JetStream, stream, subject string) (n, distinct int, err error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, 0, err
	}
	want := int(info.State.Subjects[subject])
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return 0, 0, err
	}
	keys := map[string]bool{}
	for n < want {
		b, err := cons.Fetch(want-n, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return 0, 0, err
		}
		got := 0
		for m := range b.Messages() {
			keys[m.Headers().Get(nats.MsgIdHdr)] = true
			n++
			got++
		}
		if got == 0 {
			return 0, 0, fmt.Errorf("demo: reading %s: %w", subject, errOr(b.Error()))
		}
	}
	return n, len(keys), nil
}

func errOr(err error) error {
	if err == nil {
		return errors.New("no messages")
	}
	return err
}

func demoReport(ctx context.Context, out io.Writer, a *app.App, js jetstream.JetStream, w *demoWorkload, runs [][]consumer.PipelineStats, faults int64, took time.Duration) error {
	// The first run, and the second's final figures, of the alerts and
	// webhooks pipelines: the recipe's pipeline has its own report.
	total := sumStats([][]consumer.PipelineStats{runs[0], runs[len(runs)-1]}, demoRecipeName)
	alertN, alertDistinct, err := countEffects(ctx, js, a.Config.Stream.Name+"_EFFECTS", "effects.alerts")
	if err != nil {
		return err
	}
	hookN, hookDistinct, err := countEffects(ctx, js, a.Config.Stream.Name+"_EFFECTS", "effects.webhooks")
	if err != nil {
		return err
	}
	unique := w.alertKeys + w.hookKeys
	effects := alertN + hookN
	dupEffects := effects - alertDistinct - hookDistinct
	var llm llmhook.StepStats
	for _, s := range llmhook.Stats(a.Cache) {
		llm.Hits += s.Hits
		llm.Shared += s.Shared
		llm.Misses += s.Misses
		llm.Errors += s.Errors
		llm.PromptTokens += s.PromptTokens
		llm.CompletionTokens += s.CompletionTokens
		llm.SavedPromptTokens += s.SavedPromptTokens
		llm.SavedCompletionTokens += s.SavedCompletionTokens
		llm.CostSpent += s.CostSpent
		llm.CostSaved += s.CostSaved
	}
	model := a.Standin.Stats()

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\n== Oncegate demo report (%.1fs) ==\n", took.Seconds())
	redriven := w.redrive.redriven()
	suppressed := int64(w.ingestDups) + total.DuplicatesWindow + total.DuplicatesLedger
	// Every trigger that came in, and every one a redrive republished, is
	// one of three: the one that did its intent's work, a duplicate
	// suppressed, or a dead letter.
	in := w.published + w.viaIngress
	adds := "OK"
	if int64(in+redriven) != int64(unique)+suppressed+total.DeadLetters {
		adds = "MISMATCH"
	}
	fmt.Fprintf(tw, "triggers in\t%d\t(the rows below add up: %d + %d redriven = %d unique intents + %d duplicates suppressed + %d dead letters: %s)\n",
		in, in, redriven, unique, suppressed, total.DeadLetters, adds)
	fmt.Fprintf(tw, "  published to NATS\t%d\t(%d originals, %d provider retries, %d redeliveries, %d reworded duplicates, %d malformed)\n",
		w.published, w.kinds["original"], w.kinds["provider retry"], w.kinds["redelivery"], w.kinds["reworded duplicate"], w.kinds["malformed"])
	if t := w.ingress; t.requests > 0 {
		fmt.Fprintf(tw, "  through the webhook ingress\t%d\t(%d requests: %d GitHub pushes, %d Alertmanager groups of 2 alerts, %d Stripe events, %d ping with no trigger; %d provider retries; each answered 200 after its PubAck)\n",
			w.viaIngress, t.requests, t.github, t.groups, t.stripe, t.pings, t.retries)
	}
	fmt.Fprintf(tw, "unique intents\t%d\t(%d alerts to triage, %d webhooks to forward)\n", unique, w.alertKeys, w.hookKeys)
	// The three trigger guards add up to the total; the effect stream's
	// count is of effects, not triggers, and stands apart.
	fmt.Fprintf(tw, "duplicate triggers suppressed\t%d\t(the sum of the three rows below)\n", suppressed)
	fmt.Fprintf(tw, "  by the trigger stream (Nats-Msg-Id)\t%d\t(dropped at publish: never delivered)\n", w.ingestDups)
	fmt.Fprintf(tw, "  by the in-memory window\t%d\t(delivered, acked as duplicates)\n", total.DuplicatesWindow)
	fmt.Fprintf(tw, "  by the durable ledger\t%d\t(delivered, found committed or held: the window was emptied by the restart, or the duplicate raced the first)\n", total.DuplicatesLedger)
	fmt.Fprintf(tw, "effects re-sent, dropped by the sink\t%d\t(an effect sent again after its commit failed or a crash; the effect stream's Nats-Msg-Id window kept one)\n", total.DuplicatesStream)
	check := "OK"
	if effects != unique || dupEffects != 0 {
		check = "MISMATCH"
	}
	fmt.Fprintf(tw, "effects performed\t%d\t(%d triages, %d forwarded webhooks) — equals unique intents: %s\n", effects, alertN, hookN, check)
	fmt.Fprintf(tw, "duplicate effects\t%d\t(distinct keys in the effect stream: %d)\n", dupEffects, alertDistinct+hookDistinct)
	fmt.Fprintf(tw, "dead letters\t%d\t(malformed published: %d, refused by the receiver bug: %d; see consumer dead)\n", total.DeadLetters, w.malformed, w.redrive.deadLetters())
	redriveErr := w.redrive.report(tw)
	fmt.Fprintf(tw, "faults worked through\t\t%d model errors, %d rate limits, %d effect failures, 1 consumer restart (%d retried deliveries)\n",
		model.ServerErrors, model.RateLimited, faults, total.Retries)
	fmt.Fprintf(tw, "model calls made\t%d\t(answered %d; the rest failed and were retried)\n", model.Requests, model.Completions)
	fmt.Fprintf(tw, "model calls avoided\t%d\t(%d answers kept in their intents' ledger records, %d cache hits, %d shared in flight)\n",
		total.RecordAnswers+llm.Hits+llm.Shared, total.RecordAnswers, llm.Hits, llm.Shared)
	fmt.Fprintf(tw, "tokens spent\t%d\t($%.6f)\n", llm.PromptTokens+llm.CompletionTokens, llm.CostSpent)
	fmt.Fprintf(tw, "tokens saved\t%d\t(%d by answers kept in records; $%.6f by the cache's, at the configured gpt-4o-mini price)\n",
		total.SavedTokens+llm.SavedPromptTokens+llm.SavedCompletionTokens, total.SavedTokens, llm.CostSaved)
	tw.Flush()
	fmt.Fprintf(out, "answers come from the offline stand-in model (%q); set llm.base_url to use a real one.\n", standin.Label)
	if check != "OK" || total.DeadLetters != int64(w.malformed+w.redrive.deadLetters()) {
		return fmt.Errorf("demo: effects %d for %d unique intents, %d duplicate effects, %d dead letters for %d malformed and %d refused", effects, unique, dupEffects, total.DeadLetters, w.malformed, w.redrive.deadLetters())
	}
	if adds != "OK" {
		return fmt.Errorf("demo: %d triggers in and %d redriven, against %d unique intents, %d duplicates suppressed and %d dead letters", in, redriven, unique, suppressed, total.DeadLetters)
	}
	if redriveErr != nil {
		return redriveErr
	}
	return nil
}
