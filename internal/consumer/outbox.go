package consumer

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
	sink sink.Sink // the real one-shot sink
	cons jetstream.Consumer
	subs []*nats.Subscription

	mu sync.Mutex
	n  DispatchStats
}

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

func (d *dispatcher) durable() string { return Durable(d.p.cfg.Name) + "-dispatch" }

func (d *dispatcher) setup(ctx context.Context) error {
	c := d.p.c
	sc := jetstream.StreamConfig{
		Name: c.cfg.Stream.Name + "_OUTBOX", Subjects: []string{"oncegate.outbox.>"},
		Storage: jetstream.FileStorage, Duplicates: c.cfg.Stream.Duplicates,
	}
	if _, err := c.js.CreateOrUpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("consumer: outbox stream: %w", err)
	}
	cons, err := c.js.CreateOrUpdateConsumer(ctx, sc.Name, jetstream.ConsumerConfig{
		Durable:       d.durable(),
		Description:   "Oncegate one-shot dispatcher for pipeline " + d.p.cfg.Name,
		FilterSubject: OutboxSubject(d.p.cfg.Name),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       max(d.p.cfg.AckWait, 5*time.Second),
		MaxDeliver:    -1, // an entry waiting for approval comes back until it is approved
		MaxAckPending: d.p.cfg.MaxAckPending,
	})
	if err != nil {
		return fmt.Errorf("consumer: pipeline %s: dispatcher: %w", d.p.cfg.Name, err)
	}
	d.cons = cons
	return nil
}

func (d *dispatcher) start() (jetstream.ConsumeContext, error) {
	c := d.p.c
	queue := "oncegate-" + d.p.cfg.Name
	sub, err := c.nc.QueueSubscribe(CancelSubject(d.p.cfg.Name), queue, d.cancel)
	if err != nil {
		return nil, err
	}
	d.subs = append(d.subs, sub)
	if subj := d.p.cfg.Effect.ApprovalSubject; subj != "" {
		sub, err := c.nc.QueueSubscribe(subj, queue, d.approve)
		if err != nil {
			return nil, err
		}
		d.subs = append(d.subs, sub)
	}
	return d.cons.Consume(func(m jetstream.Msg) {
		d.p.wg.Add(1)
		defer d.p.wg.Done()
		d.dispatch(m)
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		c.log.Warn("dispatcher consume error", "pipeline", d.p.cfg.Name, "err", err)
	}))
}

func (d *dispatcher) stop() {
	for _, s := range d.subs {
		s.Unsubscribe()
	}
}

func (d *dispatcher) dispatch(m jetstream.Msg) {
	ctx := context.Background()
	p := d.p
	k, err := dedupe.ParseKey(m.Headers().Get(nats.MsgIdHdr))
	if err != nil {
		d.dead(ctx, m, nil, ReasonInvalidJSON, fmt.Errorf("outbox entry without an intent key: %w", err))
		return
	}
	if delay := p.cfg.Effect.Delay; delay > 0 {
		if meta, err := m.Metadata(); err == nil {
			if wait := time.Until(meta.Timestamp.Add(delay)); wait > 0 {
				d.count(func(s *DispatchStats) { s.Waiting++ })
				m.NakWithDelay(wait)
				return
			}
		}
	}
	if p.cfg.Effect.ApprovalSubject != "" {
		rec, err := p.ledger.Get(ctx, approvalKey(k))
		if err != nil || rec.State != dedupe.StateCommitted {
			d.count(func(s *DispatchStats) { s.Waiting++ })
			m.NakWithDelay(time.Second)
			return
		}
	}
	dk := DispatchKey(k)
	claim, err := p.ledger.Begin(ctx, dk, dedupe.BeginOptions{Owner: p.c.opts.Owner, Lease: p.lease})
	if err != nil {
		m.Nak()
		return
	}
	switch claim.Status {
	case dedupe.StatusCommitted:
		m.Ack() // sent before; this is a redelivery of the entry
		return
	case dedupe.StatusFailed:
		if claim.Record.Reason == "cancelled" {
			d.count(func(s *DispatchStats) { s.Cancelled++ })
		}
		m.Ack()
		return
	case dedupe.StatusHeld:
		m.NakWithDelay(claim.RetryAfter + 10*time.Millisecond)
		return
	case dedupe.StatusTakenOver:
		err := errors.New("a dispatcher claimed this effect and stopped before recording the outcome; it may or may not have been sent, and a one-shot effect is not resent")
		p.fail(ctx, dk, claim.Lease.Token, errors.New("outcome unknown"))
		d.count(func(s *DispatchStats) { s.Unknown++ })
		d.dead(ctx, m, &k, ReasonUnknownOutcome, err)
		return
	}
	token := claim.Lease.Token
	p.c.obs.Leases(p.cfg.Name, 1)
	defer p.c.obs.Leases(p.cfg.Name, -1)
	p.c.fault(AfterDispatchClaim, k)
	step := ""
	if p.step != nil {
		step = p.step.cfg.Name
	}
	t0 := time.Now()
	res, err := d.sink.Deliver(ctx, sink.Effect{Key: k.String(), Pipeline: p.cfg.Name, Step: step, Body: m.Data()})
	if err != nil {
		// A one-shot sink that failed may have acted all the same (a
		// timeout after the message went out): nothing is resent.
		reason, outcome := ReasonUnknownOutcome, "retry"
		if errors.Is(err, sink.ErrPermanent) {
			reason, outcome = ReasonPermanentEffect, "dead"
			d.count(func(s *DispatchStats) { s.Failed++ })
		} else {
			d.count(func(s *DispatchStats) { s.Unknown++ })
		}
		p.c.obs.Effect(p.cfg.Name, p.cfg.Effect.Sink, outcome, time.Since(t0))
		p.fail(ctx, dk, token, err)
		d.dead(ctx, m, &k, reason, err)
		return
	}
	p.c.obs.Effect(p.cfg.Name, p.cfg.Effect.Sink, "done", time.Since(t0))
	if err := p.ledger.Commit(ctx, dk, token, dedupe.Result{DownstreamID: string(res.Body)}); err != nil {
		// Sent, but the ledger does not know. The entry comes back, finds
		// the dispatch taken over and reports the effect as unknown:
		// better than a silent success the ledger cannot vouch for.
		p.c.log.Error("one-shot effect sent but its dispatch not recorded; its redelivery will report it as unknown", "pipeline", p.cfg.Name, "key", k.String(), "err", err)
		m.NakWithDelay(p.lease)
		return
	}
	d.count(func(s *DispatchStats) { s.Sent++ })
	m.Ack()
}

func (d *dispatcher) dead(ctx context.Context, m jetstream.Msg, k *dedupe.Key, r Reason, err error) {
	meta, _ := m.Metadata()
	v := dead(k, r, err)
	if perr := d.p.publishDead(ctx, m, v, meta); perr != nil {
		d.p.c.log.Error("dead letter not published; the outbox entry will come back", "pipeline", d.p.cfg.Name, "err", perr)
		m.Nak()
		return
	}
	d.p.c.obs.DeadLetter(d.p.cfg.Name, r)
	d.p.c.log.Warn("one-shot effect dead-lettered", "pipeline", d.p.cfg.Name, "reason", r, "err", err)
	m.Term()
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
	p := d.p
	claim, err := p.ledger.Begin(ctx, DispatchKey(k), dedupe.BeginOptions{Owner: p.c.opts.Owner + "#cancel", Lease: time.Second})
	if err != nil {
		reply("error: " + err.Error())
		return
	}
	switch claim.Status {
	case dedupe.StatusNew, dedupe.StatusTakenOver:
		if err := p.ledger.Fail(ctx, DispatchKey(k), claim.Lease.Token, "cancelled"); err != nil {
			reply("error: " + err.Error())
			return
		}
		reply("cancelled")
	case dedupe.StatusCommitted:
		reply("already sent")
	case dedupe.StatusFailed:
		reply("already " + claim.Record.Reason)
	case dedupe.StatusHeld:
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
	p := d.p
	ak := approvalKey(k)
	claim, err := p.ledger.Begin(ctx, ak, dedupe.BeginOptions{Owner: p.c.opts.Owner + "#approve", Lease: time.Second})
	if err != nil {
		reply("error: " + err.Error())
		return
	}
	if claim.Status == dedupe.StatusNew || claim.Status == dedupe.StatusTakenOver {
		if err := p.ledger.Commit(ctx, ak, claim.Lease.Token, dedupe.Result{DownstreamID: "approved"}); err != nil {
			reply("error: " + err.Error())
			return
		}
	}
	reply("approved")
}
