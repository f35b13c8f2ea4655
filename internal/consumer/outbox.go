package consumer

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/faults"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// One-shot effects (a chat message, an SMS, a provider without idempotency
// keys) must not be sent twice, even when a worker dies half-way. The
// pipeline does not send them: its effect is a keyed publish of the
// effect to the pipeline's outbox subject (replayable: Nats-Msg-Id is the
// intent key), committed in the ledger before the trigger is acked. A
// dispatcher consumes the outbox and sends each effect at most once, under
// a ledger record of its own (the dispatch key): new → send → commit. A
// dispatch record found taken over means a dispatcher died between claiming
// and committing: the effect may or may not have gone out, and since a
// one-shot sink cannot be asked, the outbox entry is dead-lettered with
// reason unknown_outcome for a person to reconcile, never sent again.
//
// An entry waits out the effect's delay window (during which duplicates
// collapse and the effect can be cancelled) and, if the effect has an
// approval subject, an approval, before it is sent (approval.go).

// OutboxSubject is the subject of a pipeline's outbox.
func OutboxSubject(pipeline string) string { return "oncegate.outbox." + pipeline }

// CancelSubject is where a request with an intent key as its body cancels
// a pipeline's one-shot effect that has not gone out yet. The reply says
// what happened: cancelled, already sent, already cancelled, sending.
func CancelSubject(pipeline string) string { return "oncegate.cancel." + pipeline }

// DispatchKey is the ledger key of the dispatch of k's one-shot effect,
// apart from k's own record: inspect it to see whether the effect went out.
func DispatchKey(k dedupe.Key) dedupe.Key { return derive(k, "dispatch") }

// ApprovalKey is the ledger key recording the approval of k's one-shot
// effect, apart from k's own record and its dispatch's.
func ApprovalKey(k dedupe.Key) dedupe.Key { return derive(k, "approval") }

func derive(k dedupe.Key, what string) dedupe.Key {
	h := sha256.New()
	h.Write([]byte("oncegate/outbox/" + what + "\x00"))
	h.Write(k[:])
	var d dedupe.Key
	copy(d[:], h.Sum(nil))
	return d
}

// DispatchStats counts what a pipeline's dispatcher did.
type DispatchStats struct {
	Pipeline    string
	Sent        int64 // one-shot effects sent
	Cancelled   int64 // cancelled before they went out
	Unknown     int64 // dead-lettered: a dispatcher died mid-send
	Waiting     int64 // deliveries put back to wait for the delay or an approval
	Parked      int64 // entries parked to wait for an approval
	NotApproved int64 // dead-lettered: no approval within the approval timeout
	Failed      int64 // refused for good by the sink, dead-lettered
	// AfterResolve counts firings' entries not sent: their resolve had
	// gone out (key.status; lifecycle.go).
	AfterResolve int64
	// Unopened counts resolves' entries not sent: their firing's message
	// was not sent either.
	Unopened int64
}

type dispatcher struct {
	p      *pipeline
	gate   *gate
	src    *source // the outbox
	parked *source // the entries waiting for an approval; nil without approvals
	subs   []*nats.Subscription
	reqs   chan struct{} // a token per request being answered

	mu sync.Mutex
	n  DispatchStats
}

// reasonCancelled is the ledger's reason on a dispatch cancelled before it
// went out.
const reasonCancelled = "cancelled"

func newDispatcher(p *pipeline, pg *gate, oneShot sink.Sink) *dispatcher {
	c, cfg := p.c, p.cfg
	d := &dispatcher{p: p}
	g := &gate{
		c: c, pipeline: cfg.Name, pol: oneShotPolicy(d),
		ledger: pg.ledger, owner: c.opts.Owner, lease: pg.lease,
		sink: oneShot, sinkName: cfg.Effect.Sink, stepName: pg.stepName,
		maxResult: pg.maxResult,
	}
	// An entry is counted under its effect's kind (its preset, else its
	// sink), as the metrics' series are made at start (app.Start).
	kinds := map[string]string{}
	for _, e := range cfg.AllEffects() {
		kinds[e.Name] = cmp.Or(e.Preset, e.Sink)
	}
	g.sinkOf = func(t *Trigger) string { return kinds[t.msg.Headers().Get(HeaderEffect)] }
	g.set = &settler{
		c: c, pipeline: cfg.Name, deadLetter: p.deadLetter, ledger: pg.ledger, counts: g.pol.counts,
		retryDelay: cfg.RetryDelay, // maxDeliver 0: an entry waiting for its delay or approval is no failing try
		effectOf: func(t *Trigger) string {
			return cmp.Or(t.msg.Headers().Get(HeaderEffect), g.sinkOf(t)) + " (dispatch)"
		},
	}
	var order stage
	if pg.ordered() {
		order = &entryOrderStage{g: g} // lifecycle.go
	}
	g.use(
		&keyStage{g: g, keyOf: d.keyOf},
		crashAt(faults.BeforeAck),
		&approvalStage{d: d},
		crashAt(faults.AfterCommit),
		&claimStage{g: g, keepEvery: func(*Trigger) time.Duration { return min(d.ackWait(), pg.lease) }},
		crashAt(faults.AfterDispatchClaim),
		order,
		crashAt(faults.AfterEffect),
	)
	d.gate = g
	d.src = &source{
		c: c, name: cfg.Name + "/dispatch", stream: OutboxStream(c.cfg.Stream.Name), durable: Durable(cfg.Name) + "-dispatch",
		// One send at a time: a crash leaves at most one dispatch claimed
		// and unrecorded, that is one unknown outcome for a person to
		// check. A digest gathers the entries sent at once (each of them
		// of unknown outcome if the dispatcher dies while it goes out).
		batch: 1, workers: dispatchWorkers(pg, cfg.MaxAckPending), pull: min(64, cfg.MaxAckPending),
		handle: g.run, config: d.consumerConfig,
	}
	if cfg.Effect.ApprovalSubject != "" {
		d.parked = &source{
			c: c, name: cfg.Name + "/parked", stream: OutboxStream(c.cfg.Stream.Name), durable: Durable(cfg.Name) + "-parked",
			batch: 1, workers: 1, pull: 64,
			handle: g.run, config: d.parkedConfig,
		}
	}
	return d
}

// dispatchWorkers is how many entries the dispatcher of the pipeline
// whose gate is pg sends at once: one, or with a digest as many as may
// gather in it.
func dispatchWorkers(pg *gate, maxAckPending int) int {
	if pg.mile != nil && pg.mile.digests {
		return max(1, min(32, maxAckPending))
	}
	return 1
}

func (d *dispatcher) ackWait() time.Duration { return max(d.p.cfg.AckWait, 5*time.Second) }

func (d *dispatcher) consumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       d.src.durable,
		Description:   "Oncegate one-shot dispatcher for pipeline " + d.p.cfg.Name,
		FilterSubject: OutboxSubject(d.p.cfg.Name),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.ackWait(),
		MaxDeliver:    -1, // an entry waiting for its delay comes back until it is due
		MaxAckPending: d.p.cfg.MaxAckPending,
	}
}

// parkedConfig is the durable consumer of the entries waiting for an
// approval: without a limit on the entries pending, since each waits for a
// person, and apart from the outbox's, whose max_ack_pending approved
// entries need.
func (d *dispatcher) parkedConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       d.parked.durable,
		Description:   "Oncegate one-shot effects of pipeline " + d.p.cfg.Name + " waiting for approval",
		FilterSubject: parkedSubject(d.p.cfg.Name, "*"),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.ackWait(),
		MaxDeliver:    -1,
		MaxAckPending: -1,
	}
}

// OutboxStream is the name of the stream of the outboxes, beside the
// trigger stream named stream.
func OutboxStream(stream string) string { return stream + "_OUTBOX" }

func (d *dispatcher) count(f func(*DispatchStats)) {
	d.mu.Lock()
	f(&d.n)
	d.mu.Unlock()
}

func (d *dispatcher) stats() DispatchStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.n
	s.Pipeline = d.p.cfg.Name
	return s
}

// maxRequests bounds the cancel and approval requests a dispatcher answers
// at once.
const maxRequests = 32

// concurrently runs h for each message in a goroutine of its own, up to
// maxRequests at once: a subscription's callbacks run one at a time, and a
// request waits on the ledger (an approval being recorded, an outage), so
// one at a time a storm of them would answer late, past their entries'
// approval timeout.
func (d *dispatcher) concurrently(h nats.MsgHandler) nats.MsgHandler {
	return func(m *nats.Msg) {
		d.reqs <- struct{}{}
		go func() {
			defer func() { <-d.reqs }()
			h(m)
		}()
	}
}

// subscribe starts answering cancel and approval requests.
func (d *dispatcher) subscribe() error {
	c := d.p.c
	queue := "oncegate-" + d.p.cfg.Name
	d.reqs = make(chan struct{}, maxRequests)
	sub, err := c.nc.QueueSubscribe(CancelSubject(d.p.cfg.Name), queue, d.concurrently(d.cancel))
	if err != nil {
		return err
	}
	d.subs = append(d.subs, sub)
	if subj := d.p.cfg.Effect.ApprovalSubject; subj != "" {
		sub, err := c.nc.QueueSubscribe(subj, queue, d.concurrently(d.approve))
		if err != nil {
			return err
		}
		d.subs = append(d.subs, sub)
	}
	return nil
}

func (d *dispatcher) unsubscribe() {
	for _, s := range d.subs {
		s.Unsubscribe()
	}
	d.subs = nil
	// Wait for the requests under way.
	for range cap(d.reqs) {
		d.reqs <- struct{}{}
	}
}

// keyOf reads the intent key of an outbox entry from its Oncegate-Key
// header (a parked or republished entry) or else its Nats-Msg-Id; the
// ledger key of its dispatch is DispatchKey of it.
func (d *dispatcher) keyOf(t *Trigger) *verdict {
	h := t.msg.Headers()
	id := h.Get(HeaderKey)
	if id == "" {
		id = h.Get(nats.MsgIdHdr)
	}
	k, err := dedupe.ParseKey(id)
	if err != nil {
		v := dead(nil, outcome.ReasonInvalidJSON, fmt.Errorf("outbox entry without an intent key: %w", err))
		return &v
	}
	t.intent, t.key = k, DispatchKey(k)
	return nil
}
