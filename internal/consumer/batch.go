package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// A gate pipeline (no model step) whose effect is a replayable JetStream
// publish settles its triggers in batches: whatever has arrived, up to
// batchMax, is keyed, checked against the window, claimed in the ledger in
// one durable write, published without waiting message by message, and
// committed in one durable write. Each trigger goes through the same states
// and the same settle decision as on the one-by-one path; only the waits
// are shared. This is what takes the durable gate from two syncs per
// trigger to one per batch: the claims of a replayable publish are volatile
// (see dedupe.BeginOptions.Volatile), and only the commits are written.

const batchMax = 256

// batchSink returns the JetStream sink a batched pipeline publishes with,
// or nil if the pipeline settles one trigger at a time.
func (p *pipeline) batchSink() *sink.JetStream {
	if p.step != nil || p.dispatch != nil || p.cfg.Effect.Class == config.ClassOneShot {
		return nil
	}
	js, _ := p.sink.(*sink.JetStream)
	return js
}

// consumeBatched starts the batch workers and the Consume that feeds them.
// The workers exit once the consume context is closed and the channel
// drained; p.wg counts them.
func (p *pipeline) consumeBatched(js *sink.JetStream) (jetstream.ConsumeContext, error) {
	in := make(chan jetstream.Msg, 2*batchMax)
	workers := max(1, p.cfg.Concurrency/16)
	for range workers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			batch := make([]jetstream.Msg, 0, batchMax)
			for m := range in {
				batch = append(batch[:0], m)
			fill:
				for len(batch) < batchMax {
					select {
					case m, ok := <-in:
						if !ok {
							break fill
						}
						batch = append(batch, m)
					default:
						break fill
					}
				}
				p.handleBatch(js, batch)
			}
		}()
	}
	cc, err := p.cons.Consume(func(m jetstream.Msg) { in <- m },
		jetstream.PullMaxMessages(min(2*batchMax, p.cfg.MaxAckPending)),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			p.c.log.Warn("consume error", "pipeline", p.cfg.Name, "err", err)
		}),
	)
	if err != nil {
		close(in)
		return nil, fmt.Errorf("consumer: pipeline %s: consume: %w", p.cfg.Name, err)
	}
	go func() {
		<-cc.Closed()
		close(in)
	}()
	return cc, nil
}

// item is one trigger of a batch on its way.
type item struct {
	m     jetstream.Msg
	ref   string // msgRef(m), for the claim's owner
	k     dedupe.Key
	fp    dedupe.Fingerprint
	claim dedupe.Claim
	pend  *sink.Pending
}

func (p *pipeline) handleBatch(js *sink.JetStream, msgs []jetstream.Msg) {
	ctx := context.Background()
	name := p.cfg.Name
	p.c.obs.InFlight(name, len(msgs))
	defer p.c.obs.InFlight(name, -len(msgs))
	items := make([]*item, 0, len(msgs))
	for _, m := range msgs {
		p.n.deliveries.Add(1)
		p.c.obs.Trigger(name)
		in, bad := p.intent(m)
		if bad != nil {
			p.settle(ctx, m, *bad)
			continue
		}
		items = append(items, &item{m: m, k: in.Key, fp: in.Fingerprint})
	}
	publish := func(it *item) {
		it.pend = js.PublishAsync(sink.Effect{Key: it.k.String(), Pipeline: name, Body: it.m.Data()})
	}
	dup := func(it *item, g Guard, reply []byte) {
		p.duplicate(g)
		p.settle(ctx, it.m, ack(it.k, reply))
	}

	if p.ledger == nil { // gate-window: the window alone decides
		// One SeenOrAddBatch for the batch: its lookups' cache misses
		// overlap. In order, so a key twice in the batch is new once.
		shorts := make([]uint64, len(items))
		for i, it := range items {
			shorts[i] = it.k.Short()
		}
		seen := make([]bool, len(items))
		p.window.SeenOrAddBatch(shorts, seen)
		var sent []*item
		for i, it := range items {
			if seen[i] {
				dup(it, GuardWindow, nil)
				continue
			}
			publish(it)
			sent = append(sent, it)
		}
		wctx, cancel := context.WithTimeout(ctx, js.Timeout())
		defer cancel()
		t0 := time.Now()
		for _, it := range sent {
			res, err := it.pend.Wait(wctx)
			p.observeEffect(res, err, time.Since(t0))
			if err != nil {
				p.window.Remove(it.k.Short())
				p.settle(ctx, it.m, p.effectFailed(&it.k, err))
				continue
			}
			p.effectDone(res)
			p.settle(ctx, it.m, ack(it.k, nil))
		}
		return
	}

	// gate-ledger: claim together, publish together, commit together.
	var claims []*item
	var reqs []dedupe.BeginRequest
	for _, it := range items {
		if p.window.Contains(it.k.Short()) {
			dup(it, GuardWindow, nil)
			continue
		}
		it.ref = msgRef(it.m)
		claims = append(claims, it)
		reqs = append(reqs, dedupe.BeginRequest{Key: it.k, Options: dedupe.BeginOptions{
			Owner: p.c.opts.Owner + "#" + it.ref, Fingerprint: it.fp, Lease: p.lease, Volatile: p.volatile,
		}})
	}
	var sent []*item
	for i, r := range dedupe.BeginAll(ctx, p.ledger, reqs) {
		it := claims[i]
		if r.Err != nil {
			if errors.Is(r.Err, dedupe.ErrFingerprintMismatch) {
				p.settle(ctx, it.m, dead(&it.k, ReasonMismatch, r.Err))
			} else {
				p.settle(ctx, it.m, nak(&it.k, 0, fmt.Errorf("ledger begin: %w", r.Err)))
			}
			continue
		}
		it.claim = r.Claim
		p.c.obs.Claim(name, r.Claim.Status)
		switch r.Claim.Status {
		case dedupe.StatusCommitted:
			p.window.Add(it.k.Short())
			dup(it, GuardLedger, r.Claim.Record.Result.Response)
			continue
		case dedupe.StatusHeld:
			if !strings.HasSuffix(r.Claim.Record.Owner, "#"+it.ref) {
				dup(it, GuardLedger, nil)
				continue
			}
			p.n.held.Add(1)
			p.settle(ctx, it.m, nak(&it.k, r.Claim.RetryAfter+10*time.Millisecond, errors.New("held by a silent worker")))
			continue
		case dedupe.StatusFailed:
			p.settle(ctx, it.m, dead(&it.k, ReasonPoison, errors.New(r.Claim.Record.Reason)))
			continue
		case dedupe.StatusTakenOver:
			p.n.takenOver.Add(1)
		}
		if p.c.opts.BrokenAckEarly {
			it.m.Ack()
		}
		p.c.fault(AfterClaim, it.k)
		publish(it)
		sent = append(sent, it)
	}
	// The leases of sent are ours until the batch has committed, released
	// or failed each of them.
	p.c.obs.Leases(name, len(sent))
	defer p.c.obs.Leases(name, -len(sent))
	var done []*item
	var commits []dedupe.CommitRequest
	wctx, cancel := context.WithTimeout(ctx, js.Timeout())
	defer cancel()
	t0 := time.Now()
	for _, it := range sent {
		res, err := it.pend.Wait(wctx)
		p.observeEffect(res, err, time.Since(t0))
		if err != nil {
			v := p.effectFailed(&it.k, err)
			if v.kind == settleDead {
				v = p.giveUp(ctx, it.k, it.claim.Lease.Token, v, err)
			} else {
				p.release(ctx, it.k, it.claim.Lease.Token)
				v.token = it.claim.Lease.Token
			}
			p.settle(ctx, it.m, v)
			continue
		}
		if res.Duplicate {
			p.n.dupStream.Add(1)
			p.c.obs.Duplicate(name, GuardStream)
		}
		p.c.fault(AfterEffect, it.k)
		done = append(done, it)
		commits = append(commits, dedupe.CommitRequest{Key: it.k, Token: it.claim.Lease.Token})
	}
	for i, err := range dedupe.CommitAll(ctx, p.ledger, commits) {
		it := done[i]
		switch {
		case errors.Is(err, dedupe.ErrStaleToken):
			p.n.stale.Add(1)
			p.settle(ctx, it.m, ack(it.k, nil))
		case err != nil:
			p.release(ctx, it.k, it.claim.Lease.Token)
			v := nak(&it.k, 0, fmt.Errorf("ledger commit: %w", err))
			v.token = it.claim.Lease.Token
			p.settle(ctx, it.m, v)
		default:
			p.c.fault(AfterCommit, it.k)
			p.window.Add(it.k.Short())
			p.n.effects.Add(1)
			p.settle(ctx, it.m, ack(it.k, nil))
		}
	}
}

func (p *pipeline) observeEffect(res sink.Result, err error, took time.Duration) {
	outcome := "done"
	switch {
	case err != nil && errors.Is(err, sink.ErrPermanent):
		outcome = "dead"
	case err != nil:
		outcome = "retry"
	case res.Duplicate:
		outcome = "duplicate"
	}
	p.c.obs.Effect(p.cfg.Name, p.sinkName, outcome, took)
}
