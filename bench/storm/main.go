// Command storm publishes an alert storm to Oncegate and reports how the
// model step copes with a provider's rate limit.
//
// Each run starts the consumer in this process as cmd/consumer does
// (app.Start: embedded NATS on loopback, the Badger ledger and LLM cache in
// a temporary directory), with the built-in alerts pipeline, whose model
// step goes to the offline stand-in model limited to N requests in any
// sliding minute (-rpm, -window): past it the stand-in answers 429 with a
// Retry-After, as a provider does. It publishes -triggers distinct alerts as
// fast as JetStream takes them, waits until every trigger is settled, and
// reports: model calls answered against intents, 429s as a share of the
// calls, dead letters, effects per intent read back from the effect stream,
// the elapsed time against the ideal (intents / N), and the time model calls
// waited on Oncegate's limiter.
//
// Two runs, each on a fresh process and a fresh stand-in:
//
//   - before: no llm.rate_limit. The storm meets the stand-in's 429s; the
//     consumer retries each failed trigger with its backoff until
//     max_deliver, and dead-letters what is still refused.
//   - paced: llm.rate_limit.requests_per_minute at -limit-ratio × N. Calls
//     wait for room before they go out; the storm becomes a steady stream.
//
// The paced run fails the command (exit 1) unless model calls answered =
// intents, 429s ≤ -max-429 % of calls, no dead letter, and exactly one
// effect per intent.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/procstat"
	"github.com/oncegate/oncegate/internal/standin"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(1)
	}
}

type options struct {
	triggers    int
	rpm         int
	window      time.Duration
	ratio       float64
	latency     time.Duration
	concurrency int
	timeout     time.Duration
	max429      float64
	ackWait     time.Duration
	lease       time.Duration
	maxPending  int
	memprofile  string
	memAt       time.Duration
	log         *slog.Logger
}

func run() error {
	var (
		triggers    = flag.Int("triggers", 10_000, "distinct alerts to publish")
		rpm         = flag.Int("rpm", 6000, "the stand-in model's limit N: requests in any sliding -window, scaled to a minute")
		window      = flag.Duration("window", time.Minute, "the stand-in's sliding window (the limit in it is N × window / 1m)")
		ratio       = flag.Float64("limit-ratio", 0.98, "paced run: llm.rate_limit.requests_per_minute as a share of N")
		runs        = flag.String("runs", "before,paced", "comma-separated runs: before (no llm.rate_limit), paced, calls (the model calls alone from a plain go-openai loop, no Oncegate: the baseline for time, CPU and memory per call in flight)")
		latency     = flag.Duration("latency", 20*time.Millisecond, "the stand-in's latency per answer")
		concurrency = flag.Int("concurrency", 0, "the pipeline's concurrency (0: the configuration's default)")
		timeout     = flag.Duration("timeout", 10*time.Minute, "give up on a run not settled by then")
		max429      = flag.Float64("max-429", 1, "paced run: the most 429s allowed, in % of model calls")
		ackWait     = flag.Duration("ack-wait", 0, "the pipeline's ack_wait (0: the default); shorter than the wait for the limit shows that waiting triggers are kept in progress, not redelivered")
		lease       = flag.Duration("lease", 0, "ledger.lease (0: the default)")
		maxPending  = flag.Int("max-ack-pending", 0, "the pipeline's max_ack_pending (0: the default, or -concurrency if larger); the consumer prefetches up to twice its concurrency within it, and a prefetched trigger waits for a worker without being kept in progress")
		verbose     = flag.Bool("v", false, "log the consumer's warnings")
		cpuprofile  = flag.String("cpuprofile", "", "write a CPU profile of the whole command to this file (with -compare, one per run: the run's name and round appended)")
		memprofile  = flag.String("memprofile", "", "write a heap profile of each run, taken -memprofile-at after the storm starts, to this file with the run's name appended (with -compare, the round before it)")
		memAt       = flag.Duration("memprofile-at", 3*time.Second, "when -memprofile takes its profile")
		compare     = flag.Int("compare", 0, "run the plain loop (calls) and Oncegate (before) N times each, alternating, each run in a process of its own (memory figures are per process), and print the medians and Oncegate's ratios to the loop; -runs is ignored")
	)
	flag.Parse()
	if *compare > 0 {
		return compareRuns(*compare)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	o := options{triggers: *triggers, rpm: *rpm, window: *window, ratio: *ratio, latency: *latency,
		concurrency: *concurrency, timeout: *timeout, max429: *max429, ackWait: *ackWait, lease: *lease, maxPending: *maxPending,
		memprofile: *memprofile, memAt: *memAt}
	switch {
	case o.triggers <= 0 || o.rpm <= 0 || o.window <= 0 || o.timeout <= 0:
		return errors.New("-triggers, -rpm, -window and -timeout must be positive")
	case o.ratio <= 0 || o.ratio > 2:
		return errors.New("-limit-ratio must be in (0, 2]")
	}
	level := slog.LevelError + 1
	if *verbose {
		level = slog.LevelWarn
	}
	o.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Printf("storm: %d distinct alerts, published as fast as JetStream takes them, to the alerts pipeline (model step, concurrency %s)\n",
		o.triggers, concurrencyText(o.concurrency))
	fmt.Printf("model: the offline stand-in, latency %v, limited to %d requests/min (%d in any sliding %v), 429 with Retry-After past it\n",
		o.latency, o.rpm, perWindow(o.rpm, o.window), o.window)
	if o.ackWait > 0 || o.lease > 0 {
		fmt.Printf("ack_wait %v, ledger lease %v (0: the default)\n", o.ackWait, o.lease)
	}
	fmt.Printf("ideal: %d calls at %d/min = %v\n\n", o.triggers, o.rpm, ideal(o.triggers, float64(o.rpm)).Round(100*time.Millisecond))

	var results []result
	failed := false
	for _, name := range strings.Split(*runs, ",") {
		name = strings.TrimSpace(name)
		if name != "before" && name != "paced" && name != "calls" {
			return fmt.Errorf("-runs: unknown run %q (want before, paced, calls)", name)
		}
		run := o.run
		if name == "calls" {
			run = o.calls
		}
		r, err := run(ctx, name)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		results = append(results, r)
		if name == "paced" {
			if problems := r.check(o); len(problems) > 0 {
				failed = true
				fmt.Printf("paced run FAILED: %s\n", strings.Join(problems, "; "))
			}
		}
	}
	if path := os.Getenv(childResultEnv); path != "" && len(results) == 1 {
		if err := writeChildResult(path, results[0]); err != nil {
			return err
		}
	}
	report(results, o)
	if failed {
		return errors.New("the paced run missed its goal")
	}
	return nil
}

func perWindow(rpm int, w time.Duration) int {
	return max(1, int(int64(rpm)*int64(w)/int64(time.Minute)))
}

func ideal(n int, perMinute float64) time.Duration {
	return time.Duration(float64(n) / perMinute * float64(time.Minute))
}

func concurrencyText(c int) string {
	if c == 0 {
		return fmt.Sprintf("%d, the default", config.DefaultConcurrency)
	}
	return fmt.Sprint(c)
}

type result struct {
	name      string
	limit     float64 // llm.rate_limit.requests_per_minute; 0: off
	intents   int
	elapsed   time.Duration
	model     standin.Stats
	pipe      consumer.PipelineStats
	effects   int // in the effect stream
	distinct  int // distinct intent keys among them
	waited    time.Duration
	maxWait   time.Duration
	sent      int64 // calls the limiter let through
	retried   int64 // 429s the limiter waited out and retried
	gaveUp    int64
	factor    float64
	published time.Duration
	cpuPer    float64 // CPU µs per trigger (per call for calls), the whole process
	rssPer    float64 // KiB more RSS per trigger in flight at the peak; 0: not measured
	// over counts the calls that waited longer than each bound, by the
	// bucket bound in seconds of oncegate_llm_rate_limit_wait_seconds.
	over map[float64]uint64
}

func (r result) calls() int64 { return r.model.Completions + r.model.OverLimit + r.model.RateLimited }

func (r result) share429() float64 {
	if r.calls() == 0 {
		return 0
	}
	return 100 * float64(r.model.OverLimit+r.model.RateLimited) / float64(r.calls())
}

// check returns what the run missed of the goal.
func (r result) check(o options) []string {
	var p []string
	if r.model.Completions != int64(r.intents) {
		p = append(p, fmt.Sprintf("%d model calls answered for %d intents", r.model.Completions, r.intents))
	}
	if r.share429() > o.max429 {
		p = append(p, fmt.Sprintf("429s are %.2f%% of calls (at most %.2f%%)", r.share429(), o.max429))
	}
	if r.pipe.DeadLetters != 0 {
		p = append(p, fmt.Sprintf("%d dead letters", r.pipe.DeadLetters))
	}
	if r.effects != r.intents || r.distinct != r.intents {
		p = append(p, fmt.Sprintf("%d effects for %d distinct keys, %d intents", r.effects, r.distinct, r.intents))
	}
	return p
}

func (o options) config(dir, name string) (*config.Config, float64, error) {
	cfg := config.Default()
	cfg.DataDir = dir
	cfg.NATS.URL = ""
	cfg.NATS.Embedded.Listen = "127.0.0.1:0"
	cfg.NATS.Embedded.StoreDir = filepath.Join(dir, "nats")
	cfg.Metrics.Listen = ""
	cfg.LLM.BaseURL, cfg.LLM.Standin = "", true // the step on the stand-in model, asked for by name
	cfg.Ingress.Listen = ""
	var pipes []config.Pipeline
	for _, p := range cfg.Pipelines {
		if p.Name == "alerts" {
			if o.concurrency > 0 {
				p.Concurrency = o.concurrency
				p.MaxAckPending = max(p.MaxAckPending, o.concurrency)
			}
			if o.maxPending > 0 {
				p.MaxAckPending = o.maxPending
			}
			if o.ackWait > 0 {
				p.AckWait = o.ackWait
			}
			pipes = append(pipes, p)
		}
	}
	if len(pipes) != 1 {
		return nil, 0, errors.New("the built-in configuration has no alerts pipeline")
	}
	cfg.Pipelines = pipes
	if o.lease > 0 {
		cfg.Ledger.Lease = o.lease
	}
	var limit float64
	if name == "paced" {
		limit = o.ratio * float64(o.rpm)
		cfg.LLM.RateLimit.RequestsPerMinute = limit
	}
	if err := cfg.Validate(); err != nil {
		return nil, 0, err
	}
	return cfg, limit, nil
}

func (o options) run(ctx context.Context, name string) (result, error) {
	dir, err := os.MkdirTemp("", "oncegate-storm-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	cfg, limit, err := o.config(dir, name)
	if err != nil {
		return result{}, err
	}
	a, err := app.Start(ctx, cfg, app.Options{
		Logger: o.log,
		Standin: standin.Options{
			Latency: o.latency, RequestsPerMinute: o.rpm, LimitWindow: o.window,
		},
	})
	if err != nil {
		return result{}, err
	}
	defer a.Close()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	defer func() {
		cancel()
		<-done
	}()
	if err := waitReady(ctx, a); err != nil {
		return result{}, err
	}

	nc, err := nats.Connect(a.Embedded.ClientURL(), nats.Name("oncegate-storm-publisher"))
	if err != nil {
		return result{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return result{}, err
	}

	limitText := "off"
	if limit > 0 {
		limitText = fmt.Sprintf("%.0f/min", limit)
	}
	fmt.Printf("run %s: llm.rate_limit.requests_per_minute %s\n", name, limitText)
	rssBefore, peak := procstat.RSS(), uint64(0)
	memBefore := readMem()
	var memPeak memSample
	start, cpu0 := time.Now(), procstat.CPU()
	if err := publish(ctx, js, o.triggers); err != nil {
		return result{}, err
	}
	published := time.Since(start)
	fmt.Printf("  published %d alerts in %v\n", o.triggers, published.Round(time.Millisecond))

	deadline := start.Add(o.timeout)
	nextLog := start.Add(10 * time.Second)
	profiled := o.memprofile == ""
	for {
		peak = max(peak, procstat.RSS())
		memPeak = memPeak.max(readMem())
		if !profiled && time.Since(start) >= o.memAt {
			profiled = true
			if g, err := os.Create(o.memprofile + "-" + name + ".goroutines"); err == nil {
				_ = pprof.Lookup("goroutine").WriteTo(g, 1)
				g.Close()
			}
			if err := writeHeapProfile(o.memprofile + "-" + name); err != nil {
				return result{}, err
			}
		}
		left, err := a.Outstanding(ctx)
		if err != nil {
			return result{}, err
		}
		if left == 0 {
			break
		}
		now := time.Now()
		if now.After(deadline) {
			return result{}, fmt.Errorf("%d triggers still unsettled after %v", left, o.timeout)
		}
		if now.After(nextLog) {
			st := a.Standin.Stats()
			fmt.Printf("  %5.0fs: %d unsettled; model answered %d, 429s %d\n", now.Sub(start).Seconds(), left,
				st.Completions, st.OverLimit+st.RateLimited)
			nextLog = nextLog.Add(10 * time.Second)
		}
		select {
		case <-ctx.Done():
			return result{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	r := result{name: name, limit: limit, intents: o.triggers, elapsed: time.Since(start), published: published}
	r.model = a.Standin.Stats()
	for _, s := range a.Consumer.Stats() {
		r.pipe = s
	}
	if r.effects, r.distinct, err = countEffects(ctx, js, cfg.Stream.Name+"_EFFECTS", "effects.alerts"); err != nil {
		return result{}, err
	}
	if a.RateLimit != nil {
		s := a.RateLimit.Stats()
		r.waited, r.maxWait, r.sent, r.retried, r.gaveUp, r.factor = s.Waited, s.MaxWait, s.Sent, s.Limited, s.GaveUp, s.Factor
		if r.over, err = waitsOver(a); err != nil {
			return result{}, err
		}
	}
	cpu := procstat.CPU() - cpu0
	r.cpuPer = float64(cpu.Microseconds()) / float64(o.triggers)
	fmt.Printf("  settled in %v; CPU %v (user+system, the whole process), %.0f µs per trigger\n", r.elapsed.Round(time.Millisecond),
		cpu.Round(time.Millisecond), r.cpuPer)
	c := o.concurrency
	if c == 0 {
		c = cfg.Pipelines[0].Concurrency
	}
	r.rssPer = memoryLines(rssBefore, peak, memBefore, memPeak, c, "the NATS server, the stand-in and the consumer share this process")
	return r, nil
}

// memoryLines prints what memory grew by, per call or trigger in flight,
// and returns the RSS growth in KiB per call or trigger in flight (0 when
// it could not be read).
func memoryLines(rssBefore, peak uint64, memBefore, memPeak memSample, c int, who string) float64 {
	if rssBefore == 0 || peak <= rssBefore {
		return 0
	}
	fmt.Printf("  memory: RSS %d MiB before the storm, %d MiB at its peak: %.1f KiB more per trigger in flight (%d in flight at most; %s)\n",
		rssBefore>>20, peak>>20, float64(peak-rssBefore)/1024/float64(c), c, who)
	if c < 1000 {
		fmt.Println("  (with few triggers in flight the growth is mostly what the storm stores: triggers, answers, records; run -concurrency 4096 -latency 1s for the in-flight figure)")
	}
	per := func(after, before uint64) float64 { return float64(int64(after)-int64(before)) / 1024 / float64(c) }
	fmt.Printf("  of which, per trigger in flight at the peaks: goroutine stacks %.1f KiB (%.1f goroutines each), live heap %.1f KiB (as of the last GC cycle, without the garbage the heap holds until the next)\n",
		per(memPeak.stacks, memBefore.stacks), float64(int64(memPeak.goroutines)-int64(memBefore.goroutines))/float64(c), per(memPeak.live, memBefore.live))
	return float64(peak-rssBefore) / 1024 / float64(c)
}

// calls is the baseline run: the triggers' model calls made by a plain
// go-openai loop (as many goroutines as the pipeline's concurrency, each
// calling CreateChatCompletion in turn) against the same stand-in, with
// no NATS, ledger or cache; the client speaks to it as app.Start's does.
func (o options) calls(ctx context.Context, name string) (result, error) {
	s, err := standin.New(standin.Options{Latency: o.latency, RequestsPerMinute: o.rpm, LimitWindow: o.window})
	if err != nil {
		return result{}, err
	}
	url, stop, err := s.Start("127.0.0.1:0")
	if err != nil {
		return result{}, err
	}
	defer stop()
	client, closeIdle := standin.Client(url)
	defer closeIdle()
	def := config.Default()
	step := def.Pipelines[0].Step
	c := o.concurrency
	if c == 0 {
		c = def.Pipelines[0].Concurrency
	}
	fmt.Printf("run %s: a plain go-openai loop, %d goroutines\n", name, c)

	rssBefore, peak := procstat.RSS(), uint64(0)
	memBefore := readMem()
	var memPeak memSample
	start, cpu0 := time.Now(), procstat.CPU()
	var next atomic.Int64
	var failed atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for range c {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(o.triggers) || ctx.Err() != nil {
						return
					}
					_, err := client.CreateChatCompletion(ctx, openai.ChatCompletionRequest{
						Model: def.LLM.Model, Temperature: float32(step.Temperature), MaxTokens: step.MaxTokens,
						Messages: []openai.ChatCompletionMessage{
							{Role: openai.ChatMessageRoleSystem, Content: step.System},
							{Role: openai.ChatMessageRoleUser, Content: string(alert(int(i)))},
						},
					})
					if err != nil {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
	}()
	for waiting := true; waiting; {
		peak = max(peak, procstat.RSS())
		memPeak = memPeak.max(readMem())
		select {
		case <-done:
			waiting = false
		case <-time.After(50 * time.Millisecond):
		}
	}
	r := result{name: name, intents: o.triggers, elapsed: time.Since(start), model: s.Stats()}
	cpu := procstat.CPU() - cpu0
	r.cpuPer = float64(cpu.Microseconds()) / float64(o.triggers)
	fmt.Printf("  done in %v (%.0f calls/s); CPU %v (user+system, the whole process), %.0f µs per call; %d calls failed\n",
		r.elapsed.Round(time.Millisecond), float64(o.triggers)/r.elapsed.Seconds(), cpu.Round(time.Millisecond),
		r.cpuPer, failed.Load())
	r.rssPer = memoryLines(rssBefore, peak, memBefore, memPeak, c, "the stand-in and the loop share this process")
	return r, nil
}

// memSample is what the Go runtime says of the process's memory.
type memSample struct {
	stacks     uint64 // bytes of goroutine stacks
	live       uint64 // bytes of heap objects live at the last GC cycle
	goroutines uint64
}

func (m memSample) max(o memSample) memSample {
	return memSample{max(m.stacks, o.stacks), max(m.live, o.live), max(m.goroutines, o.goroutines)}
}

func readMem() memSample {
	ss := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}, {Name: "/gc/heap/live:bytes"}, {Name: "/sched/goroutines:goroutines"}}
	metrics.Read(ss)
	var m memSample
	for i, p := range []*uint64{&m.stacks, &m.live, &m.goroutines} {
		if ss[i].Value.Kind() == metrics.KindUint64 {
			*p = ss[i].Value.Uint64()
		}
	}
	return m
}

// writeHeapProfile writes the heap profile to path, after a collection,
// so that it shows what is live.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// waitsOver reads the wait histogram the app's metrics expose and returns,
// for each bucket bound, the calls that waited longer.
func waitsOver(a *app.App) (map[float64]uint64, error) {
	fams, err := a.Metrics.Registry().Gather()
	if err != nil {
		return nil, err
	}
	over := map[float64]uint64{}
	for _, f := range fams {
		if f.GetName() != "oncegate_llm_rate_limit_wait_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			for _, b := range h.GetBucket() {
				over[b.GetUpperBound()] += h.GetSampleCount() - b.GetCumulativeCount()
			}
		}
	}
	return over, nil
}

// publish sends n distinct alerts, each with its delivery id as
// Nats-Msg-Id, without waiting for each PubAck, and then waits for all.
func publish(ctx context.Context, js jetstream.JetStream, n int) error {
	for i := range n {
		body := alert(i)
		for {
			_, err := js.PublishMsgAsync(&nats.Msg{Subject: "triggers.alerts", Data: body},
				jetstream.WithMsgID(fmt.Sprintf("storm-%d", i)))
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				return fmt.Errorf("publish: %w", err)
			}
			// Too many PubAcks outstanding: let them come in, then go on.
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Minute):
		return errors.New("publish: no PubAck for a minute")
	}
	return nil
}

// alert is the storm's i-th alert, distinct from every other.
func alert(i int) []byte {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	names := []string{"HighLatency", "DiskFull", "PodCrashLooping", "ErrorRateHigh"}
	fp := fmt.Sprintf("%016x", uint64(i+1)*0x9e3779b97f4a7c15)
	name := names[i%len(names)]
	inst := fmt.Sprintf("node-%03d", i%977)
	return fmt.Appendf(nil, `{"receiver":"oncall","status":"firing","delivery_id":"storm-%d","alert":{"fingerprint":%q,"occurrence":1,`+
		`"labels":{"alertname":%q,"instance":%q,"severity":"page"},"annotations":{"summary":"%s on %s","runbook":"https://runbooks.example/%s"},"startsAt":%q}}`,
		i, fp, name, inst, name, inst, strings.ToLower(name), at.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano))
}

// waitReady waits up to 30s for a's consumer to be consuming.
func waitReady(ctx context.Context, a *app.App) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return a.WaitReady(ctx)
}

// countEffects reads the effects published on subject and returns how many
// there are and how many distinct keys (Nats-Msg-Id) they carry.
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
	if want == 0 {
		return 0, 0, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return 0, 0, err
	}
	keys := map[string]bool{}
	for n < want {
		b, err := cons.Fetch(min(want-n, 1000), jetstream.FetchMaxWait(2*time.Second))
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
			return 0, 0, fmt.Errorf("reading %s: no messages (%w)", subject, b.Error())
		}
	}
	return n, len(keys), nil
}

func report(rs []result, o options) {
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "run\tOncegate limit/min\tintents\tanswered\tmodel calls\t429s\t429 % of calls\tdead letters\teffects\tper intent\tre-sent\tdeliveries\tnaks\telapsed\tvs ideal\t")
	for _, r := range rs {
		limit := "off"
		if r.limit > 0 {
			limit = fmt.Sprintf("%.0f", r.limit)
		}
		per := "-"
		if r.distinct > 0 {
			per = fmt.Sprintf("%.3f", float64(r.effects)/float64(r.distinct))
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%.2f\t%d\t%d\t%s\t%d\t%d\t%d\t%.1fs\t%.2f×\t\n",
			r.name, limit, r.intents, r.model.Completions, r.calls(), r.model.OverLimit+r.model.RateLimited, r.share429(),
			r.pipe.DeadLetters, r.effects, per, r.pipe.DuplicatesStream, r.pipe.Deliveries, r.pipe.Retries,
			r.elapsed.Seconds(), r.elapsed.Seconds()/ideal(r.intents, float64(o.rpm)).Seconds())
	}
	w.Flush()
	fmt.Println()
	for _, r := range rs {
		if r.limit == 0 {
			continue
		}
		mean := time.Duration(0)
		if r.sent > 0 {
			mean = r.waited / time.Duration(r.sent)
		}
		fmt.Printf("%s: model calls waited on Oncegate's limiter %v in all, %v per call on average, %v at most; "+
			"%d 429s waited out and retried, %d calls gave up; rate factor at the end %.3g; ideal at the configured limit %v\n",
			r.name, r.waited.Round(time.Millisecond), mean.Round(time.Millisecond), r.maxWait.Round(time.Millisecond),
			r.retried, r.gaveUp, r.factor, ideal(r.intents, r.limit).Round(100*time.Millisecond))
		fmt.Printf("%s: calls that waited over 0.1s %d, over 1s %d, over 5s %d, over 10s %d (oncegate_llm_rate_limit_wait_seconds)\n",
			r.name, r.over[0.1], r.over[1], r.over[5], r.over[10])
	}
	fmt.Println("\nanswered: chat completions the stand-in answered 200; model calls: every chat completion request it received;")
	fmt.Println("effects: effects in the effect stream, per intent: effects per distinct intent key; re-sent: effects the stream")
	fmt.Println("dropped as duplicates (Nats-Msg-Id); deliveries: JetStream deliveries, redeliveries included; naks: retries after a")
	fmt.Println("failed delivery; vs ideal: elapsed / (intents / the stand-in's limit). The machine is shared: elapsed times are noisy.")
}
