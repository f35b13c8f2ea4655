package consumer

import (
	"context"
	"crypto/sha256"

	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/ledger"
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
// approval subject, an approval, before it is sent.

// Reasons of the dispatcher's dead letters.
const (
	ReasonUnknownOutcome Reason = "unknown_outcome" // a dispatcher died mid-send; not resent
)

// OutboxSubject is the subject of a pipeline's outbox.
func OutboxSubject(pipeline string) string { return "oncegate.outbox." + pipeline }

// CancelSubject is where a request with an intent key as its body cancels
// a pipeline's one-shot effect that has not gone out yet. The reply says
// what happened: cancelled, already sent, already cancelled, sending.
func CancelSubject(pipeline string) string { return "oncegate.cancel." + pipeline }

// DispatchKey is the ledger key of the dispatch of k's one-shot effect,
// apart from k's own record: inspect it to see whether the effect went out.
func DispatchKey(k dedupe.Key) dedupe.Key { return derive(k, "dispatch") }

// approvalKey is the ledger key recording the approval of k's effect.
func approvalKey(k dedupe.Key) dedupe.Key { return derive(k, "approval") }

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
	Pipeline  string
	Sent      int64 // one-shot effects sent
	Cancelled int64 // cancelled before they went out
	Unknown   int64 // dead-lettered: a dispatcher died mid-send
	Waiting   int64 // deliveries put back to wait for the delay or an approval
	Failed    int64 // refused for good by the sink, dead-lettered
}

type dispatcher struct {
	p    *pipeline
	gate *gate
	src  *source
	subs []*nats.Subscription

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
		c: c, pipeline: cfg.Name, d: d, keyOf: d.keyOf,
		ledger: pg.ledger, owner: c.opts.Owner, lease: pg.lease,
		keepEvery: func(*Trigger) time.Duration { return min(d.ackWait(), pg.lease) },
		sink:      oneShot, sinkName: cfg.Effect.Sink, stepName: pg.stepName,
		maxResult: pg.maxResult,
	}
	g.set = &settler{
		c: c, pipeline: cfg.Name, deadLetter: p.deadLetter, ledger: pg.ledger,
		retryDelay: cfg.RetryDelay, // maxDeliver 0: an entry waiting for approval comes back until it is approved
	}
	g.build(d.wait)
	d.gate = g
	d.src = &source{
		c: c, name: cfg.Name + "/dispatch", stream: OutboxStream(c.cfg.Stream.Name), durable: Durable(cfg.Name) + "-dispatch",
		// One send at a time: a crash leaves at most one dispatch claimed
		// and unrecorded, that is one unknown outcome for a person to check.
		batch: 1, workers: 1, pull: min(64, cfg.MaxAckPending),
		handle: g.run, config: d.consumerConfig,
	}
	return d
}

func (d *dispatcher) ackWait() time.Duration { return max(d.p.cfg.AckWait, 5*time.Second) }

func (d *dispatcher) consumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       d.src.durable,
		Description:   "Oncegate one-shot dispatcher for pipeline " + d.p.cfg.Name,
		FilterSubject: OutboxSubject(d.p.cfg.Name),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.ackWait(),
		MaxDeliver:    -1, // an entry waiting for approval comes back until it is approved
		MaxAckPending: d.p.cfg.MaxAckPending,
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

// subscribe starts answering cancel and approval requests.
func (d *dispatcher) subscribe() error {
	c := d.p.c
	queue := "oncegate-" + d.p.cfg.Name
	sub, err := c.nc.QueueSubscribe(CancelSubject(d.p.cfg.Name), queue, d.cancel)
	if err != nil {
		return err
	}
	d.subs = append(d.subs, sub)
	if subj := d.p.cfg.Effect.ApprovalSubject; subj != "" {
		sub, err := c.nc.QueueSubscribe(subj, queue, d.approve)
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
}

// keyOf reads the intent key of an outbox entry from its Nats-Msg-Id; the
// ledger key of its dispatch is DispatchKey of it.
func (d *dispatcher) keyOf(t *Trigger) *verdict {
	k, err := dedupe.ParseKey(t.msg.Headers().Get(nats.MsgIdHdr))
	if err != nil {
		v := dead(nil, ReasonInvalidJSON, fmt.Errorf("outbox entry without an intent key: %w", err))
		return &v
	}
	t.intent, t.key = k, DispatchKey(k)
	return nil
}

// wait puts back the entries still in their delay window or waiting for
// an approval.
func (d *dispatcher) wait(next Handler) Handler {
	return func(ctx context.Context, ts []*Trigger) {
		p := d.p
		for _, t := range ts {
			if delay := p.cfg.Effect.Delay; delay > 0 && t.metadata() != nil {
				if wait := time.Until(t.metadata().Timestamp.Add(delay)); wait > 0 {
					d.count(func(s *DispatchStats) { s.Waiting++ })
					t.decide(nak(t.keyRef(), wait, nil))
					continue
				}
			}
			if p.cfg.Effect.ApprovalSubject != "" {
				rec, err := d.gate.ledger.Get(ctx, approvalKey(t.intent))
				if err != nil || rec.State != ledger.StateCommitted {
					d.count(func(s *DispatchStats) { s.Waiting++ })
					t.decide(nak(t.keyRef(), time.Second, nil))
				}
			}
		}
		pass(ctx, next, ts)
	}
}

// request parses a cancel or approval request, whose body is an intent
// key, and returns the key and a function that answers the requester.
func request(msg *nats.Msg) (dedupe.Key, func(string), error) {
	reply := func(s string) {
		if msg.Reply != "" {
			msg.Respond([]byte(s))
		}
	}
	k, err := dedupe.ParseKey(strings.TrimSpace(string(msg.Data)))
	if err != nil {
		reply("error: " + err.Error())
	}
	return k, reply, err
}

// cancel answers a cancel request: the body is an intent key.
func (d *dispatcher) cancel(msg *nats.Msg) {
	k, reply, err := request(msg)
	if err != nil {
		return
	}
	ctx := context.Background()
	l := d.gate.ledger
	claim, err := l.Begin(ctx, DispatchKey(k), ledger.BeginOptions{Owner: d.p.c.opts.Owner + "#cancel", Lease: time.Second})
	if err != nil {
		reply("error: " + err.Error())
		return
	}
	switch claim.Status {
	case ledger.StatusNew, ledger.StatusTakenOver:
		if err := l.Fail(ctx, DispatchKey(k), claim.Lease.Token, reasonCancelled); err != nil {
			reply("error: " + err.Error())
			return
		}
		reply("cancelled")
	case ledger.StatusCommitted:
		reply("already sent")
	case ledger.StatusFailed:
		reply("already " + claim.Record.Reason)
	case ledger.StatusHeld:
		reply("sending")
	}
}

// approve records an approval: the body is an intent key.
func (d *dispatcher) approve(msg *nats.Msg) {
	k, reply, err := request(msg)
	if err != nil {
		return
	}
	ctx := context.Background()
	l := d.gate.ledger
	ak := approvalKey(k)
	claim, err := l.Begin(ctx, ak, ledger.BeginOptions{Owner: d.p.c.opts.Owner + "#approve", Lease: time.Second})
	if err != nil {
		reply("error: " + err.Error())
		return
	}
	if claim.Status == ledger.StatusNew || claim.Status == ledger.StatusTakenOver {
		if err := l.Commit(ctx, ak, claim.Lease.Token, ledger.Result{DownstreamID: "approved"}); err != nil {
			reply("error: " + err.Error())
			return
		}
	}
	reply("approved")
}
