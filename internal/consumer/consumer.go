package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ops"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Observer receives what the consumer does, for metrics. Its methods are
// called concurrently and must not block.
type Observer interface {
	Trigger(pipeline string)
	Duplicate(pipeline string, g Guard)
	Claim(pipeline string, s dedupe.Status)
	Effect(pipeline, sink, outcome string, took time.Duration)
	Step(pipeline, step string, took time.Duration)
	DeadLetter(pipeline string, r Reason)
	Settled(pipeline, kind string) // ack, nak, term, in_progress
	InFlight(pipeline string, delta int)
	// Leases counts the ledger leases the pipeline holds: +1 when a claim
	// is taken (new or taken over), -1 once it is committed, released or
	// failed.
	Leases(pipeline string, delta int)
}

// Options configures a [Consumer].
type Options struct {
	// Config is the validated configuration. Required.
	Config *config.Config

	// Conn is the NATS connection. Required.
	Conn *nats.Conn

	// Ledger is the idempotency ledger, required when a pipeline's mode
	// is full or gate-ledger.
	Ledger dedupe.Ledger

	// Model is the go-openai client of the model steps (its HTTP client
	// goes through the LLM cache). Required when a pipeline has a step.
	Model *openai.Client

	// Sinks overrides the sink built from a pipeline's config, by pipeline
	// name. Tests use it to put a recording sink in place.
	Sinks map[string]sink.Sink

	// Observer, if set, receives events for metrics.
	Observer Observer

	// Logger receives the consumer's logs. The default discards.
	Logger *slog.Logger

	// Owner names this process in ledger records. The default is
	// hostname:pid.
	Owner string

	// Fault, if set, is called at each Point of the flow with the intent
	// key; tests use it to crash the process there. Never set in
	// production.
	Fault func(p Point, key dedupe.Key)

	// DrainTimeout bounds the wait for work in flight at shutdown. The
	// default is 30s.
	DrainTimeout time.Duration

	// BrokenAckEarly acks each trigger as soon as its claim is made,
	// before the effect: a deliberate bug, for tests that must show they
	// notice work lost when the process dies. Never set in production.
	BrokenAckEarly bool
}

// Consumer takes triggers off JetStream and runs each pipeline's flow:
// key → window → ledger → model step → effect → commit → ack.
type Consumer struct {
	opts  Options
	cfg   *config.Config
	nc    *nats.Conn
	js    jetstream.JetStream
	log   *slog.Logger
	obs   Observer
	pipes []*pipeline
	ready atomic.Bool
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
		host, _ := os.Hostname()
		opts.Owner = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	js, err := jetstream.New(opts.Conn, jetstream.WithPublishAsyncMaxPending(4*batchMax))
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	c := &Consumer{opts: opts, cfg: opts.Config, nc: opts.Conn, js: js, log: opts.Logger, obs: opts.Observer}
	if c.obs == nil {
		c.obs = nopObserver{}
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
// taking messages.
func (c *Consumer) Ready() error {
	if !c.ready.Load() {
		return errors.New("consumer: not consuming yet")
	}
	if !c.nc.IsConnected() {
		return errors.New("consumer: NATS connection is " + c.nc.Status().String())
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

// Setup creates the trigger stream, the streams that capture effect and
// dead-letter subjects no stream captures yet, and each pipeline's durable
// pull consumer, or updates them to the configuration.
func (c *Consumer) Setup(ctx context.Context) error {
	s := c.cfg.Stream
	sc := jetstream.StreamConfig{
		Name: s.Name, Subjects: s.Subjects, Storage: jetstream.FileStorage,
		Duplicates: s.Duplicates, MaxAge: s.MaxAge,
	}
	if _, err := c.js.CreateOrUpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("consumer: stream %s: %w", s.Name, err)
	}
	var effects, dead []string
	for _, p := range c.pipes {
		if p.cfg.Effect.Sink == config.SinkJetStream {
			effects = append(effects, p.cfg.Effect.Subject)
		}
		dead = append(dead, p.deadLetter)
	}
	if err := c.capture(ctx, s.Name+"_EFFECTS", effects, s.Duplicates); err != nil {
		return err
	}
	if err := c.capture(ctx, s.Name+"_DEAD", dead, 0); err != nil {
		return err
	}
	for _, p := range c.pipes {
		if err := p.setup(ctx); err != nil {
			return err
		}
		if p.dispatch != nil {
			if err := p.dispatch.setup(ctx); err != nil {
				return err
			}
		}
	}
	return nil
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

// capture makes sure every subject in subjects lands in some stream,
// creating (or extending) stream name for the ones that do not: a JetStream
// sink needs a PubAck, and a dead letter must be kept.
func (c *Consumer) capture(ctx context.Context, name string, subjects []string, dup time.Duration) error {
	var missing []string
	seen := map[string]bool{}
	for _, subj := range subjects {
		if seen[subj] {
			continue
		}
		seen[subj] = true
		probe := strings.NewReplacer("*", "x", ">", "x").Replace(subj)
		_, err := c.js.StreamNameBySubject(ctx, probe)
		if err == nil {
			continue
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("consumer: looking up the stream of %s: %w", subj, err)
		}
		missing = append(missing, subj)
	}
	if len(missing) == 0 {
		return nil
	}
	sc := jetstream.StreamConfig{Name: name, Subjects: missing, Storage: jetstream.FileStorage, Duplicates: dup}
	if st, err := c.js.Stream(ctx, name); err == nil {
		sc = st.CachedInfo().Config
		sc.Subjects = append(sc.Subjects, missing...)
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("consumer: stream %s: %w", name, err)
	}
	if _, err := c.js.CreateOrUpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("consumer: stream %s for %v: %w", name, missing, err)
	}
	c.log.Info("stream set up for subjects no other stream captured", "stream", name, "subjects", missing)
	return nil
}

// Run sets up the streams and consumers, then consumes every pipeline
// until ctx is done; then it stops fetching, finishes the work in flight
// (up to DrainTimeout), and returns. Work it could not finish is not acked
// and comes back after AckWait; its lease expires and another worker takes
// it over.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.Setup(ctx); err != nil {
		return err
	}
	var ccs []jetstream.ConsumeContext
	stopAll := func() {
		for _, cc := range ccs {
			cc.Drain()
		}
	}
	for _, p := range c.pipes {
		cc, err := p.consume()
		if err != nil {
			stopAll()
			return err
		}
		ccs = append(ccs, cc)
		if p.dispatch != nil {
			defer p.dispatch.stop()
			cc, err := p.dispatch.start()
			if err != nil {
				stopAll()
				return fmt.Errorf("consumer: pipeline %s: dispatcher: %w", p.cfg.Name, err)
			}
			ccs = append(ccs, cc)
		}
	}
	c.ready.Store(true)
	c.log.Info("consuming", "pipelines", len(c.pipes), "stream", c.cfg.Stream.Name)
	<-ctx.Done()
	c.ready.Store(false)
	c.log.Info("draining: no new triggers; finishing the ones in flight")
	stopAll()
	deadline := time.After(c.opts.DrainTimeout)
	for _, cc := range ccs {
		select {
		case <-cc.Closed():
		case <-deadline:
		}
	}
	done := make(chan struct{})
	go func() {
		for _, p := range c.pipes {
			p.wg.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
		c.log.Info("drained")
	case <-deadline:
		c.log.Warn("drain timed out; unfinished triggers will be redelivered", "timeout", c.opts.DrainTimeout)
	}
	return nil
}

func (c *Consumer) fault(p Point, k dedupe.Key) {
	if c.opts.Fault != nil {
		c.opts.Fault(p, k)
	}
}

type nopObserver struct{}

func (nopObserver) Trigger(string)                               {}
func (nopObserver) Duplicate(string, Guard)                      {}
func (nopObserver) Claim(string, dedupe.Status)                  {}
func (nopObserver) Effect(string, string, string, time.Duration) {}
func (nopObserver) Step(string, string, time.Duration)           {}
func (nopObserver) DeadLetter(string, Reason)                    {}
func (nopObserver) Settled(string, string)                       {}
func (nopObserver) InFlight(string, int)                         {}
func (nopObserver) Leases(string, int)                           {}

// WindowStats returns each pipeline's window figures, for metrics.
func (c *Consumer) WindowStats() []ops.WindowStats {
	out := make([]ops.WindowStats, 0, len(c.pipes))
	for _, p := range c.pipes {
		s := p.window.Stats()
		out = append(out, ops.WindowStats{
			Pipeline: p.cfg.Name, Capacity: p.window.Capacity(), Bytes: p.window.Bytes(),
			Live: s.Live, Hits: s.Hits, Evictions: s.Evictions, Expired: s.Expired,
		})
	}
	return out
}
