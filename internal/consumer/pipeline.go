package consumer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/pkg/canon"
	"github.com/oncegate/oncegate/pkg/dedupe"
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
	HeaderStreamSeq  = "Oncegate-Stream-Seq" // the trigger's stream sequence
	HeaderDeliveries = "Oncegate-Deliveries" // deliveries made
	HeaderKey        = "Oncegate-Key"        // the intent key, when it was derived
	HeaderTruncated  = "Oncegate-Truncated"  // "true" when the body kept is a prefix
)

// maxDeadLetterBody is the most of a trigger's payload a dead letter keeps.
const maxDeadLetterBody = 64 << 10

type pipeline struct {
	c          *Consumer
	cfg        *config.Pipeline
	keyer      *dedupe.Keyer
	window     *dedupe.Window
	ledger     dedupe.Ledger // nil in gate-window mode
	sink       sink.Sink
	sinkName   string
	step       *step // nil for gates
	deadLetter string
	lease      time.Duration
	volatile   bool // claims need not survive a crash: the effect is replayable
	maxResult  int  // the most a committed result may hold
	runID      canon.Pointer
	hasRunID   bool
	limits     canon.Options

	dispatch *dispatcher // one-shot effects only

	n    pipelineCounters
	wg   sync.WaitGroup
	sem  chan struct{}
	cons jetstream.Consumer
}

func newPipeline(c *Consumer, cfg *config.Pipeline) (*pipeline, error) {
	at := func(err error) error { return fmt.Errorf("consumer: pipeline %s: %w", cfg.Name, err) }
	spec := cfg.KeySpec()
	keyer, err := dedupe.NewKeyer(spec)
	if err != nil {
		return nil, at(err)
	}
	w, err := dedupe.NewWindow(dedupe.WindowOptions{Capacity: cfg.Window.Capacity, TTL: cfg.Window.TTL})
	if err != nil {
		return nil, at(err)
	}
	p := &pipeline{
		c: c, cfg: cfg, keyer: keyer, window: w,
		deadLetter: c.cfg.Stream.DeadLetter(cfg.Name),
		lease:      c.cfg.Ledger.Lease,
		volatile:   cfg.Effect.Class == config.ClassReplayable,
		maxResult:  cmp.Or(c.cfg.Ledger.Options().MaxResultBytes, dedupe.DefaultMaxResultBytes),
		sinkName:   cfg.Effect.Sink,
		sem:        make(chan struct{}, cfg.Concurrency),
		limits:     spec.Limits,
	}
	if cfg.Mode != config.ModeGateWindow {
		if c.opts.Ledger == nil {
			return nil, at(errors.New("needs a ledger"))
		}
		p.ledger = c.opts.Ledger
	}
	if cfg.Key.Scope == config.ScopeRun && cfg.Key.RunIDField != "" {
		if p.runID, err = canon.ParsePointer(cfg.Key.RunIDField); err != nil {
			return nil, at(err)
		}
		p.hasRunID = true
	}
	if s, ok := c.opts.Sinks[cfg.Name]; ok {
		p.sink = s
	} else if p.sink, err = BuildSink(c.js, &cfg.Effect); err != nil {
		return nil, at(err)
	}
	if cfg.Effect.Class == config.ClassOneShot {
		// The flow writes to the outbox; the dispatcher sends.
		p.dispatch = &dispatcher{p: p, sink: p.sink}
		if p.sink, err = sink.NewJetStream(c.js, sink.JetStreamOptions{Subject: OutboxSubject(cfg.Name)}); err != nil {
			return nil, at(err)
		}
		p.sinkName = "outbox"
	}
	if cfg.Step != nil {
		if c.opts.Model == nil {
			return nil, at(errors.New("has a model step but no model client"))
		}
		if p.step, err = newStep(c, cfg); err != nil {
			return nil, at(err)
		}
	}
	return p, nil
}

// BuildSink returns the sink an effect's configuration describes. Secret
// header values come from the environment variables it names.
func BuildSink(js jetstream.JetStream, e *config.Effect) (sink.Sink, error) {
	switch e.Sink {
	case config.SinkJetStream:
		return sink.NewJetStream(js, sink.JetStreamOptions{Subject: e.Subject})
	case config.SinkHTTP:
		h := map[string]string{}
		for name, env := range e.HeadersEnv {
			v, ok := os.LookupEnv(env)
			if !ok {
				return nil, fmt.Errorf("effect header %s: environment variable %s is not set", name, env)
			}
			h[name] = v
		}
		return sink.NewHTTP(sink.HTTPOptions{URL: e.URL, Header: h, OneShot: e.Class == config.ClassOneShot})
	case config.SinkFile:
		return sink.NewFile(sink.FileOptions{Dir: e.Dir})
	}
	return nil, fmt.Errorf("unknown sink %q", e.Sink)
}

// Durable returns the name of a pipeline's durable consumer.
func Durable(pipeline string) string { return "oncegate-" + pipeline }

func (p *pipeline) durable() string { return Durable(p.cfg.Name) }

func (p *pipeline) setup(ctx context.Context) error {
	cc := jetstream.ConsumerConfig{
		Durable:       p.durable(),
		Description:   "Oncegate pipeline " + p.cfg.Name,
		FilterSubject: p.cfg.Subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       p.cfg.AckWait,
		MaxDeliver:    p.cfg.MaxDeliver,
		BackOff:       p.cfg.Backoff,
		MaxAckPending: p.cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	cons, err := p.c.js.CreateOrUpdateConsumer(ctx, p.c.cfg.Stream.Name, cc)
	if err != nil {
		return fmt.Errorf("consumer: pipeline %s: durable consumer: %w", p.cfg.Name, err)
	}
	p.cons = cons
	return nil
}

// consume starts taking messages. Each is handled on its own goroutine, at
// most Concurrency at a time; the callback blocks while all are busy, which
// is the back-pressure.
func (p *pipeline) consume() (jetstream.ConsumeContext, error) {
	if js := p.batchSink(); js != nil {
		return p.consumeBatched(js)
	}
	batch := min(max(p.cfg.Concurrency*2, 64), p.cfg.MaxAckPending)
	cc, err := p.cons.Consume(func(m jetstream.Msg) {
		p.sem <- struct{}{}
		p.wg.Add(1)
		go func() {
			defer func() { <-p.sem; p.wg.Done() }()
			p.handle(m)
		}()
	},
		jetstream.PullMaxMessages(batch),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			p.c.log.Warn("consume error", "pipeline", p.cfg.Name, "err", err)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("consumer: pipeline %s: consume: %w", p.cfg.Name, err)
	}
	return cc, nil
}

// verdict is how a trigger is settled: the one decision handle makes.
type verdict struct {
	kind   settleKind
	delay  time.Duration // for nak; 0 leaves it to the consumer's BackOff
	reason Reason        // for dead
	err    error         // for dead and nak, for the logs and the dead letter
	key    *dedupe.Key
	reply  []byte // the stored result, for HeaderReply
	token  uint64 // the lease the work held, for a nak after a claim
}

type settleKind uint8

const (
	settleAck settleKind = iota
	settleNak
	settleDead
)

func ack(k dedupe.Key, reply []byte) verdict { return verdict{kind: settleAck, key: &k, reply: reply} }

func nak(k *dedupe.Key, delay time.Duration, err error) verdict {
	return verdict{kind: settleNak, key: k, delay: delay, err: err}
}

func dead(k *dedupe.Key, r Reason, err error) verdict {
	return verdict{kind: settleDead, key: k, reason: r, err: err}
}

// handle runs the flow for one delivery and settles it.
func (p *pipeline) handle(m jetstream.Msg) {
	p.n.deliveries.Add(1)
	p.c.obs.Trigger(p.cfg.Name)
	p.c.obs.InFlight(p.cfg.Name, 1)
	defer p.c.obs.InFlight(p.cfg.Name, -1)
	ctx := context.Background()
	var v verdict
	switch p.cfg.Mode {
	case config.ModeGateWindow:
		v = p.gateWindow(ctx, m)
	default:
		v = p.flow(ctx, m)
	}
	p.settle(ctx, m, v)
}

// intent keys the trigger, or returns the dead-letter verdict for a
// payload that cannot be keyed.
func (p *pipeline) intent(m jetstream.Msg) (dedupe.Intent, *verdict) {
	data := m.Data()
	var runID string
	if p.cfg.Key.Scope == config.ScopeRun {
		runID = m.Headers().Get(HeaderRunID)
		if p.hasRunID {
			if id, err := p.lookupRunID(data); err == nil && id != "" {
				runID = id
			}
		}
	}
	in, err := p.keyer.RunIntent(runID, data)
	if err != nil {
		v := dead(nil, classify(err), err)
		return dedupe.Intent{}, &v
	}
	return in, nil
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
func classify(err error) Reason {
	switch {
	case errors.Is(err, canon.ErrTooLarge), errors.Is(err, canon.ErrTooDeep),
		errors.Is(err, canon.ErrStringTooLong), errors.Is(err, canon.ErrTooManyMembers):
		return ReasonTooLarge
	case errors.Is(err, canon.ErrNotFound), errors.Is(err, dedupe.ErrNoRunID):
		return ReasonMissingField
	}
	return ReasonInvalidJSON
}

// duplicate counts a trigger stopped as a duplicate by the window or the
// ledger.
func (p *pipeline) duplicate(g Guard) {
	if g == GuardWindow {
		p.n.dupWindow.Add(1)
	} else {
		p.n.dupLedger.Add(1)
	}
	p.c.obs.Duplicate(p.cfg.Name, g)
}

// gateWindow forwards the first occurrence of each key within the
// window's TTL; memory only, nothing durable.
func (p *pipeline) gateWindow(ctx context.Context, m jetstream.Msg) verdict {
	in, bad := p.intent(m)
	if bad != nil {
		return *bad
	}
	k := in.Key
	if p.window.SeenOrAdd(k.Short()) {
		p.duplicate(GuardWindow)
		return ack(k, nil)
	}
	res, err := p.deliver(ctx, k, m.Data())
	if err != nil {
		p.window.Remove(k.Short())
		return p.effectFailed(&k, err)
	}
	p.effectDone(res)
	return ack(k, nil)
}

// flow is the durable path: window, ledger claim, model step, effect,
// commit.
func (p *pipeline) flow(ctx context.Context, m jetstream.Msg) verdict {
	in, bad := p.intent(m)
	if bad != nil {
		return *bad
	}
	k := in.Key
	if p.window.Contains(k.Short()) {
		p.duplicate(GuardWindow)
		return ack(k, nil)
	}
	// The owner names the process and the stream message it works on, so
	// that a Begin that finds the work held can tell a duplicate message
	// (safe to ack: the holder's own message carries the work, and comes
	// back if the holder dies) from a redelivery of the holder's message.
	ref := msgRef(m)
	owner := p.c.opts.Owner + "#" + ref
	// A replayable effect redone after a crash is harmless, so its claim
	// need not survive one: the ledger may keep it in memory (see
	// dedupe.BeginOptions.Volatile). A one-shot effect's must.
	claim, err := p.ledger.Begin(ctx, k, dedupe.BeginOptions{Owner: owner, Fingerprint: in.Fingerprint, Lease: p.lease, Volatile: p.volatile})
	if err != nil {
		if errors.Is(err, dedupe.ErrFingerprintMismatch) {
			return dead(&k, ReasonMismatch, err)
		}
		return nak(&k, 0, fmt.Errorf("ledger begin: %w", err))
	}
	p.c.obs.Claim(p.cfg.Name, claim.Status)
	switch claim.Status {
	case dedupe.StatusCommitted:
		p.window.Add(k.Short())
		p.duplicate(GuardLedger)
		return ack(k, claim.Record.Result.Response)
	case dedupe.StatusHeld:
		if !strings.HasSuffix(claim.Record.Owner, "#"+ref) {
			p.duplicate(GuardLedger)
			return ack(k, nil)
		}
		// Our own message, redelivered while its holder is silent: a
		// stalled or dead worker. Wait for its lease to run out.
		p.n.held.Add(1)
		return nak(&k, claim.RetryAfter+10*time.Millisecond, errors.New("held by a silent worker"))
	case dedupe.StatusFailed:
		return dead(&k, ReasonPoison, errors.New(claim.Record.Reason))
	case dedupe.StatusTakenOver:
		p.n.takenOver.Add(1)
	}
	// The lease is ours until work has committed, released or failed it.
	p.c.obs.Leases(p.cfg.Name, 1)
	defer p.c.obs.Leases(p.cfg.Name, -1)
	var token atomic.Uint64
	token.Store(claim.Lease.Token)
	if p.c.opts.BrokenAckEarly {
		m.Ack()
	}
	p.c.fault(AfterClaim, k)

	// Keep the message and the lease alive while the work runs.
	stop := p.keepAlive(m, k, &token)
	v := p.work(ctx, m, k, &token, claim.Status == dedupe.StatusTakenOver)
	stop()
	return v
}

// work runs the step and the effect and commits, holding the claim.
func (p *pipeline) work(ctx context.Context, m jetstream.Msg, k dedupe.Key, token *atomic.Uint64, takenOver bool) verdict {
	body := m.Data()
	var modelRef string
	if p.step != nil {
		t0 := time.Now()
		ans, err := p.step.run(ctx, k, m.Data())
		p.n.modelCalls.Add(1)
		p.c.obs.Step(p.cfg.Name, p.step.cfg.Name, time.Since(t0))
		if err != nil {
			var se *stepError
			if errors.As(err, &se) && se.permanent {
				return p.giveUp(ctx, k, token.Load(), dead(&k, se.reason, err), err)
			}
			p.release(ctx, k, token.Load())
			v := nak(&k, 0, err)
			v.token = token.Load()
			return v
		}
		p.c.fault(AfterAnswer, k)
		modelRef = ans.cacheKey
		if body, err = p.effectBody(k, m.Data(), ans); err != nil {
			return p.giveUp(ctx, k, token.Load(), dead(&k, ReasonInvalidJSON, err), err)
		}
	}
	res, err := p.deliver(ctx, k, body)
	if err != nil && takenOver && keyReused(err) {
		// A holder before us performed the effect with another body (a
		// reworded duplicate, another answer): the receiver has the key.
		p.c.log.Info("the receiver already has this key with another body: an earlier holder performed the effect",
			"pipeline", p.cfg.Name, "key", k.String())
		res, err = sink.Result{Duplicate: true}, nil
	}
	if err != nil {
		v := p.effectFailed(&k, err)
		if v.kind == settleDead {
			return p.giveUp(ctx, k, token.Load(), v, err)
		}
		p.release(ctx, k, token.Load())
		v.token = token.Load()
		return v
	}
	p.c.fault(AfterEffect, k)
	result := dedupe.Result{DownstreamID: string(res.Body), ModelRef: modelRef}
	if p.step != nil && len(body)+len(result.DownstreamID)+len(modelRef) <= p.maxResult {
		// Kept for the replies to later duplicates. A larger body is not
		// kept: the ledger would refuse the commit, and the effect went
		// out all the same.
		result.Response = body
	}
	if err := p.ledger.Commit(ctx, k, token.Load(), result); err != nil {
		if errors.Is(err, dedupe.ErrStaleToken) {
			// Another worker took the work over and commits it; the effect
			// went out under the same key, so the sink collapses the two.
			p.n.stale.Add(1)
			return ack(k, nil)
		}
		// The effect went out; the redelivery takes the work over at once
		// and sends it again under the same key, which the sink collapses.
		p.release(ctx, k, token.Load())
		v := nak(&k, 0, fmt.Errorf("ledger commit: %w", err))
		v.token = token.Load()
		return v
	}
	p.c.fault(AfterCommit, k)
	p.window.Add(k.Short())
	p.effectDone(res)
	return ack(k, result.Response)
}

// keyReused reports whether a sink refused an effect because its key was
// used before with another body: HTTP 422 to a request carrying
// Idempotency-Key, as the IETF Idempotency-Key draft specifies. It is
// trusted only on a takeover, when an earlier holder may have sent the
// effect: on a first attempt a 422 is the receiver refusing the request.
func keyReused(err error) bool {
	var se *sink.Error
	return errors.As(err, &se) && se.Sink == "http" && se.Status == http.StatusUnprocessableEntity
}

// msgRef names a trigger message: its stream and stream sequence.
func msgRef(m jetstream.Msg) string {
	meta, err := m.Metadata()
	if err != nil {
		return "?"
	}
	return meta.Stream + ":" + strconv.FormatUint(meta.Sequence.Stream, 10)
}

func (p *pipeline) deliver(ctx context.Context, k dedupe.Key, body []byte) (sink.Result, error) {
	t0 := time.Now()
	step := ""
	if p.step != nil {
		step = p.step.cfg.Name
	}
	res, err := p.sink.Deliver(ctx, sink.Effect{Key: k.String(), Pipeline: p.cfg.Name, Step: step, Body: body})
	p.observeEffect(res, err, time.Since(t0))
	return res, err
}

func (p *pipeline) effectDone(res sink.Result) {
	p.n.effects.Add(1)
	if res.Duplicate {
		p.n.dupStream.Add(1)
		p.c.obs.Duplicate(p.cfg.Name, GuardStream)
	}
}

func (p *pipeline) effectFailed(k *dedupe.Key, err error) verdict {
	if errors.Is(err, sink.ErrPermanent) {
		return dead(k, ReasonPermanentEffect, err)
	}
	return nak(k, 0, err)
}

// release ends the lease now, so that the redelivery takes the work over
// at once instead of waiting for the lease to run out.
func (p *pipeline) release(ctx context.Context, k dedupe.Key, token uint64) {
	if _, err := p.ledger.Extend(ctx, k, token, time.Nanosecond); err != nil && !errors.Is(err, dedupe.ErrStaleToken) {
		p.c.log.Warn("releasing a lease failed; the redelivery waits for it to run out", "pipeline", p.cfg.Name, "key", k.String(), "err", err)
	}
}

// fail records the work as given up. It reports false if the work is no
// longer the caller's: another worker took it over and answers for it.
func (p *pipeline) fail(ctx context.Context, k dedupe.Key, token uint64, cause error) bool {
	err := p.ledger.Fail(ctx, k, token, cause.Error())
	if errors.Is(err, dedupe.ErrStaleToken) {
		return false
	}
	if err != nil {
		p.c.log.Warn("recording a failure in the ledger failed", "pipeline", p.cfg.Name, "key", k.String(), "err", err)
	}
	return true
}

// giveUp is the verdict on work that failed for good: a dead letter, unless
// another worker has taken the work over meanwhile. Its failure is then not
// the intent's (a 422 because the new holder sent first, say): the new
// holder settles the intent, and this trigger is acked.
func (p *pipeline) giveUp(ctx context.Context, k dedupe.Key, token uint64, v verdict, err error) verdict {
	if !p.fail(ctx, k, token, err) {
		p.n.stale.Add(1)
		p.c.log.Info("gave up on work another worker has taken over; it answers for the intent", "pipeline", p.cfg.Name, "key", k.String(), "err", err)
		return ack(k, nil)
	}
	return v
}

// keepAlive tells JetStream the message is in progress and renews the
// lease, every third of the shorter of AckWait and the lease, until the
// returned stop is called.
func (p *pipeline) keepAlive(m jetstream.Msg, k dedupe.Key, token *atomic.Uint64) (stop func()) {
	// With a BackOff, the server's redelivery timer of delivery n is
	// BackOff[n-1] rather than AckWait.
	every := min(p.cfg.AckWait, p.lease)
	if meta, err := m.Metadata(); err == nil && len(p.cfg.Backoff) > 0 {
		every = min(every, p.cfg.Backoff[min(int(meta.NumDelivered), len(p.cfg.Backoff))-1])
	}
	every = max(every/3, 50*time.Millisecond)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := m.InProgress(); err == nil {
					p.c.obs.Settled(p.cfg.Name, "in_progress")
				}
				l, err := p.ledger.Extend(context.Background(), k, token.Load(), p.lease)
				if err == nil {
					token.Store(l.Token)
				}
				switch {
				case errors.Is(err, dedupe.ErrStaleToken):
					return // committed meanwhile, or taken over: nothing left to renew
				case err != nil:
					p.c.log.Warn("lease renewal failed", "pipeline", p.cfg.Name, "key", k.String(), "err", err)
				}
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// settle is the one place that acks, naks, terms and dead-letters.
func (p *pipeline) settle(ctx context.Context, m jetstream.Msg, v verdict) {
	name := p.cfg.Name
	// The delivery count matters only to a trigger not acked: the common
	// case skips parsing it.
	var meta *jetstream.MsgMetadata
	deliveries := uint64(1)
	if v.kind != settleAck {
		meta, _ = m.Metadata()
		if meta != nil {
			deliveries = meta.NumDelivered
		}
	}
	if v.kind == settleNak && p.cfg.MaxDeliver > 0 && deliveries >= uint64(p.cfg.MaxDeliver) {
		err := fmt.Errorf("gave up after %d deliveries: %w", deliveries, errOr(v.err))
		if v.token != 0 {
			// Mark the work failed, so that a later duplicate does not
			// take it over and do it after the dead letter.
			p.fail(ctx, *v.key, v.token, err)
		}
		v = dead(v.key, ReasonExhausted, err)
	}
	switch v.kind {
	case settleAck:
		if v.key != nil {
			p.c.fault(BeforeAck, *v.key)
		}
		if to := m.Headers().Get(HeaderReply); to != "" && v.reply != nil {
			if err := p.c.nc.Publish(to, v.reply); err != nil {
				p.c.log.Warn("reply failed", "pipeline", name, "subject", to, "err", err)
			}
		}
		if err := m.Ack(); err != nil {
			p.c.log.Warn("ack failed; the trigger comes back and the ledger answers it", "pipeline", name, "err", err)
		}
		p.c.obs.Settled(name, "ack")
	case settleNak:
		if v.delay > 0 {
			_ = m.NakWithDelay(v.delay)
		} else {
			// A plain NAK is redelivered at once; the server's BackOff
			// only paces ack timeouts. So the delay is set here, from the
			// same schedule.
			d := p.retryDelay(deliveries)
			p.n.retries.Add(1)
			p.c.log.Info("retrying later", "pipeline", name, "deliveries", deliveries, "in", d, "err", v.err)
			_ = m.NakWithDelay(d)
		}
		p.c.obs.Settled(name, "nak")
	case settleDead:
		if err := p.publishDead(ctx, m, v, meta); err != nil {
			// Keep the trigger rather than lose it: it comes back.
			p.c.log.Error("dead letter not published; the trigger will be redelivered", "pipeline", name, "err", err)
			_ = m.Nak()
			p.c.obs.Settled(name, "nak")
			return
		}
		p.n.dead.Add(1)
		p.c.obs.DeadLetter(name, v.reason)
		p.c.log.Warn("dead-lettered", "pipeline", name, "reason", v.reason, "subject", p.deadLetter, "err", v.err)
		_ = m.TermWithReason(string(v.reason))
		p.c.obs.Settled(name, "term")
	}
}

// retryDelay is the wait before delivery n+1 after a retryable failure of
// delivery n: the pipeline's backoff if it has one (the last step
// repeating), or 250ms doubling up to 30s.
func (p *pipeline) retryDelay(n uint64) time.Duration {
	if b := p.cfg.Backoff; len(b) > 0 {
		return b[min(int(n), len(b))-1]
	}
	d := 250 * time.Millisecond << min(n-1, 7)
	return min(d, 30*time.Second)
}

func errOr(err error) error {
	if err == nil {
		return errors.New("no success")
	}
	return err
}

func (p *pipeline) publishDead(ctx context.Context, m jetstream.Msg, v verdict, meta *jetstream.MsgMetadata) error {
	out := nats.NewMsg(p.deadLetter)
	out.Header.Set(HeaderReason, string(v.reason))
	if v.err != nil {
		d := v.err.Error()
		if len(d) > 1024 {
			d = d[:1024]
		}
		out.Header.Set(HeaderDetail, d)
	}
	out.Header.Set(HeaderPipeline, p.cfg.Name)
	out.Header.Set(HeaderSubject, m.Subject())
	msgID := "dead-" + p.cfg.Name
	if meta != nil {
		out.Header.Set(HeaderStreamSeq, strconv.FormatUint(meta.Sequence.Stream, 10))
		out.Header.Set(HeaderDeliveries, strconv.FormatUint(meta.NumDelivered, 10))
		msgID += "-" + strconv.FormatUint(meta.Sequence.Stream, 10)
	}
	if v.key != nil {
		out.Header.Set(HeaderKey, v.key.String())
	}
	data := m.Data()
	if len(data) > maxDeadLetterBody {
		data = data[:maxDeadLetterBody]
		out.Header.Set(HeaderTruncated, "true")
	}
	out.Data = data
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := p.c.js.PublishMsg(ctx, out, jetstream.WithMsgID(msgID))
	return err
}
