// Command e2e measures end-to-end triggers per second on one embedded NATS
// server: triggers are published into a stream first, then a consumer takes
// them all and the clock runs until the server reports every one acked.
//
// Side by side, in the same run and on the same server:
//
//   - raw: the loop a user would write instead of Oncegate. A durable pull
//     consumer (Consume), each message published to an effect subject with
//     Nats-Msg-Id set to the trigger's stream sequence (async publish,
//     PubAck futures, a window as wide as MaxAckPending), and the trigger
//     acked once its PubAck arrives. It dedupes nothing: every trigger
//     becomes an effect. It is the bar.
//   - gate-window: an Oncegate pipeline with the in-memory window only.
//   - gate-ledger: the window in front of the durable Badger ledger
//     (claim and commit fsynced unless -sync=false).
//   - full: the whole flow with the model step (the offline stand-in model
//     through the LLM cache), at 0% duplicates.
//   - calls: the model calls alone, the floor under full: as many
//     go-openai CreateChatCompletion calls as full makes, from as many
//     goroutines as the pipeline's concurrency, to a stand-in of its own
//     over loopback HTTP, with the prompt the step renders; no NATS, no
//     ledger, no cache. full cannot run faster than this.
//
// The gate cells, full and calls run in -reps rounds (3 by default), each
// round between two raw cells; a cell's ratio is to the mean of the raw
// cells either side of it, and the table gives the median over the rounds
// with their range. On a noisy 2-core machine one round's ratio can be off
// by a tenth either way.
//
// Beside full against calls, the report splits full's CPU per trigger into
// the call (calls), the gate without a model step (gate-ledger at 0%, when
// it ran with its fsyncs, as full always does) and the rest, the model
// step's own work, and says what that work may cost for full to reach 0.6×
// the calls' rate.
//
// The clock starts when the consumer starts (for Oncegate, Run, which
// checks the streams and the durable consumer again first) and stops when
// the server reports nothing pending and nothing awaiting an ack. The
// triggers are about 330 bytes of alert JSON; a duplicate repeats an
// earlier intent's key fields (fingerprint, occurrence) and content with a
// new delivery id and time. The effect stream's message count is checked
// against the number of distinct intents (raw: every trigger).
//
// Each Oncegate cell is a fresh app.Start (its own data directory, ledger,
// windows, stream, effect stream and durable consumer) joined to the one
// server, configured from config.Default() with a single pipeline of the
// mode under test. With -sync=false the gate cells are wired by hand the
// way app.Start wires them, except that the ledger skips its fsyncs (app
// has no switch for that); the full cell always goes through app.Start.
//
//	go run -C bench ./e2e                  # 50,000 triggers per cell (full: 5,000), 3 rounds: ~2 minutes
//	go run -C bench ./e2e -n 2000 -reps 1  # quick (CI)
//	go run -C bench ./e2e -only raw,gate-ledger -dup 0 -cpuprofile /tmp/e2e
//	go run -C bench ./e2e -only gate-ledger,full,calls -dup 0 -n 20000 -full-n 20000  # where full's CPU goes
//	go run -C bench ./e2e -sync=false -concurrency 256
//
// Everything lives in a temporary directory removed at exit (also on
// Ctrl-C). Nothing is written elsewhere, except the CPU profiles asked for.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/natsrun"
	"github.com/oncegate/oncegate/internal/ops"
	"github.com/oncegate/oncegate/internal/procstat"
)

// Modes, as -only names them.
const (
	modeRaw        = "raw"
	modeGateWindow = config.ModeGateWindow
	modeGateLedger = config.ModeGateLedger
	modeFull       = config.ModeFull
	modeCalls      = "calls"
)

// Targets of the verdict, as fractions of raw.
const (
	targetLedgerUnique = 0.70 // gate-ledger, 0% duplicates
	targetDuplicates   = 1.40 // gate pipelines, the highest -dup
	targetWindow       = 0.85 // gate-window, 0% duplicates
)

// stuckAfter is how long a cell may make no progress before it fails.
const stuckAfter = 60 * time.Second

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
}

type options struct {
	n           int
	fullN       int
	dups        []int
	concurrency int
	sync        bool
	rawBatch    int
	retention   string
	cpuprofile  string
	reps        int
	log         *slog.Logger
}

func run() error {
	var (
		n           = flag.Int("n", 50_000, "triggers per cell")
		fullN       = flag.Int("full-n", 5000, "triggers in the full cell, at most -n (the model step makes it slow)")
		dupList     = flag.String("dup", "0,30,90", "comma-separated duplicate percentages for the gate cells")
		only        = flag.String("only", "", "comma-separated subset of: raw, gate-window, gate-ledger, full, calls")
		concurrency = flag.Int("concurrency", 0, "pipeline concurrency (0: the configuration's default)")
		syncLedger  = flag.Bool("sync", true, "fsync the ledger's claims and commits (the durable figure)")
		rawBatch    = flag.Int("raw-batch", 0, "raw: PullMaxMessages (0: half of MaxAckPending)")
		retention   = flag.String("retention", "", "Oncegate's trigger stream retention: workqueue or limits (with a 1h max age); empty: the configuration's default (the raw loop's stream keeps everything, as before)")
		cpuprofile  = flag.String("cpuprofile", "", "write a CPU profile of each cell's timed phase to PREFIX-c<cell>-<mode>-<dup>.pprof")
		reps        = flag.Int("reps", 3, "rounds of the gate cells, full and calls, each round between two raw cells; the table gives medians")
		verbose     = flag.Bool("v", false, "log the server's and the consumer's warnings")
	)
	flag.Parse()
	o := options{n: *n, fullN: min(*n, *fullN), concurrency: *concurrency, sync: *syncLedger, rawBatch: *rawBatch, retention: *retention, cpuprofile: *cpuprofile, reps: *reps}
	if o.n <= 0 || o.fullN <= 0 || o.reps <= 0 {
		return fmt.Errorf("-n, -full-n and -reps must be positive")
	}
	for _, s := range strings.Split(*dupList, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || d < 0 || d > 99 {
			return fmt.Errorf("-dup: %q is not a percentage from 0 to 99", s)
		}
		o.dups = append(o.dups, d)
	}
	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		switch s = strings.TrimSpace(s); s {
		case "":
		case modeRaw, modeGateWindow, modeGateLedger, modeFull, modeCalls:
			want[s] = true
		default:
			return fmt.Errorf("-only: unknown mode %q (want raw, gate-window, gate-ledger, full, calls)", s)
		}
	}
	selected := func(m string) bool { return len(want) == 0 || want[m] }
	level := slog.LevelError + 1
	if *verbose {
		level = slog.LevelWarn
	}
	o.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tmp, err := os.MkdirTemp("", "oncegate-bench-e2e-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	srv, err := natsrun.StartEmbedded(tmp, natsrun.Options{Listen: "127.0.0.1:0", StoreDir: filepath.Join(tmp, "nats"), Logger: o.log.With("component", "nats-server")})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	b := &bench{o: o, tmp: tmp, url: srv.ClientURL()}
	if err := b.connect(ctx); err != nil {
		return err
	}
	defer b.nc.Close()

	// The plan: -reps rounds of the gate cells, full and calls, each round
	// between two raw cells. A gate cell's ratio is to the mean of the raw
	// cells either side of it, so that the drift of a noisy machine over a
	// run cancels out; the table gives the median of the rounds. A short unreported raw cell warms the server up.
	type plan struct {
		mode string
		dup  int
		rep  int
	}
	var cells []plan
	if selected(modeRaw) {
		cells = append(cells, plan{modeRaw, 0, 0})
	}
	for rep := range o.reps {
		for _, d := range o.dups {
			for _, m := range []string{modeGateWindow, modeGateLedger} {
				if selected(m) {
					cells = append(cells, plan{m, d, rep})
				}
			}
		}
		if selected(modeFull) {
			cells = append(cells, plan{modeFull, 0, rep})
		}
		if selected(modeCalls) {
			cells = append(cells, plan{modeCalls, 0, rep})
		}
		if selected(modeRaw) {
			cells = append(cells, plan{modeRaw, 0, rep + 1})
		}
	}
	if _, err := b.cell(ctx, modeRaw, 0, min(o.n, 5000), false); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}

	var results []result
	start := time.Now()
	for i, c := range cells {
		n := o.n
		if c.mode == modeFull || c.mode == modeCalls {
			n = o.fullN
		}
		var r result
		var err error
		if c.mode == modeCalls {
			r, err = b.calls(ctx, n)
		} else {
			r, err = b.cell(ctx, c.mode, c.dup, n, true)
		}
		if err != nil {
			return fmt.Errorf("%s at %d%% duplicates: %w", c.mode, c.dup, err)
		}
		// Progress on stderr, so that a long run is never silent for
		// more than a cell and the table on stdout stays clean.
		fmt.Fprintf(os.Stderr, "e2e: %5.1fs  cell %d of %d done: %s at %d%% duplicates, %d triggers\n",
			time.Since(start).Seconds(), i+1, len(cells), c.mode, c.dup, n)
		r.rep = c.rep
		results = append(results, r)
	}
	if bad := report(os.Stdout, o, results); bad > 0 {
		return fmt.Errorf("%d cell(s) published a wrong number of effects", bad)
	}
	return nil
}

// result is one measured cell.
type result struct {
	mode     string
	dup      int
	rep      int // the round; a raw cell's is the round it closes (0: the first)
	n        int
	unique   int
	took     time.Duration
	cpu      time.Duration // the process's user and system time over took
	effects  uint64        // messages in the effect stream
	expected int           // what the effect stream should hold
	notes    []string
}

func (r result) rate() float64 { return float64(r.n) / r.took.Seconds() }

// cpuPerTrigger is the process's CPU time per trigger, in microseconds:
// everything in the process (the NATS server and the stand-in model
// included) over the cell's timed phase. Unlike triggers/s, it hardly moves
// when other programs share the machine.
func (r result) cpuPerTrigger() float64 { return float64(r.cpu.Microseconds()) / float64(r.n) }

type bench struct {
	o   options
	tmp string
	url string
	nc  *nats.Conn // the producer's and the observer's connection
	js  jetstream.JetStream
	seq int

	pubErrors atomic.Int64 // async publishes of triggers that failed
}

func (b *bench) connect(ctx context.Context) error {
	nc, err := natsrun.Connect(ctx, b.url, natsrun.Options{Name: "bench-e2e-producer", Logger: b.o.log.With("component", "producer")})
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { b.pubErrors.Add(1) }))
	if err != nil {
		nc.Close()
		return err
	}
	b.nc, b.js = nc, js
	return nil
}

// cell measures one mode at one duplicate rate on n triggers.
func (b *bench) cell(ctx context.Context, mode string, dup, n int, profile bool) (result, error) {
	b.seq++
	prefix := fmt.Sprintf("c%d", b.seq)
	dir := filepath.Join(b.tmp, prefix)
	defer os.RemoveAll(dir)
	payloads, unique := generate(n, dup)
	r := result{mode: mode, dup: dup, n: n, unique: unique, expected: unique}
	if mode == modeRaw {
		r.expected = n
	}
	var (
		sys *system
		err error
	)
	if mode == modeRaw {
		sys, err = b.startRaw(ctx, prefix)
	} else {
		sys, err = b.startOncegate(ctx, prefix, dir, mode)
	}
	if err != nil {
		return r, err
	}
	defer sys.close()
	defer b.deleteStreams(sys.streams)

	if err := b.prepublish(ctx, sys.streams[0], sys.triggerSubject, payloads); err != nil {
		return r, err
	}
	cons, err := b.js.Consumer(ctx, sys.streams[0], sys.durable)
	if err != nil {
		return r, err
	}

	var stopProfile func() error
	if profile && b.o.cpuprofile != "" {
		if stopProfile, err = startProfile(fmt.Sprintf("%s-%s-%s-%d.pprof", b.o.cpuprofile, prefix, mode, dup)); err != nil {
			return r, err
		}
	}
	start, cpu0 := time.Now(), procstat.CPU()
	if err := sys.start(); err != nil {
		return r, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = sys.stop()
		}
	}()
	err = waitAcked(ctx, cons, n, sys.settled)
	r.took, r.cpu = time.Since(start), procstat.CPU()-cpu0
	if stopProfile != nil {
		if perr := stopProfile(); err == nil {
			err = perr
		}
	}
	if err != nil {
		return r, err
	}
	stopped = true
	if err := sys.stop(); err != nil {
		return r, err
	}

	st, err := b.js.Stream(ctx, sys.effectStream)
	if err != nil {
		return r, err
	}
	r.effects = st.CachedInfo().State.Msgs
	r.notes = append(r.notes, sys.notes()...)
	if mode == modeFull && !b.o.sync {
		r.notes = append(r.notes, "ledger fsynced all the same (app.Start)")
	}
	if len(sys.streams) > 2 {
		if st, err := b.js.Stream(ctx, sys.streams[2]); err == nil && st.CachedInfo().State.Msgs > 0 {
			r.notes = append(r.notes, fmt.Sprintf("%d dead letters", st.CachedInfo().State.Msgs))
		}
	}
	if ci, err := cons.Info(ctx); err == nil && ci.NumRedelivered > 0 {
		r.notes = append(r.notes, fmt.Sprintf("%d redelivered", ci.NumRedelivered))
	}
	return r, nil
}

// system is one consumer under test.
type system struct {
	streams        []string // trigger stream, effect stream, then any other
	effectStream   string
	triggerSubject string
	durable        string
	start          func() error // begins consuming; returns at once
	stop           func() error // stops consuming, after the last ack
	close          func()       // releases everything
	settled        func() int64 // deliveries settled (acked, naked or termed) so far
	notes          func() []string
}

// --- raw -------------------------------------------------------------------

// startRaw sets up the baseline: the trigger stream, an effect stream with
// the same duplicate window as Oncegate's, a durable pull consumer with
// the pipeline defaults, and its own connection.
func (b *bench) startRaw(ctx context.Context, prefix string) (*system, error) {
	def := config.Default()
	pipe := def.Pipelines[1] // the default gate pipeline: its ack wait, max deliver, max ack pending
	maxAckPending := pipe.MaxAckPending
	if b.o.concurrency > maxAckPending {
		maxAckPending = b.o.concurrency
	}
	name := strings.ToUpper("E2E_" + prefix)
	sys := &system{
		streams:        []string{name, name + "_EFFECTS"},
		effectStream:   name + "_EFFECTS",
		triggerSubject: prefix + ".triggers.alerts",
		durable:        "raw",
	}
	effectSubject := prefix + ".effects.alerts"
	for _, sc := range []jetstream.StreamConfig{
		{Name: name, Subjects: []string{prefix + ".triggers.>"}, Storage: jetstream.FileStorage, Duplicates: def.Stream.Duplicates},
		{Name: name + "_EFFECTS", Subjects: []string{effectSubject}, Storage: jetstream.FileStorage, Duplicates: def.Stream.Duplicates},
	} {
		if _, err := b.js.CreateStream(ctx, sc); err != nil {
			return nil, err
		}
	}
	cons, err := b.js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
		Durable:       sys.durable,
		FilterSubject: sys.triggerSubject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       pipe.AckWait,
		MaxDeliver:    pipe.MaxDeliver,
		MaxAckPending: maxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, err
	}
	nc, err := natsrun.Connect(ctx, b.url, app.NATSOptions(def.NATS, "bench-e2e-raw", b.o.log.With("component", "raw")))
	if err != nil {
		return nil, err
	}
	// The window of PubAcks in flight: no wider than MaxAckPending, since
	// each one holds an unacked trigger, so a publish never stalls.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxAckPending))
	if err != nil {
		nc.Close()
		return nil, err
	}
	batch := b.o.rawBatch
	if batch <= 0 {
		batch = max(maxAckPending/2, 1)
	}

	type inflight struct {
		m jetstream.Msg
		f jetstream.PubAckFuture
	}
	var (
		queue    = make(chan inflight, maxAckPending)
		acker    sync.WaitGroup
		failures atomic.Int64
		settled  atomic.Int64
		cc       jetstream.ConsumeContext
	)
	sys.start = func() error {
		// Acks follow PubAcks in publish order, on their own goroutine, so
		// that the consume callback never waits for a round trip.
		acker.Go(func() {
			for p := range queue {
				select {
				case <-p.f.Ok():
					_ = p.m.Ack()
				case <-p.f.Err():
					failures.Add(1)
					_ = p.m.Nak()
				}
				settled.Add(1)
			}
		})
		var err error
		cc, err = cons.Consume(func(m jetstream.Msg) {
			meta, err := m.Metadata()
			if err != nil {
				failures.Add(1)
				_ = m.Nak()
				settled.Add(1)
				return
			}
			out := &nats.Msg{Subject: effectSubject, Data: m.Data(), Header: nats.Header{}}
			out.Header.Set(jetstream.MsgIDHeader, meta.Stream+":"+strconv.FormatUint(meta.Sequence.Stream, 10))
			f, err := js.PublishMsgAsync(out)
			if err != nil {
				failures.Add(1)
				_ = m.Nak()
				settled.Add(1)
				return
			}
			queue <- inflight{m, f}
		},
			jetstream.PullMaxMessages(batch),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				b.o.log.Warn("raw: consume error", "err", err)
			}),
		)
		if err != nil {
			close(queue)
			acker.Wait()
		}
		return err
	}
	sys.stop = func() error {
		cc.Drain()
		<-cc.Closed()
		close(queue)
		acker.Wait()
		return nil
	}
	sys.close = nc.Close
	sys.settled = settled.Load
	sys.notes = func() []string {
		if f := failures.Load(); f > 0 {
			return []string{fmt.Sprintf("%d failed publishes", f)}
		}
		return nil
	}
	return sys, nil
}

// --- Oncegate --------------------------------------------------------------

// oncegateConfig returns config.Default() with one pipeline of mode on
// subjects below prefix, data in dir, joined to the bench's server.
func (b *bench) oncegateConfig(prefix, dir, mode string) (*config.Config, error) {
	cfg := config.Default()
	cfg.DataDir = dir
	cfg.NATS.URL = b.url
	cfg.Metrics.Listen = ""
	cfg.Stream.Name = strings.ToUpper("E2E_" + prefix)
	cfg.Stream.Subjects = []string{prefix + ".triggers.>"}
	cfg.Stream.DeadLetterSubject = prefix + ".dead.{pipeline}"
	cfg.Ingress.Sources = nil // no webhooks here; their subjects are outside the bench's stream
	switch b.o.retention {
	case "":
	case config.RetentionLimits:
		cfg.Stream.Retention, cfg.Stream.MaxAge = config.RetentionLimits, time.Hour
	default:
		cfg.Stream.Retention = b.o.retention
	}
	// The default "alerts" pipeline (its key spec: the alert's fingerprint
	// and occurrence; its step) for full, the default gate for the others.
	p := cfg.Pipelines[0]
	if mode != modeFull {
		p = cfg.Pipelines[1]
		p.Key = cfg.Pipelines[0].Key
	}
	p.Name = "bench"
	p.Mode = mode
	p.Subject = prefix + ".triggers.alerts"
	p.Effect.Subject = prefix + ".effects.alerts"
	if c := b.o.concurrency; c > 0 {
		p.Concurrency = c
		p.MaxAckPending = max(p.MaxAckPending, c)
	}
	cfg.Pipelines = []config.Pipeline{p}
	cfg.LLM.Standin = mode == modeFull // the full cell's step, on the stand-in model, asked for by name
	if err := cfg.LoadEnv(nil); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (b *bench) startOncegate(ctx context.Context, prefix, dir, mode string) (*system, error) {
	cfg, err := b.oncegateConfig(prefix, dir, mode)
	if err != nil {
		return nil, err
	}
	p := &cfg.Pipelines[0]
	sys := &system{
		streams:        []string{cfg.Stream.Name, cfg.Stream.Name + "_EFFECTS", cfg.Stream.Name + "_DEAD"},
		effectStream:   cfg.Stream.Name + "_EFFECTS",
		triggerSubject: p.Subject,
		durable:        consumer.Durable(p.Name),
	}
	var c *consumer.Consumer
	if b.o.sync || mode == modeFull {
		a, err := app.Start(ctx, cfg, app.Options{Logger: b.o.log, NoOps: true})
		if err != nil {
			return nil, err
		}
		c, sys.close = a.Consumer, func() { _ = a.Close() }
	} else if c, sys.close, err = b.startNoSync(ctx, cfg); err != nil {
		return nil, err
	}
	// Streams and the durable consumer exist before the triggers go in;
	// Run sets them up again (a no-op update), inside the timed phase.
	if err := c.Setup(ctx); err != nil {
		sys.close()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	sys.start = func() error {
		go func() { done <- c.Run(runCtx) }()
		return nil
	}
	sys.stop = func() error {
		cancel()
		return <-done
	}
	sys.settled = func() int64 {
		var n int64
		for _, s := range c.Stats() {
			n += s.Effects + s.DuplicatesWindow + s.DuplicatesLedger + s.Retries + s.Held + s.DeadLetters
		}
		return n
	}
	sys.notes = func() []string {
		var out []string
		for _, s := range c.Stats() {
			for _, f := range []struct {
				n    int64
				what string
			}{
				{s.Retries, "retries"}, {s.Held, "held"}, {s.DeadLetters, "dead-lettered"},
				{s.TakenOver, "taken over"}, {s.Stale, "stale commits"}, {s.DuplicatesStream, "stream duplicates"},
			} {
				if f.n > 0 {
					out = append(out, fmt.Sprintf("%d %s", f.n, f.what))
				}
			}
		}
		return out
	}
	return sys, nil
}

// startNoSync wires a gate consumer as app.Start does — the same
// connection options, Badger options, Prometheus metrics — but with a
// ledger that skips its fsyncs.
func (b *bench) startNoSync(ctx context.Context, cfg *config.Config) (*consumer.Consumer, func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	nc, err := natsrun.Connect(ctx, cfg.NATS.URL, app.NATSOptions(cfg.NATS, "oncegate", b.o.log.With("component", "nats")))
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, nc.Close)
	var led ledger.Ledger
	if cfg.Pipelines[0].Mode != config.ModeGateWindow {
		db, err := badgerstore.Open(cfg.BadgerDir(), badgerstore.OpenOptions{})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		closers = append(closers, func() { _ = db.Close() })
		l, err := badgerstore.New(db, badgerstore.Options{Options: app.LedgerOptions(cfg.Ledger), NoSync: true})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		closers = append(closers, func() { _ = l.Close() })
		led = l
	}
	m := ops.NewMetrics(ops.MetricsOptions{})
	for _, p := range cfg.Pipelines {
		m.AddPipeline(p.Name)
		m.AddSink(p.Name, p.Effect.Sink)
	}
	c, err := consumer.New(consumer.Options{
		Config: cfg, Conn: nc, Ledger: led, Observer: app.NewObserver(m), Logger: b.o.log.With("component", "consumer"),
	})
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return c, closeAll, nil
}

// --- triggers --------------------------------------------------------------

// generate returns n alert payloads (about 330 bytes of JSON, shaped like
// examples/alert.json) of which dup percent repeat an earlier intent: the
// same fingerprint and occurrence (the key fields) and the same content,
// with a new delivery id and send time. The sequence depends only on n and
// dup, so every mode sees the same triggers. It also returns the number of
// distinct intents.
func generate(n, dup int) ([][]byte, int) {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(dup)))
	base := time.Date(2026, 11, 29, 7, 14, 3, 0, time.UTC)
	var intents []int
	out := make([][]byte, n)
	for i := range n {
		intent := len(intents)
		if i > 0 && rng.IntN(100) < dup {
			intent = intents[rng.IntN(len(intents))]
		} else {
			intents = append(intents, intent)
		}
		h := uint64(intent)*0x9E3779B97F4A7C15 + 1
		out[i] = fmt.Appendf(nil, `{"status":"firing","delivery_id":"%08x%04x%012x",`+
			`"sent_at":"%s","alert":{"fingerprint":"%016x","occurrence":%d,`+
			`"labels":{"alertname":"DiskAlmostFull","instance":"db-%d:9100","severity":"page"},`+
			`"annotations":{"summary":"Disk /var/lib/pgsql 93%% full"},"startsAt":"2026-11-29T07:09:03Z"}}`,
			rng.Uint32(), i&0xffff, rng.Uint64()&0xffffffffffff,
			base.Add(time.Duration(i)*time.Millisecond).Format("2006-01-02T15:04:05.000Z"),
			h, 1+intent%5, intent%64)
	}
	return out, len(intents)
}

// prepublish puts the payloads into the trigger stream and checks that
// they all landed.
func (b *bench) prepublish(ctx context.Context, stream, subject string, payloads [][]byte) error {
	b.pubErrors.Store(0)
	for _, p := range payloads {
		if _, err := b.js.PublishAsync(subject, p, jetstream.WithStallWait(30*time.Second)); err != nil {
			return fmt.Errorf("publishing triggers: %w", err)
		}
	}
	select {
	case <-b.js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(stuckAfter):
		return errors.New("publishing triggers: PubAcks still missing after a minute")
	}
	st, err := b.js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	if got := st.CachedInfo().State.Msgs; got != uint64(len(payloads)) || b.pubErrors.Load() > 0 {
		return fmt.Errorf("publishing triggers: the stream holds %d of %d (%d PubAck errors)", got, len(payloads), b.pubErrors.Load())
	}
	return nil
}

// waitAcked waits until the server reports nothing pending or awaiting an
// ack on the durable consumer. It watches the consumer's own count of
// settled deliveries first (atomic loads, no load on the server), and asks
// the server only once that count reaches n: a consumer-info request per
// millisecond for the whole run would cost the server a tenth of its CPU.
func waitAcked(ctx context.Context, cons jetstream.Consumer, n int, settled func() int64) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	var (
		last     int64 = -1
		progress       = time.Now()
	)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		s := settled()
		if s != last {
			last, progress = s, time.Now()
		} else if time.Since(progress) > stuckAfter {
			ci, err := cons.Info(ctx)
			if err != nil {
				return err
			}
			return fmt.Errorf("stuck: %d of %d settled; the server has %d pending, %d awaiting ack", s, n, ci.NumPending, ci.NumAckPending)
		}
		if s < int64(n) {
			continue
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if ci.NumPending == 0 && ci.NumAckPending == 0 {
			return nil
		}
	}
}

func (b *bench) deleteStreams(names []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range names {
		_ = b.js.DeleteStream(ctx, s)
	}
}

func startProfile(path string) (func() error, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// --- report ----------------------------------------------------------------

// report prints the table and the verdict, and returns the number of cells
// whose effect count is wrong. Missed targets are not errors.
func report(w io.Writer, o options, results []result) int {
	// The raw cells by round: raws[i] closes round i-1 and opens round i.
	raws := map[int]float64{}
	for _, r := range results {
		if r.mode == modeRaw {
			raws[r.rep] = r.rate()
		}
	}
	// ratio is r's rate over the mean of the raw cells either side of it.
	ratio := func(r result) (float64, bool) {
		before, ok1 := raws[r.rep]
		after, ok2 := raws[r.rep+1]
		switch {
		case ok1 && ok2:
			return r.rate() / ((before + after) / 2), true
		case ok1:
			return r.rate() / before, true
		case ok2:
			return r.rate() / after, true
		}
		return 0, false
	}

	// One row per mode and duplicate rate, in the order first measured.
	type row struct {
		mode          string
		dup, n        int
		rates, ratios []float64
		effects       []uint64
		expected      int
		took          []time.Duration
		cpus          []float64
		wrong         int
		notes         []string
	}
	var rows []*row
	byKey := map[string]*row{}
	bad := 0
	for _, r := range results {
		k := fmt.Sprintf("%s/%d", r.mode, r.dup)
		rw := byKey[k]
		if rw == nil {
			rw = &row{mode: r.mode, dup: r.dup, n: r.n, expected: r.expected}
			byKey[k] = rw
			rows = append(rows, rw)
		}
		rw.rates = append(rw.rates, r.rate())
		rw.took = append(rw.took, r.took)
		rw.cpus = append(rw.cpus, r.cpuPerTrigger())
		rw.effects = append(rw.effects, r.effects)
		if x, ok := ratio(r); ok && r.mode != modeRaw {
			rw.ratios = append(rw.ratios, x)
		}
		if r.effects != uint64(r.expected) {
			rw.wrong++
			bad++
		}
		rw.notes = append(rw.notes, r.notes...)
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "mode\tdup%%\ttriggers\truns\ttriggers/s\tvs raw\tvs raw, range\tCPU µs/trigger\teffects\texpected\ttime\t\n")
	for _, rw := range rows {
		rs, spread := "-", "-"
		if len(rw.ratios) > 0 {
			rs = fmt.Sprintf("%.2f", median(rw.ratios))
			spread = fmt.Sprintf("%.2f-%.2f", slices.Min(rw.ratios), slices.Max(rw.ratios))
		}
		eff := fmt.Sprint(rw.effects[0])
		if rw.wrong > 0 {
			eff = fmt.Sprintf("%d of %d runs wrong !", rw.wrong, len(rw.effects))
		}
		tooks := make([]float64, len(rw.took))
		for i, t := range rw.took {
			tooks[i] = float64(t)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%s\t%s\t%.0f\t%s\t%d\t%v\t\n", rw.mode, rw.dup, rw.n, len(rw.rates), median(rw.rates), rs, spread,
			median(rw.cpus), eff, rw.expected, time.Duration(median(tooks)).Round(time.Millisecond))
	}
	tw.Flush()
	for _, rw := range rows {
		if len(rw.notes) > 0 {
			fmt.Fprintf(w, "note: %s at %d%%: %s\n", rw.mode, rw.dup, strings.Join(rw.notes, ", "))
		}
	}
	fmt.Fprintf(w, "\n~%d-byte JSON triggers, key = alert fingerprint + occurrence; one embedded nats-server on loopback, file storage, sync_interval %v; "+
		"pipeline concurrency %s; ledger fsync %v; Oncegate's trigger stream retention %s (the raw loop's: limits, no age)\n",
		payloadSize(), time.Duration(config.DefaultSyncInterval), concurrencyText(o.concurrency), o.sync, cmp.Or(o.retention, config.Default().Stream.Retention+" (default)"))
	if len(raws) > 0 {
		fmt.Fprintf(w, "raw = Consume + PublishMsgAsync(Nats-Msg-Id) + ack on PubAck; triggers/s, CPU µs/trigger (the whole process's user+system time, server and stand-in included) and time are medians of the runs; "+
			"vs raw = the median, over the %d round(s), of a cell's rate over the mean of the raw runs either side of it\n", o.reps)
	}
	if bad > 0 {
		fmt.Fprintf(w, "CORRECTNESS: %d cell(s) with an effect count other than expected (marked !)\n", bad)
	}
	if full, calls := byKey[modeFull+"/0"], byKey[modeCalls+"/0"]; full != nil && calls != nil {
		// The split needs the gate as full runs it: with its fsyncs
		// (full always goes through app.Start).
		var gateCPU float64
		if g := byKey[modeGateLedger+"/0"]; g != nil && o.sync {
			gateCPU = median(g.cpus)
		}
		fullAgainstCalls(w, medians{median(full.rates), median(full.cpus)}, medians{median(calls.rates), median(calls.cpus)}, gateCPU)
	}

	if len(raws) == 0 {
		fmt.Fprintln(w, "verdict: no raw cell, no ratios")
		return bad
	}
	var parts []string
	pass := true
	check := func(label string, target float64, mode string, dup int) {
		rw, ok := byKey[fmt.Sprintf("%s/%d", mode, dup)]
		if !ok || len(rw.ratios) == 0 {
			return
		}
		x := median(rw.ratios)
		ok = x >= target
		pass = pass && ok
		verdict := "ok"
		if !ok {
			verdict = "MISS"
		}
		// Two decimals, or three where two would round a miss up to its
		// target ("0.70 (≥0.70) MISS" for 0.697).
		digits := 2
		if !ok && fmt.Sprintf("%.2f", x) == fmt.Sprintf("%.2f", target) {
			digits = 3
		}
		parts = append(parts, fmt.Sprintf("%s %.*f (≥%.2f) %s", label, digits, x, target, verdict))
	}
	label := "ledger unique"
	if !o.sync {
		label += " (no fsync!)"
	}
	check(label, targetLedgerUnique, modeGateLedger, 0)
	maxDup := 0
	for _, d := range o.dups {
		maxDup = max(maxDup, d)
	}
	if maxDup > 0 {
		check(fmt.Sprintf("ledger %d%% dup", maxDup), targetDuplicates, modeGateLedger, maxDup)
		check(fmt.Sprintf("window %d%% dup", maxDup), targetDuplicates, modeGateWindow, maxDup)
	}
	check("window unique", targetWindow, modeGateWindow, 0)
	if len(parts) == 0 {
		fmt.Fprintln(w, "verdict: no cell the targets apply to")
		return bad
	}
	overall := "PASS"
	if !pass {
		overall = "FAIL"
	}
	if bad > 0 {
		overall += ", BUT EFFECT COUNTS WRONG"
	}
	fmt.Fprintf(w, "verdict (medians): %s — %s\n", overall, strings.Join(parts, "; "))
	return bad
}

// median returns the median of xs, which it sorts; 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	if n := len(xs); n%2 == 1 {
		return xs[n/2]
	} else {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
}

func payloadSize() int {
	p, _ := generate(1, 0)
	return len(p[0])
}

func concurrencyText(c int) string {
	if c > 0 {
		return strconv.Itoa(c)
	}
	return fmt.Sprintf("%d (default)", config.DefaultConcurrency)
}
