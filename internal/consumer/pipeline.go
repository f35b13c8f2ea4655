package consumer

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/pkg/canon"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/window"
)

// Headers the consumer reads on triggers and writes on dead letters.
const (
	// HeaderReply, on a trigger, names a subject to which the consumer
	// publishes the stored result (a model step's effect body) when the
	// work is done, and again for a duplicate that reaches the ledger. A
	// duplicate the window stops gets no reply: the window keeps no results.
	HeaderReply = "Oncegate-Reply"
	// HeaderRunID, on a trigger of a run-scoped pipeline, carries the run
	// id when the payload has none at key.run_id_field.
	HeaderRunID = "Oncegate-Run-Id"

	HeaderReason     = "Oncegate-Reason"     // why the trigger was dead-lettered
	HeaderDetail     = "Oncegate-Detail"     // the error, for people
	HeaderPipeline   = "Oncegate-Pipeline"   // the pipeline that gave up
	HeaderSubject    = "Oncegate-Subject"    // the trigger's subject
	HeaderStream     = "Oncegate-Stream"     // the stream the message came from
	HeaderStreamSeq  = "Oncegate-Stream-Seq" // the message's stream sequence
	HeaderDeliveries = "Oncegate-Deliveries" // deliveries made
	HeaderKey        = "Oncegate-Key"        // the intent key, when it was derived
	HeaderTruncated  = "Oncegate-Truncated"  // "true" when the body kept is a prefix
	// HeaderMsgID keeps the trigger's own Nats-Msg-Id on its dead letter,
	// whose Nats-Msg-Id names the dead letter.
	HeaderMsgID = "Oncegate-Msg-Id"
)

// deadLetterHeaders are the headers a dead letter sets itself: a trigger's
// headers of these names are not copied onto its dead letter.
var deadLetterHeaders = []string{
	HeaderReason, HeaderDetail, HeaderPipeline, HeaderSubject, HeaderStream,
	HeaderStreamSeq, HeaderDeliveries, HeaderKey, HeaderTruncated, HeaderMsgID,
}

// maxDeadLetterBody is the most of a trigger's payload a dead letter keeps.
const maxDeadLetterBody = 64 << 10

// batchMax is the most triggers a batched gate takes through at once.
const batchMax = 256

type pipeline struct {
	c          *Consumer
	cfg        *config.Pipeline
	keyer      *dedupe.Keyer
	window     *window.Window
	deadLetter string
	runID      canon.Pointer
	hasRunID   bool
	status     canon.Pointer // key.status
	hasStatus  bool
	limits     canon.Options

	gate     *gate
	src      *source
	dispatch *dispatcher // one-shot effects only
	n        pipelineCounters
}

func newPipeline(c *Consumer, cfg *config.Pipeline) (*pipeline, error) {
	at := func(err error) error { return fmt.Errorf("consumer: pipeline %s: %w", cfg.Name, err) }
	spec := KeySpec(cfg)
	keyer, err := dedupe.NewKeyer(spec)
	if err != nil {
		return nil, at(err)
	}
	w, err := window.New(window.Options{Capacity: cfg.Window.Capacity, TTL: cfg.Window.TTL})
	if err != nil {
		return nil, at(err)
	}
	p := &pipeline{
		c: c, cfg: cfg, keyer: keyer, window: w,
		deadLetter: c.cfg.Stream.DeadLetter(cfg.Name),
		limits:     spec.Limits,
	}
	if cfg.Key.Scope == config.ScopeRun && cfg.Key.RunIDField != "" {
		if p.runID, err = canon.ParsePointer(cfg.Key.RunIDField); err != nil {
			return nil, at(err)
		}
		p.hasRunID = true
	}
	if cfg.Key.Status != "" {
		if p.status, err = canon.ParsePointer(cfg.Key.Status); err != nil {
			return nil, at(err)
		}
		p.hasStatus = true
	}
	g := &gate{
		c: c, pipeline: cfg.Name, pol: replayablePolicy(p),
		owner: c.opts.Owner, lease: c.cfg.Ledger.Lease,
		maxDeliver: cfg.MaxDeliver,
		sinkName:   cfg.Effect.Sink,
		maxResult:  ledger.DefaultMaxResultBytes, // the configuration sets none (app.LedgerOptions)
	}
	if cfg.Mode != config.ModeGateWindow {
		if c.opts.Ledger == nil {
			return nil, at(errors.New("needs a ledger"))
		}
		g.ledger = c.opts.Ledger
	}
	if cfg.Effect.IsSet() && cfg.Effect.Class != config.ClassOneShot {
		g.retry = retrySchedule(&cfg.Effect)
	}
	if s, ok := c.opts.Sinks[cfg.Name]; ok {
		g.sink = s
	} else if cfg.Effect.IsSet() {
		if g.sink, err = NewSink(c.js, fmt.Sprintf("pipelines[%s].effect", cfg.Name), &cfg.Effect); err != nil {
			return nil, at(err)
		}
	}
	if cfg.Step != nil {
		if c.opts.Model == nil {
			return nil, at(errors.New("has a model step but no model client"))
		}
		if g.step, err = newStep(c, cfg); err != nil {
			return nil, at(err)
		}
		g.stepName = cfg.Step.Name
	}
	if usesMile(cfg) {
		// The last mile (render.go): templates, named effects, routes,
		// filters. A one-shot effect is published to the outbox and sent
		// by the dispatcher, with the sink its entry names.
		m, oneShot, err := newMile(p, g.sink)
		if err != nil {
			return nil, at(err)
		}
		g.mile = m
		if oneShot != nil {
			p.dispatch = newDispatcher(p, g, oneShot)
		}
	} else if cfg.Effect.Class == config.ClassOneShot {
		// The gate publishes to the outbox; the dispatcher sends.
		p.dispatch = newDispatcher(p, g, g.sink)
		if g.sink, err = sink.NewJetStream(c.js, sink.JetStreamOptions{Subject: OutboxSubject(cfg.Name)}); err != nil {
			return nil, at(err)
		}
		g.sinkName = "outbox"
	}
	// A gate (no model step) whose effect is a JetStream publish takes its
	// triggers in batches: claimed in one write, published without waiting
	// one by one, committed in one write.
	batch := 1
	if js, ok := g.sink.(*sink.JetStream); ok && g.step == nil && g.mile == nil {
		g.js, batch = js, batchMax
	}
	g.set = &settler{
		c: c, pipeline: cfg.Name, deadLetter: p.deadLetter, maxDeliver: cfg.MaxDeliver,
		retryDelay: cfg.RetryDelay, ledger: g.ledger, counts: g.pol.counts,
		effectOf: func(*Trigger) string { return cmp.Or(cfg.Effect.Preset, g.sinkName) },
	}
	g.use(pipelineStages(p, g)...)
	p.gate = g
	workers := cfg.Concurrency
	if batch > 1 {
		workers = max(1, cfg.Concurrency/16)
	}
	p.src = &source{
		c: c, name: cfg.Name, stream: c.cfg.Stream.Name, durable: Durable(cfg.Name),
		batch: batch, workers: workers, pull: min(max(cfg.Concurrency*2, 64, 2*batch), cfg.MaxAckPending),
		handle: g.run, config: p.consumerConfig,
	}
	return p, nil
}

// Durable returns the name of a pipeline's durable consumer.
func Durable(pipeline string) string { return "oncegate-" + pipeline }

// consumerConfig is the pipeline's durable consumer. The server delivers
// without limit: Oncegate counts the deliveries itself and dead-letters a
// trigger past MaxDeliver, so that one whose last delivery died with its
// process comes back to be dead-lettered instead of being dropped.
//
// A new durable consumer on a stream that keeps acked triggers (limits
// retention) replays what the stream holds. The ledger answers a replay of
// committed work (its retention exceeds the stream's max age); a
// gate-window pipeline has no ledger, so its consumer starts at the
// effect stream's duplicate window ago, the oldest trigger whose effect
// the stream would still drop.
func (p *pipeline) consumerConfig() jetstream.ConsumerConfig {
	cc := p.baseConsumerConfig()
	if p.c.cfg.Stream.Retention == config.RetentionLimits && p.cfg.Mode == config.ModeGateWindow {
		from := time.Now().Add(-p.c.cfg.Stream.Duplicates)
		cc.DeliverPolicy, cc.OptStartTime = jetstream.DeliverByStartTimePolicy, &from
	}
	return cc
}

func (p *pipeline) baseConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       Durable(p.cfg.Name),
		Description:   "Oncegate pipeline " + p.cfg.Name,
		FilterSubject: p.cfg.Subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       p.cfg.AckWait,
		MaxDeliver:    -1,
		BackOff:       p.cfg.Backoff,
		MaxAckPending: p.cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// keepEvery is the longest a held trigger may go without being marked in
// progress and its lease renewed: the shorter of its ack deadline and the
// lease.
func (p *pipeline) keepEvery(t *Trigger) time.Duration {
	every := min(p.cfg.AckWait, p.c.cfg.Ledger.Lease)
	if len(p.cfg.Backoff) > 0 {
		// With a BackOff, the server's redelivery timer of delivery n is
		// BackOff[n-1] rather than AckWait.
		n := max(int(t.deliveries()), 1)
		every = min(every, p.cfg.Backoff[min(n, len(p.cfg.Backoff))-1])
	}
	return every
}

// keyOf keys a trigger, or returns the dead-letter verdict for a payload
// that cannot be keyed.
func (p *pipeline) keyOf(t *Trigger) *verdict {
	data := t.msg.Data()
	var runID string
	if p.cfg.Key.Scope == config.ScopeRun {
		runID = t.msg.Headers().Get(HeaderRunID)
		if p.hasRunID {
			if id, err := p.lookupRunID(data); err == nil && id != "" {
				runID = id
			}
		}
	}
	var header func(string) string
	if len(p.cfg.Key.Headers) > 0 {
		header = t.msg.Headers().Get
	}
	var in dedupe.Intent
	var raw []byte
	var hasStatus bool
	var err error
	if p.hasStatus {
		in, raw, hasStatus, err = p.keyer.LookupIntent(runID, header, data, p.status)
	} else {
		in, err = p.keyer.HeaderIntent(runID, header, data)
	}
	if err != nil {
		v := dead(nil, classify(err), err)
		return &v
	}
	t.key, t.intent, t.fp = in.Key, in.Key, in.Fingerprint
	if hasStatus {
		// With key.status, a trigger with a status is keyed by its
		// identity (the key above) and its status.
		status := statusText(raw)
		if p.gate.mile != nil {
			// Templates see the status and the identity; a pipeline
			// without them keeps no last-mile state.
			if t.lm == nil {
				t.lm = &mileState{}
			}
			t.lm.status, t.lm.identity = status, in.Key
		}
		t.key = StatusKey(in.Key, status)
		t.intent = t.key
	}
	return nil
}

// statusText is the text of a key.status value: a JSON string's content,
// any other value as its canonical JSON. A canonical string without an
// escape is its content in quotes, read without decoding (the common case,
// on every trigger of the pipeline).
func statusText(raw []byte) string {
	if len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	var status string
	if json.Unmarshal(raw, &status) != nil {
		return string(raw)
	}
	return status
}

func (p *pipeline) lookupRunID(data []byte) (string, error) {
	c, err := canon.New(p.limits)
	if err != nil {
		return "", err
	}
	doc, err := c.Append(nil, data)
	if err != nil {
		return "", err
	}
	v, ok, err := canon.Lookup(doc, p.runID)
	if err != nil || !ok {
		return "", err
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s, nil
	}
	return string(v), nil
}

// classify names the reason a payload could not be keyed.
func classify(err error) outcome.Reason {
	switch {
	case errors.Is(err, canon.ErrTooLarge), errors.Is(err, canon.ErrTooDeep),
		errors.Is(err, canon.ErrStringTooLong), errors.Is(err, canon.ErrTooManyMembers):
		return outcome.ReasonTooLarge
	case errors.Is(err, canon.ErrNotFound), errors.Is(err, dedupe.ErrNoRunID), errors.Is(err, dedupe.ErrMissingHeader):
		return outcome.ReasonMissingField
	}
	return outcome.ReasonInvalidJSON
}
