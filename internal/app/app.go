// Package app wires Oncegate's parts into one running process: NATS
// (embedded or a deployment), the ledger, the LLM cache and model client,
// the consumer, and the ops server. cmd/consumer's run and demo commands
// and the integration tests start it the same way.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	openai "github.com/sashabaranov/go-openai"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ingress"
	"github.com/oncegate/oncegate/internal/jsretry"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/natsrun"
	"github.com/oncegate/oncegate/internal/ops"
	"github.com/oncegate/oncegate/internal/proxy"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/internal/streamwatch"
	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/ratelimit"
)

// ErrLedgerInUse is wrapped by the error Start returns when another process
// holds the Badger ledger's directory.
var ErrLedgerInUse = errors.New("app: the ledger directory is in use by another process")

// Options are what a caller adds to the configuration.
type Options struct {
	// Logger receives the process's logs. The default discards.
	Logger *slog.Logger

	// Standin configures the stand-in model, used when llm.standin asks
	// for it (the demo injects faults with it).
	Standin standin.Options

	// Getenv reads the environment (the LLM API key, the ingress's
	// secrets, the NATS and console tokens). The default is os.Getenv.
	Getenv func(string) string

	// LookupEnv reads the environment where an unset variable and an
	// empty one differ (the effects' secrets, the API key's variable).
	// The default is os.LookupEnv, or, when Getenv is set, Getenv with an
	// empty value taken as unset.
	LookupEnv func(string) (string, bool)

	// NoOps skips the metrics and health server even if configured.
	NoOps bool

	// Clock, if set, is the ledger's clock (the soak harness jumps it).
	// The default is the system clock.
	Clock ledger.Clock

	// WrapLedger, if set, wraps the ledger once it is open (fault builds
	// record its operations and simulate its outages with it). The
	// wrapper's Close must close the ledger it wraps.
	WrapLedger func(ledger.Ledger) (ledger.Ledger, error)

	// WrapSink, if set, wraps each pipeline's sink (the demo injects
	// effect failures with it): the name is the pipeline's, or
	// "<pipeline>/<effect>" for a named effect.
	WrapSink func(pipeline string, s sink.Sink) sink.Sink

	// Tracer, if set, traces the triggers in place of the provider that
	// tracing.otlp_endpoint would build (tests use an in-memory one).
	Tracer trace.TracerProvider
}

// App is one running Oncegate process.
type App struct {
	Config   *config.Config
	Embedded *natsrun.Embedded // nil when joining a deployment
	Conn     *nats.Conn
	JS       jetstream.JetStream
	Ledger   ledger.Ledger // nil when no pipeline needs one
	Cache    *llmcache.Cache
	Standin  *standin.Server // nil unless llm.standin asks for it
	// Consumer runs the pipelines; nil with none (the proxy alone), as
	// Conn and JS are when nothing needs NATS.
	Consumer *consumer.Consumer
	Metrics  *ops.Metrics
	Ops      *ops.Server
	OpsAddr  string
	ModelURL string
	// Ingress is the webhook ingress, nil unless ingress.listen is set;
	// IngressAddr is the address it listens on.
	Ingress     *ingress.Server
	IngressAddr string
	// RateLimit paces the model calls, nil unless llm.rate_limit is on.
	RateLimit *ratelimit.Transport
	// Proxy is the OpenAI-compatible proxy, nil unless proxy.listen is
	// set; ProxyAddr is the address it listens on.
	Proxy     *proxy.Server
	ProxyAddr string
	// Admin carries out the admin operations (recovery.go), nil with
	// admin.off.
	Admin *admin.Admin
	// ConsoleAddr is the address the console listens on, empty unless
	// console.listen is set.
	ConsoleAddr string
	// StreamWatch measures the pipelines' backlog and the triggers no
	// pipeline reads, every 15s; a test may Poll it between.
	StreamWatch *streamwatch.Watcher

	log          *slog.Logger
	closers      []func() error
	upstream     http.RoundTripper // to the model endpoint, under the cache
	modelKey     string            // the model endpoint's API key
	consumerOpts consumer.Options
	// owner is the consumer's ledger owner name, and stopHeld stops the
	// answering for the held answers, with a held directory (heldDir).
	owner    string
	stopHeld func()

	// live and liveCache are what the ops server reads: it starts before
	// the consumer and the cache exist, and serves while they are replaced.
	live      atomic.Pointer[consumer.Consumer]
	liveCache atomic.Pointer[llmcache.Cache]
	started   atomic.Bool // Start has returned the App
}

// RestartConsumer replaces the consumer with a new one on the same
// connection, ledger and cache, as a restarted process would have: its
// windows start empty. Call it after Run has returned.
func (a *App) RestartConsumer() error {
	if a.Consumer == nil {
		return errors.New("app: no pipelines: no consumer to restart")
	}
	c, err := consumer.New(a.consumerOpts)
	if err != nil {
		return err
	}
	a.Consumer = c
	a.live.Store(c)
	return nil
}

// Start checks everything the configuration needs from outside its file
// with Preflight, and returns its *PreflightError (wrapping ErrNotStarted)
// having started nothing if anything is missing; then it brings
// everything up, in order, and undoes what it did if a step fails. The
// caller runs the consumer with Run and releases it all with Close.
//
// NATS (the embedded server, or a connection to nats.url) is started only
// when something uses it: the pipelines, the ingress, the console, a cache
// in JetStream KV. The proxy alone runs without it.
func Start(ctx context.Context, cfg *config.Config, o Options) (_ *App, err error) {
	o.defaults()
	warnings, err := Preflight(cfg, o)
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		o.Logger.Warn(w)
	}
	a := &App{Config: cfg, log: o.Logger}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("app: data directory: %w", err)
	}

	// Metrics.
	a.Metrics = ops.NewMetrics(ops.MetricsOptions{LLMStats: a.llmStats, WindowStats: a.windowStats, Ready: a.ready})
	for _, p := range cfg.Pipelines {
		a.Metrics.AddPipeline(p.Name)
		for _, e := range p.AllEffects() {
			kind := e.Sink
			if e.Preset != "" {
				kind = e.Preset
			}
			a.Metrics.AddSink(p.Name, kind)
			if e.Class == config.ClassOneShot {
				a.Metrics.AddSink(p.Name, "outbox") // the pipeline's publish to its outbox
			}
		}
		if p.Step != nil {
			a.Metrics.AddStep(p.Name, p.Step.Name)
		}
	}

	// The ops server first: /healthz answers, and /readyz says not ready,
	// while NATS is out of reach.
	if cfg.Metrics.Listen != "" && !o.NoOps {
		a.Ops = ops.NewServer(cfg.Metrics.Listen, a.Metrics, a.ready, o.Logger.With("component", "ops"))
		if a.OpsAddr, err = a.Ops.Start(); err != nil {
			return nil, fmt.Errorf("app: metrics server: %w", err)
		}
		a.closers = append(a.closers, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return a.Ops.Shutdown(ctx)
		})
		o.Logger.Info("metrics and health", "url", "http://"+a.OpsAddr+"/metrics")
	}

	// NATS.
	if err := a.startNATS(ctx, o); err != nil {
		return nil, err
	}

	// The answers a process before this one held for a KV ledger that had
	// not taken them are answered for from now: opening the ledger can take
	// a cluster's recovery, while other replicas take their intents over
	// and ask (consumer.ServeHeld).
	if dir := heldDir(cfg); dir != "" && NeedsLedger(cfg) && len(cfg.Pipelines) > 0 {
		key, err := EncryptionKey(cfg)
		if err != nil {
			return nil, err
		}
		if a.owner, err = consumer.Owner(dir); err != nil {
			return nil, err
		}
		stop, err := consumer.ServeHeld(a.Conn, dir, key, a.owner, o.Logger.With("component", "consumer"))
		if err != nil {
			return nil, fmt.Errorf("app: answering for the held answers: %w", err)
		}
		a.stopHeld = stop
		a.closers = append(a.closers, func() error { stop(); return nil })
	}

	// Ledger.
	if NeedsLedger(cfg) {
		l, closeLedger, err := openLedgerRetrying(ctx, cfg, a.JS, OpenLedgerOptions{Clock: o.Clock, Wrap: o.WrapLedger}, o.Logger)
		if err != nil {
			return nil, err
		}
		a.Ledger = l
		a.closers = append(a.closers, closeLedger)
	}

	// Model and cache.
	var client *openai.Client
	if needsModel(cfg) {
		if client, err = a.openModel(ctx, cfg, o); err != nil {
			return nil, err
		}
	}

	if len(cfg.Pipelines) > 0 {
		if err := a.startConsumer(cfg, client, o); err != nil {
			return nil, err
		}
	}
	if err := a.startIngress(o); err != nil {
		return nil, fmt.Errorf("app: webhook ingress: %w", err)
	}
	if err := a.startProxy(o); err != nil {
		return nil, fmt.Errorf("app: proxy: %w", err)
	}
	if len(cfg.Pipelines) > 0 {
		if err := a.startRecovery(o); err != nil {
			return nil, fmt.Errorf("app: admin service: %w", err)
		}
	}
	a.started.Store(true)
	return a, nil
}

// startNATS starts the embedded server (without nats.url) and connects to
// it or to the deployment, if anything needs NATS.
func (a *App) startNATS(ctx context.Context, o Options) error {
	cfg := a.Config
	if !NeedsNATS(cfg) {
		return nil
	}
	url := cfg.NATS.URL
	if url == "" {
		// The embedded server requires what the consumer authenticates
		// with (nats.token_file or ONCEGATE_NATS_TOKEN, an nkey seed, a
		// user), if anything: see natsrun.StartEmbeddedAuth.
		e, err := natsrun.StartEmbeddedAuth(cfg.DataDir, NATSOptions(cfg.NATS, "", o.Logger.With("component", "nats-server")))
		if errors.Is(err, natsrun.ErrStoreInUse) {
			return fmt.Errorf("%w: data directory %s is used by another Oncegate process. One process owns a data directory "+
				"(its embedded NATS store and its Badger ledger); to run several replicas, join one NATS deployment (nats.url) "+
				"with ledger.store: kv: %w", ErrLedgerInUse, cfg.DataDir, err)
		}
		if err != nil {
			return err
		}
		a.Embedded = e
		a.closers = append(a.closers, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return e.Shutdown(ctx)
		})
		url = e.ClientURL()
		o.Logger.Info("embedded NATS server", "url", url, "store", e.StoreDir(), "auth", e.Auth())
	}
	nc, err := connect(ctx, cfg, url, a.Embedded == nil, o.Logger.With("component", "nats"))
	if err != nil {
		return err
	}
	a.Conn = nc
	a.closers = append(a.closers, func() error { natsrun.Close(nc); return nil })
	a.JS, err = jetstream.New(nc)
	return err
}

// heldDir is where the consumer keeps a model step's answer until the
// ledger has it, "" if nowhere: a paid answer waits on this disk (sealed
// with the key, if one is set) until the KV ledger's bucket has it, as the
// LLM cache's held answers do, so that a replica killed while the servers
// do not answer leaves it to its next start. (A Badger ledger writes a
// note to the local disk at once: nothing to wait for.)
func heldDir(cfg *config.Config) string {
	if cfg.DataDir == "" || cfg.Ledger.Store != config.StoreKV {
		return ""
	}
	return filepath.Join(cfg.DataDir, "answers-held")
}

// jetStreamWait bounds how long Start retries opening the KV ledger while
// JetStream refuses for a reason that passes.
const jetStreamWait = time.Minute

// openLedgerRetrying is OpenLedger, retried for up to jetStreamWait while a
// KV ledger's bucket cannot be opened for a reason that passes (a cluster
// electing its meta leader; with an operator's accounts, an account whose
// JetStream is enabled only as its first client connects, whose first
// request gets "jetstream not enabled for account"). Each refusal is logged;
// past the wait, the last one is the error. A Badger ledger is opened once.
func openLedgerRetrying(ctx context.Context, cfg *config.Config, js jetstream.JetStream, lo OpenLedgerOptions, log *slog.Logger) (ledger.Ledger, func() error, error) {
	if cfg.Ledger.Store != config.StoreKV {
		return OpenLedger(ctx, cfg, js, lo)
	}
	wctx, cancel := context.WithTimeout(ctx, jetStreamWait)
	defer cancel()
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		l, closeLedger, err := OpenLedger(ctx, cfg, js, lo)
		if err == nil || !jsretry.Transient(err) || wctx.Err() != nil {
			return l, closeLedger, err
		}
		log.Warn("the ledger's bucket cannot be opened yet; retrying", "in", delay, "err", err)
		select {
		case <-time.After(delay):
		case <-wctx.Done():
			return nil, nil, err
		}
	}
}

// startConsumer makes the consumer of the pipelines, and watches their
// stream.
func (a *App) startConsumer(cfg *config.Config, client *openai.Client, o Options) error {
	tp, err := a.tracerProvider(cfg, o)
	if err != nil {
		return err
	}
	a.consumerOpts = consumer.Options{
		Config: cfg, Conn: a.Conn, Ledger: a.Ledger, Model: client, Cache: a.Cache,
		Observer: observer{a.Metrics}, Logger: o.Logger.With("component", "consumer"),
		Tracer: tp,
	}
	if dir := heldDir(cfg); a.Ledger != nil && dir != "" {
		key, err := EncryptionKey(cfg)
		if err != nil {
			return err
		}
		a.consumerOpts.HeldDir, a.consumerOpts.HeldKey = dir, key
		a.consumerOpts.Owner, a.consumerOpts.Answering = a.owner, a.stopHeld
	}
	if o.WrapSink != nil {
		a.consumerOpts.Sinks = map[string]sink.Sink{}
		for i := range cfg.Pipelines {
			p := &cfg.Pipelines[i]
			for _, e := range p.AllEffects() {
				name, path := p.Name, fmt.Sprintf("pipelines[%s].effect", p.Name)
				if e.Name != "" {
					name, path = p.Name+"/"+e.Name, fmt.Sprintf("pipelines[%s].effects[%s]", p.Name, e.Name)
				}
				s, err := consumer.NewSink(a.JS, path, e.Effect)
				if err != nil {
					return fmt.Errorf("app: pipeline %s: %w", p.Name, err)
				}
				a.consumerOpts.Sinks[name] = o.WrapSink(name, s)
			}
		}
	}
	if a.Consumer, err = consumer.New(a.consumerOpts); err != nil {
		return err
	}
	a.live.Store(a.Consumer)
	return a.startStreamWatch()
}

// ready is the ops server's readiness: the consumer's, once there is one;
// with no pipelines (the proxy alone), ready once started.
func (a *App) ready() error {
	if c := a.live.Load(); c != nil {
		return c.Ready()
	}
	if a.started.Load() && len(a.Config.Pipelines) == 0 {
		return nil
	}
	return errors.New("app: starting: not connected to NATS yet")
}

// connect connects to NATS. A deployment that is out of reach at start
// (NATS restarting, the network not up yet) is retried with backoff, 250ms
// doubling to 10s, until ctx ends, while /readyz says not ready; a
// configuration error (a credentials file that cannot be read) is not. The
// embedded server, started in this process, is connected to once.
func connect(ctx context.Context, cfg *config.Config, url string, retry bool, log *slog.Logger) (*nats.Conn, error) {
	wait := 250 * time.Millisecond
	for {
		nc, err := natsrun.Connect(ctx, url, NATSOptions(cfg.NATS, "oncegate", log))
		if err == nil || !retry || errors.As(err, new(*natsrun.FileError)) || ctx.Err() != nil {
			return nc, err
		}
		log.Warn("NATS is out of reach; retrying", "url", natsrun.Redact(url), "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("app: connecting to NATS: %w (last error: %w)", context.Cause(ctx), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// stepConcurrency is how many model calls the pipelines may have in
// flight at once.
func stepConcurrency(cfg *config.Config) int {
	n := 0
	for _, p := range cfg.Pipelines {
		if p.Step != nil {
			n += p.Concurrency
		}
	}
	return n
}

func needsModel(cfg *config.Config) bool {
	if cfg.ProxyOn() {
		return true
	}
	for _, p := range cfg.Pipelines {
		if p.Step != nil {
			return true
		}
	}
	return false
}

func (a *App) openModel(ctx context.Context, cfg *config.Config, o Options) (*openai.Client, error) {
	prices := llmcache.Prices{}
	for m, p := range cfg.LLM.Prices {
		prices[m] = llmcache.Price{Prompt: p.PromptPerMTok, Completion: p.CompletionPerMTok}
	}
	cache, err := a.openCache(ctx, llmcache.Options{
		TTL: cfg.LLM.Cache.TTL, MaxEntryBytes: int(cfg.LLM.Cache.MaxEntryBytes), Budget: cfg.LLM.Cache.BudgetTokens,
		// A model call that hangs must not hold its intent (whose retries
		// join the call) longer than one step may take.
		FillTimeout: cfg.LLM.Timeout,
		BudgetTTL:   cfg.Ledger.Retention, Prices: prices, Logger: o.Logger.With("component", "llmcache"),
		Endpoint: cacheEndpoint(cfg),
	})
	if err != nil {
		return nil, err
	}
	a.Cache = cache
	a.liveCache.Store(cache)
	a.closers = append(a.closers, cache.Close)

	base, key := cfg.LLM.BaseURL, ""
	if cfg.LLM.APIKeyEnv != "" {
		key = o.Getenv(cfg.LLM.APIKeyEnv)
	}
	if cfg.LLM.Standin {
		s, err := standin.New(o.Standin)
		if err != nil {
			return nil, err
		}
		url, stop, err := s.Start("127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		a.Standin = s
		a.closers = append(a.closers, stop)
		base, key = url, "standin"
		o.Logger.Warn("llm.standin: the offline stand-in model answers the model steps; its answers are made up", "url", url)
	}
	a.ModelURL = base
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if a.Standin != nil {
		tr = standin.Transport()
	}
	// Over HTTP/1.1 each call in flight holds a connection: keep as many
	// idle as the model steps may have in flight, or every call past the
	// idle limit dials anew. (Over HTTP/2, the OpenAI API's and the
	// stand-in's, calls share connections and this does not matter.)
	tr.MaxIdleConnsPerHost = max(256, stepConcurrency(cfg))
	a.closers = append(a.closers, func() error { tr.CloseIdleConnections(); return nil })
	oc := openai.DefaultConfig(key)
	oc.BaseURL = base
	rt, err := a.withRateLimit(tr)
	if err != nil {
		return nil, err
	}
	oc.HTTPClient = cache.HTTPClient(&http.Client{Transport: rt})
	a.upstream, a.modelKey = rt, key
	return openai.NewClientWithConfig(oc), nil
}

func (a *App) llmStats() []llmhook.StepStats {
	if c := a.liveCache.Load(); c != nil {
		return llmhook.Stats(c)
	}
	return nil
}

func (a *App) windowStats() []ops.WindowStats {
	c := a.live.Load()
	if c == nil {
		return nil
	}
	var out []ops.WindowStats
	for _, w := range c.WindowStats() {
		out = append(out, ops.WindowStats{
			Pipeline: w.Pipeline, Capacity: w.Capacity, Bytes: 16 * w.Capacity, // a window's table takes 16 bytes per key of capacity
			Live: w.Live, Hits: w.Hits, Evictions: w.Evictions, Expired: w.Expired,
		})
	}
	return out
}

// WaitReady waits until the process is ready (the consumer consuming:
// its Ready reports nil), or ctx is done; it is for a caller that started
// Run in a goroutine.
func (a *App) WaitReady(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		err := a.ready()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("app: the consumer did not become ready: %w (%w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// Outstanding returns how many triggers the pipelines' durable consumers
// hold that are not yet acknowledged or termed: pending delivery, or
// delivered and unacknowledged. It is the server's count, redeliveries
// included; a caller waits for it to reach 0 to know that every trigger
// published is settled.
//
// A consumer's counts can lag a publish the stream has already
// acknowledged (the consumer is told of new messages asynchronously), so a
// pipeline whose last trigger on its subject lies past its consumer's ack
// floor counts one outstanding even while its counts say 0.
func (a *App) Outstanding(ctx context.Context) (uint64, error) {
	st, err := a.JS.Stream(ctx, a.Config.Stream.Name)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, p := range a.Config.Pipelines {
		c, err := a.JS.Consumer(ctx, a.Config.Stream.Name, consumer.Durable(p.Name))
		if err != nil {
			return 0, err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return 0, err
		}
		held := info.NumPending + uint64(info.NumAckPending)
		if held == 0 {
			last, err := st.GetLastMsgForSubject(ctx, p.Subject)
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
			case err != nil:
				return 0, err
			case last.Sequence > info.AckFloor.Stream:
				held = 1
			}
		}
		n += held
	}
	return n, nil
}

// Run runs the consumer until ctx is done, then drains it; with no
// pipelines (the proxy alone), it waits for ctx and returns its error.
func (a *App) Run(ctx context.Context) error {
	if a.Consumer == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	return a.Consumer.Run(ctx)
}

// Close releases everything Start acquired, in reverse order.
func (a *App) Close() error {
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	a.closers = nil
	return errors.Join(errs...)
}
