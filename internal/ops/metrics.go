package ops

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/version"
)

// namespace prefixes every Oncegate metric name.
const namespace = "oncegate"

// other is the label value recorded for a Guard, ClaimStatus, Outcome,
// Reason or Ack outside its constants, so that a bad conversion costs one
// series rather than an unbounded number.
const other = "other"

// ClaimStatus is what a ledger claim (Begin) answered.
type ClaimStatus string

// The claim statuses.
const (
	ClaimNew       ClaimStatus = "new"        // this worker holds a fresh lease
	ClaimCommitted ClaimStatus = "committed"  // the work was done before
	ClaimHeld      ClaimStatus = "held"       // another worker's lease is live
	ClaimTakenOver ClaimStatus = "taken_over" // a dead holder's lease was taken over
	ClaimFailed    ClaimStatus = "failed"     // the ledger returned an error
)

// Outcome is how one effect attempt ended.
type Outcome string

// The effect outcomes.
const (
	OutcomeDone      Outcome = "done"       // the sink performed the effect
	OutcomeDuplicate Outcome = "duplicate"  // the sink had performed it already
	OutcomeRetry     Outcome = "retry"      // a retryable failure
	OutcomeDead      Outcome = "dead"       // a permanent failure: dead-lettered
	OutcomeKeyReused Outcome = "key_reused" // the target holds the key with another body: the effect exists
)

// Ack is how the consumer settled, or extended, a JetStream message.
type Ack string

// The acknowledgement kinds.
const (
	AckAck        Ack = "ack"
	AckNak        Ack = "nak"
	AckTerm       Ack = "term"
	AckInProgress Ack = "in_progress"
)

var (
	claims   = []ClaimStatus{ClaimNew, ClaimCommitted, ClaimHeld, ClaimTakenOver, ClaimFailed}
	outcomes = []Outcome{OutcomeDone, OutcomeDuplicate, OutcomeRetry, OutcomeDead, OutcomeKeyReused}
	acks     = []Ack{AckAck, AckNak, AckTerm, AckInProgress}
)

// label returns v if it is one of known, else "other".
func label[T ~string](v T, known []T) string {
	if slices.Contains(known, v) {
		return string(v)
	}
	return other
}

// Histogram bucket bounds, in seconds.
var (
	// effectBuckets covers a sink call from 1ms (a file, a loopback
	// publish) to 30s (an HTTP API retrying with backoff).
	effectBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	// stepBuckets covers a model step from a cache hit (milliseconds) to a
	// long completion (two minutes).
	stepBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
)

// WindowStats is one pipeline's duplicate window, as its metrics see it;
// fill it from window.Window.Stats.
type WindowStats struct {
	Pipeline  string
	Capacity  int    // keys the window holds without eviction
	Bytes     int    // memory held by the table
	Live      int    // keys currently live
	Hits      uint64 // lookups that found the key live, since start
	Evictions uint64 // live keys pushed out, since start
	Expired   uint64 // slots reclaimed after their key expired, since start
}

// MetricsOptions configures [NewMetrics]. The zero value is valid: the
// metrics then have no LLM cache or window figures.
type MetricsOptions struct {
	// LLMStats returns the LLM cache's cumulative figures, such as
	// llmhook.Stats of a cache. It is called on every scrape, possibly
	// concurrently, and must be safe for that. Rows with the same
	// namespace and step are summed. The default (nil) exposes no
	// oncegate_llm_* metrics.
	LLMStats func() []llmhook.StepStats
	// WindowStats returns each pipeline's window figures. It is called on
	// every scrape, possibly concurrently; window.Window.Stats scans the
	// whole table, which is why it belongs here and not on the hot path.
	// Rows with the same pipeline are summed. The default (nil) exposes
	// no oncegate_window_* metrics.
	WindowStats func() []WindowStats
	// Ready reports the process's readiness, as /readyz does: nil when
	// ready. It is called on every scrape. When set, oncegate_ready is 1
	// while it returns nil and 0 otherwise, so that an alert can watch
	// readiness. The default (nil) exposes no oncegate_ready.
	Ready func() error
}

// Metrics holds Oncegate's Prometheus collectors on a registry of its own,
// with the Go runtime and process collectors.
//
// The recording methods take the pipeline name and a typed label value,
// never a label string, and are safe for concurrent use by multiple
// goroutines. A nil *Metrics records nothing, so code under test can run
// without one.
type Metrics struct {
	reg *prometheus.Registry

	triggers     *prometheus.CounterVec   // pipeline
	duplicates   *prometheus.CounterVec   // pipeline, guard
	claims       *prometheus.CounterVec   // pipeline, status
	effects      *prometheus.CounterVec   // pipeline, sink, outcome
	effectTime   *prometheus.HistogramVec // pipeline, sink
	stepTime     *prometheus.HistogramVec // pipeline, step
	deadLetters  *prometheus.CounterVec   // pipeline, reason
	acks         *prometheus.CounterVec   // pipeline, kind
	settleTime   *prometheus.HistogramVec // pipeline, verdict
	pendingLease *prometheus.GaugeVec     // pipeline
	inflight     *prometheus.GaugeVec     // pipeline
	replyRefused *prometheus.CounterVec   // pipeline
	panics       *prometheus.CounterVec   // pipeline
	filtered     *prometheus.CounterVec   // pipeline, rule
	routes       *prometheus.CounterVec   // pipeline, route
	ledgerDown   *prometheus.CounterVec   // pipeline
	rl           rateLimitMetrics
	llmStats     func() []llmhook.StepStats
	redriven     *prometheus.CounterVec // pipeline, reason
	bl           backlogMetrics

	mu    sync.Mutex
	steps []llmhook.StepStats // zero rows of the steps AddStep named
}

// NewMetrics returns Metrics registered on a new registry.
func NewMetrics(opts MetricsOptions) *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: name, Help: help, Buckets: buckets,
		}, labels)
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		triggers: counter("triggers_total",
			"Triggers received from JetStream, redeliveries included.", "pipeline"),
		duplicates: counter("duplicates_total",
			"Duplicate triggers dropped, by the guard that caught them (window, ledger, stream).", "pipeline", "guard"),
		claims: counter("ledger_claims_total",
			"Ledger claims, by answer (new, committed, held, taken_over, failed).", "pipeline", "status"),
		effects: counter("effects_total",
			"Effect attempts, by outcome (done, duplicate, retry, dead).", "pipeline", "sink", "outcome"),
		effectTime: histogram("effect_seconds",
			"Time one effect attempt took in its sink, whatever its outcome.", effectBuckets, "pipeline", "sink"),
		stepTime: histogram("step_seconds",
			"Time one model step took, cache hits included.", stepBuckets, "pipeline", "step"),
		deadLetters: counter("dead_letters_total",
			"Triggers sent to the dead-letter subject, by reason.", "pipeline", "reason"),
		acks: counter("acks_total",
			"JetStream acknowledgements sent, by kind (ack, nak, term, in_progress).", "pipeline", "kind"),
		settleTime: histogram("settle_seconds",
			"Time from the gate taking a trigger to its ack, nak or dead letter, by verdict (ack, nak, dead).", stepBuckets, "pipeline", "verdict"),
		pendingLease: gauge("pending_leases",
			"Ledger leases this process holds: taken, and not yet committed, released or failed.", "pipeline"),
		inflight: gauge("inflight",
			"Triggers being worked on now.", "pipeline"),
		replyRefused: counter("replies_refused_total",
			"Oncegate-Reply subjects refused: not under stream.reply_prefixes.", "pipeline"),
		panics: counter("panics_total",
			"Panics recovered in a trigger's work; each was settled as the trigger's failed try.", "pipeline"),
		filtered: counter("filtered_total",
			"Triggers filtered out, acked and never claimed, paid for or sent: by the pipeline's when: condition (rule when), or matched by no route (rule routes, decided after the step).", "pipeline", "rule"),
		routes: counter("routes_total",
			"Route decisions taken (each intent once; a redelivery takes the recorded route without counting it again).", "pipeline", "route"),
		ledgerDown: counter("ledger_unavailable_total",
			"Claims the ledger could not answer (unreachable, leaderless, refusing writes): the trigger waits, and the attempt is not a try.", "pipeline"),
	}
	build := version.Get()
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "The running build: 1, labelled with the version, the commit and the Go version.",
		ConstLabels: prometheus.Labels{"version": build.Version, "commit": build.Commit, "goversion": build.Go},
	})
	buildInfo.Set(1)
	m.reg.MustRegister(
		buildInfo,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.triggers, m.duplicates, m.claims, m.effects, m.effectTime, m.stepTime,
		m.deadLetters, m.acks, m.settleTime, m.pendingLease, m.inflight, m.replyRefused,
		m.panics, m.ledgerDown, m.filtered, m.routes,
	)
	m.registerRateLimit()
	m.llmStats = opts.LLMStats
	m.registerRedrive()
	m.registerBacklog()
	if opts.LLMStats != nil {
		m.reg.MustRegister(newLLMCollector(opts.LLMStats, m.knownSteps))
	}
	if opts.WindowStats != nil {
		m.reg.MustRegister(newWindowCollector(opts.WindowStats))
	}
	if ready := opts.Ready; ready != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "ready",
			Help: "1 while the process is ready (what /readyz answers 200 for), else 0.",
		}, func() float64 {
			if ready() != nil {
				return 0
			}
			return 1
		}))
	}
	return m
}

// Registry returns the registry the metrics are on, to serve it or to
// register more collectors; nil for a nil *Metrics.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// AddPipeline creates the pipeline's series for every guard, claim status,
// dead-letter reason and ack kind, and its gauges, so that they are
// exposed at 0 before the first event. Calling it again is harmless.
func (m *Metrics) AddPipeline(name string) {
	if m == nil {
		return
	}
	m.triggers.WithLabelValues(name)
	for _, g := range outcome.Guards {
		m.duplicates.WithLabelValues(name, string(g))
	}
	for _, s := range claims {
		m.claims.WithLabelValues(name, string(s))
	}
	for _, r := range outcome.Reasons {
		m.deadLetters.WithLabelValues(name, string(r))
	}
	for _, a := range acks {
		m.acks.WithLabelValues(name, string(a))
	}
	for _, v := range verdicts {
		m.settleTime.WithLabelValues(name, v)
	}
	m.pendingLease.WithLabelValues(name)
	m.inflight.WithLabelValues(name)
	m.replyRefused.WithLabelValues(name)
	m.addRedrive(name)
	m.panics.WithLabelValues(name)
	m.ledgerDown.WithLabelValues(name)
	m.addBacklog(name)
	for _, r := range FilterRules {
		m.filtered.WithLabelValues(name, r)
	}
}

// FilterRules are the values of oncegate_filtered_total's rule label.
var FilterRules = []string{"when", "routes"}

// Filtered counts a trigger filtered out by rule (one of FilterRules).
func (m *Metrics) Filtered(pipeline, rule string) {
	if m == nil {
		return
	}
	m.filtered.WithLabelValues(pipeline, rule).Inc()
}

// Routed counts a route decision.
func (m *Metrics) Routed(pipeline, route string) {
	if m == nil {
		return
	}
	m.routes.WithLabelValues(pipeline, route).Inc()
}

// Panic counts a panic recovered in a trigger's work.
func (m *Metrics) Panic(pipeline string) {
	if m == nil {
		return
	}
	m.panics.WithLabelValues(pipeline).Inc()
}

// LedgerUnavailable counts a claim the ledger could not answer.
func (m *Metrics) LedgerUnavailable(pipeline string) {
	if m == nil {
		return
	}
	m.ledgerDown.WithLabelValues(pipeline).Inc()
}

// ReplyRefused counts a trigger whose Oncegate-Reply subject was refused.
func (m *Metrics) ReplyRefused(pipeline string) {
	if m == nil {
		return
	}
	m.replyRefused.WithLabelValues(pipeline).Inc()
}

// AddSink creates the pipeline's effect series for sink (its kind:
// "jetstream", "http", "file") and every outcome, at 0.
func (m *Metrics) AddSink(pipeline, sink string) {
	if m == nil {
		return
	}
	for _, o := range outcomes {
		m.effects.WithLabelValues(pipeline, sink, string(o))
	}
	m.effectTime.WithLabelValues(pipeline, sink)
}

// AddStep creates the pipeline's step duration series, empty.
func (m *Metrics) AddStep(pipeline, step string) {
	if m == nil {
		return
	}
	m.stepTime.WithLabelValues(pipeline, step)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.steps {
		if s.Namespace == pipeline && s.Step == step {
			return
		}
	}
	m.steps = append(m.steps, llmhook.StepStats{Namespace: pipeline, Step: step})
}

// knownSteps returns a zero row for each step AddStep named, so that its
// LLM series exist before its first model call.
func (m *Metrics) knownSteps() []llmhook.StepStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.steps)
}

// Trigger counts a trigger received, redeliveries included.
func (m *Metrics) Trigger(pipeline string) {
	if m == nil {
		return
	}
	m.triggers.WithLabelValues(pipeline).Inc()
}

// Duplicate counts a duplicate trigger dropped by guard g.
func (m *Metrics) Duplicate(pipeline string, g outcome.Guard) {
	if m == nil {
		return
	}
	m.duplicates.WithLabelValues(pipeline, label(g, outcome.Guards)).Inc()
}

// Claim counts a ledger claim that answered s.
func (m *Metrics) Claim(pipeline string, s ClaimStatus) {
	if m == nil {
		return
	}
	m.claims.WithLabelValues(pipeline, label(s, claims)).Inc()
}

// Effect counts an effect attempt on sink (its kind, never its URL or
// subject) that ended with o after took.
func (m *Metrics) Effect(pipeline, sink string, o Outcome, took time.Duration) {
	if m == nil {
		return
	}
	m.effects.WithLabelValues(pipeline, sink, label(o, outcomes)).Inc()
	m.effectTime.WithLabelValues(pipeline, sink).Observe(took.Seconds())
}

// Step records a model step that took took, whether the cache answered
// or the model did.
func (m *Metrics) Step(pipeline, step string, took time.Duration) {
	if m == nil {
		return
	}
	m.stepTime.WithLabelValues(pipeline, step).Observe(took.Seconds())
}

// DeadLetter counts a trigger dead-lettered for r.
func (m *Metrics) DeadLetter(pipeline string, r outcome.Reason) {
	if m == nil {
		return
	}
	m.deadLetters.WithLabelValues(pipeline, label(r, outcome.Reasons)).Inc()
}

// Ack counts an acknowledgement of kind k sent to JetStream.
func (m *Metrics) Ack(pipeline string, k Ack) {
	if m == nil {
		return
	}
	m.acks.WithLabelValues(pipeline, label(k, acks)).Inc()
}

// verdicts are the labels of oncegate_settle_seconds.
var verdicts = []string{"ack", "nak", "dead"}

// SettleTime records how long the gate took over a trigger, from taking it
// to its verdict carried out.
func (m *Metrics) SettleTime(pipeline, verdict string, took time.Duration) {
	if m == nil {
		return
	}
	m.settleTime.WithLabelValues(pipeline, verdict).Observe(took.Seconds())
}

// AddPendingLeases adds delta to the number of the pipeline's ledger leases
// this process holds (taken, and not yet committed, released or failed).
func (m *Metrics) AddPendingLeases(pipeline string, delta int) {
	if m == nil {
		return
	}
	m.pendingLease.WithLabelValues(pipeline).Add(float64(delta))
}

// AddInflight adds delta (+1 when work on a trigger starts, -1 when it
// ends) to the pipeline's triggers in flight.
func (m *Metrics) AddInflight(pipeline string, delta int) {
	if m == nil {
		return
	}
	m.inflight.WithLabelValues(pipeline).Add(float64(delta))
}
