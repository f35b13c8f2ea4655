package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	openai "github.com/sashabaranov/go-openai"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/pkg/dedupe/window"
	"github.com/oncegate/oncegate/pkg/llmcache"
)

// Observer receives what the consumer does, for metrics. Its methods are
// called concurrently and must not block.
type Observer interface {
	Trigger(pipeline string)
	Duplicate(pipeline string, g outcome.Guard)
	Claim(pipeline string, s ledger.Status)
	Effect(pipeline, sink, outcome string, took time.Duration)
	Step(pipeline, step string, took time.Duration)
	DeadLetter(pipeline string, r outcome.Reason)
	Settled(pipeline, kind string) // ack, nak, term, in_progress
	// SettleTime reports how long a trigger took from the gate taking it
	// to its verdict (ack, nak or dead) carried out.
	SettleTime(pipeline, verdict string, took time.Duration)
	InFlight(pipeline string, delta int)
	// Leases counts the ledger leases the pipeline holds: +1 when a claim
	// is taken (new or taken over), -1 once it is committed, released or
	// failed.
	Leases(pipeline string, delta int)
	// ReplyRefused counts a trigger whose Oncegate-Reply subject is not
	// one Oncegate may publish to.
	ReplyRefused(pipeline string)
	// Panic counts a panic recovered in a trigger's work.
	Panic(pipeline string)
	// LedgerUnavailable counts a claim the ledger could not answer: the
	// trigger waits, and the attempt is not one of its tries.
	LedgerUnavailable(pipeline string)
}

// Options configures a [Consumer].
type Options struct {
	// Config is the validated configuration. Required.
	Config *config.Config

	// Conn is the NATS connection. Required.
	Conn *nats.Conn

	// Ledger is the idempotency ledger, required when a pipeline's mode
	// is full or gate-ledger.
	Ledger ledger.Ledger

	// Model is the go-openai client of the model steps (its HTTP client
	// goes through the LLM cache). Required when a pipeline has a step.
	Model *openai.Client

	// Cache, if set, is the LLM cache Model goes through: the answers a
	// step takes from its intents' ledger records are counted in its
	// figures of tokens and cost saved, as its hits are.
	Cache *llmcache.Cache

	// Sinks overrides the sink built from a pipeline's config, by pipeline
	// name. Tests use it to put a recording sink in place.
	Sinks map[string]sink.Sink

	// Observer, if set, receives events for metrics.
	Observer Observer

	// Logger receives the consumer's logs. The default discards.
	Logger *slog.Logger

	// Owner names this process in ledger records. The default is
	// hostname:pid, and with HeldDir Owner(HeldDir): the identity kept
	// there, which the process answers for its intents under, survives
	// its restarts (answers.go).
	Owner string

	// Answering, if set, is called once Run answers for the process's
	// intents (answers.go): a responder the caller ran for them while the
	// ledger opened (ServeHeld) can stop.
	Answering func()

	// DrainTimeout bounds the wait for work in flight at shutdown. The
	// default is 30s.
	DrainTimeout time.Duration

	// Tracer, if set, traces each trigger through the gate (trace.go).
	Tracer trace.TracerProvider

	// HeldDir, if set, is where a model step's answer waits on this
	// process's disk from before the ledger is asked to keep it in the
	// intent's record until it has, so that a process killed while the
	// ledger does not answer does not lose it: the next start writes it
	// (held.go). It costs a file written and removed per answer: set it
	// for a ledger across the network (JetStream KV). The default keeps
	// such answers in memory.
	HeldDir string
	// HeldKey, if set, seals the answers in HeldDir (AES-GCM; 16, 24 or
	// 32 bytes).
	HeldKey []byte
}

// Consumer takes triggers off JetStream and runs each pipeline's flow:
// key → window → ledger → model step → effect → commit → ack.
type Consumer struct {
	opts    Options
	cfg     *config.Config
	nc      *nats.Conn
	js      jetstream.JetStream
	log     *slog.Logger
	obs     Observer
	tracer  trace.Tracer // nil: tracing is off
	pipes   []*pipeline
	running atomic.Bool
	health  *ledgerHealth // nil without a ledger
	// unsaved holds the model answers the ledger refused to keep
	// (held.go), for the intent's next try in this process.
	unsaved *heldNotes
	board   answerBoard // the model calls in flight (answers.go)
}

// New checks opts and builds the pipelines; it does not touch NATS yet.
func New(opts Options) (*Consumer, error) {
	if opts.Config == nil || opts.Conn == nil {
		return nil, errors.New("consumer: Config and Conn are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Owner == "" {
		owner, err := Owner(opts.HeldDir)
		if err != nil {
			return nil, fmt.Errorf("consumer: %w", err)
		}
		opts.Owner = owner
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	js, err := jetstream.New(opts.Conn, jetstream.WithPublishAsyncMaxPending(4*batchMax))
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	c := &Consumer{opts: opts, cfg: opts.Config, nc: opts.Conn, js: js, log: opts.Logger, obs: opts.Observer}
	if c.unsaved, err = newHeldNotes(opts.HeldDir, opts.HeldKey, opts.Logger); err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	if c.obs == nil {
		c.obs = nopObserver{}
	}
	if opts.Tracer != nil {
		c.tracer = opts.Tracer.Tracer(tracerName)
	}
	if opts.Ledger != nil {
		c.health = newLedgerHealth(opts.Ledger)
	}
	for i := range c.cfg.Pipelines {
		p, err := newPipeline(c, &c.cfg.Pipelines[i])
		if err != nil {
			return nil, err
		}
		c.pipes = append(c.pipes, p)
	}
	return c, nil
}

// Ready reports nil once Run has set up the streams and consumers and is
// taking messages, while the ledger answers: during a ledger outage it
// reports the ledger's last error (see health.go).
func (c *Consumer) Ready() error {
	if !c.running.Load() {
		return errors.New("consumer: not consuming")
	}
	for _, s := range c.sources() {
		if !s.consuming.Load() {
			return fmt.Errorf("consumer: %s is not consuming (durable consumer %s)", s.name, s.durable)
		}
	}
	if !c.nc.IsConnected() {
		return errors.New("consumer: NATS connection is " + c.nc.Status().String())
	}
	if c.health != nil {
		return c.health.err()
	}
	return nil
}

// Stats returns the counters of every pipeline, in configuration order.
func (c *Consumer) Stats() []PipelineStats {
	out := make([]PipelineStats, 0, len(c.pipes))
	for _, p := range c.pipes {
		out = append(out, p.n.snapshot(p.cfg.Name))
	}
	return out
}

// DispatchStats returns the one-shot dispatchers' counters.
func (c *Consumer) DispatchStats() []DispatchStats {
	var out []DispatchStats
	for _, p := range c.pipes {
		if p.dispatch != nil {
			out = append(out, p.dispatch.stats())
		}
	}
	return out
}

// sources lists every durable consumer the Consumer takes messages from.
func (c *Consumer) sources() []*source {
	var out []*source
	for _, p := range c.pipes {
		out = append(out, p.src)
		if p.dispatch != nil {
			out = append(out, p.dispatch.src)
			if p.dispatch.parked != nil {
				out = append(out, p.dispatch.parked)
			}
		}
	}
	return out
}

// Run sets up the streams and consumers, then consumes every pipeline
// until ctx is done; then it stops fetching, finishes the work in flight
// (up to DrainTimeout), and returns. Work runs under a context of its own
// that ctx's end does not cancel; past DrainTimeout it is cancelled, and
// unfinished triggers come back after their ack wait (a trigger past its
// last delivery comes back to be dead-lettered, never dropped).
//
// A durable consumer deleted under a running Consumer is set up again;
// meanwhile Ready reports an error.
func (c *Consumer) Run(ctx context.Context) error {
	if c.opts.Ledger != nil {
		// Answers a process before this one held for the ledger are
		// written first: a replica taking their intents over would pay
		// for them again.
		flushCtx, stopFlush := context.WithCancel(context.WithoutCancel(ctx))
		flushed := make(chan struct{})
		go func() {
			defer close(flushed)
			c.unsaved.flushEvery(flushCtx, c.opts.Ledger, heldFlushEvery)
		}()
		defer func() { stopFlush(); <-flushed }()
	}
	if err := c.Setup(ctx); err != nil {
		return err
	}
	for _, p := range c.pipes {
		if p.dispatch != nil {
			if err := p.dispatch.subscribe(); err != nil {
				return fmt.Errorf("consumer: pipeline %s: dispatcher: %w", p.cfg.Name, err)
			}
			defer p.dispatch.unsubscribe()
		}
	}
	if c.opts.Ledger != nil {
		stop, err := c.serveAnswers()
		if err != nil {
			return fmt.Errorf("consumer: answering for the intents it holds: %w", err)
		}
		defer stop()
		if c.opts.Answering != nil {
			c.opts.Answering()
		}
	}
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	if c.health != nil {
		defer c.health.close()
	}
	var wg sync.WaitGroup
	for _, s := range c.sources() {
		wg.Go(func() { s.run(ctx, work) })
	}
	c.running.Store(true)
	c.log.Info("consuming", "pipelines", len(c.pipes), "stream", c.cfg.Stream.Name)
	<-ctx.Done()
	c.running.Store(false)
	c.log.Info("draining: no new triggers; finishing the ones in flight")
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		c.log.Info("drained")
	case <-time.After(c.opts.DrainTimeout):
		c.log.Warn("drain timed out; cancelling the work in flight: unfinished triggers will be redelivered", "timeout", c.opts.DrainTimeout)
		cancelWork()
		<-done
	}
	return nil
}

type nopObserver struct{}

func (nopObserver) Trigger(string)                               {}
func (nopObserver) Duplicate(string, outcome.Guard)              {}
func (nopObserver) Claim(string, ledger.Status)                  {}
func (nopObserver) Effect(string, string, string, time.Duration) {}
func (nopObserver) Step(string, string, time.Duration)           {}
func (nopObserver) DeadLetter(string, outcome.Reason)            {}
func (nopObserver) Settled(string, string)                       {}
func (nopObserver) InFlight(string, int)                         {}
func (nopObserver) Leases(string, int)                           {}
func (nopObserver) ReplyRefused(string)                          {}
func (nopObserver) Panic(string)                                 {}
func (nopObserver) LedgerUnavailable(string)                     {}
func (nopObserver) SettleTime(string, string, time.Duration)     {}

// WindowStats is one pipeline's duplicate window, as Window.Stats sees it.
type WindowStats struct {
	Pipeline string
	window.Stats
}

// WindowStats returns each pipeline's window figures, for metrics.
func (c *Consumer) WindowStats() []WindowStats {
	out := make([]WindowStats, 0, len(c.pipes))
	for _, p := range c.pipes {
		out = append(out, WindowStats{Pipeline: p.cfg.Name, Stats: p.window.Stats()})
	}
	return out
}
