package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/window"
)

// gate is the chain of stages of one pipeline or dispatcher (handler.go),
// and what its stages need.
type gate struct {
	c        *Consumer
	pipeline string
	n        *pipelineCounters // nil for a dispatcher
	d        *dispatcher       // set for a dispatcher: its effect is one-shot

	// keyOf sets t.key and t.intent, or returns the verdict on a trigger
	// that cannot be keyed.
	keyOf func(t *Trigger) *verdict

	window     *window.Window // nil: none
	windowOnly bool           // the window alone decides (gate-window mode)
	windowFP   bool           // the window remembers key and payload (mismatch reject)

	ledger     ledger.Ledger // nil in gate-window mode
	owner      string
	lease      time.Duration
	volatile   bool
	maxDeliver int                            // 0: no limit
	keepEvery  func(t *Trigger) time.Duration // how often to renew a held trigger

	step     *step  // nil without a model step
	stepName string // for the effect's headers
	sink     sink.Sink
	js       *sink.JetStream // the sink, when it publishes asynchronously
	sinkName string
	// dedupeWindow is how long the effect's target drops a repeat of its
	// key (the duplicate window of the stream a JetStream effect lands
	// in); 0 when unknown or unlimited.
	dedupeWindow time.Duration
	maxResult    int

	set     *settler
	h       Handler
	flights flights // the work this process holds
}

// build composes the gate's stages.
func (g *gate) build(wait Middleware) {
	var window, answer Middleware
	if g.window != nil {
		window = g.windowStage
	}
	claim := Middleware(nil)
	if g.ledger != nil {
		claim = g.claimStage
	}
	model := Middleware(nil)
	if g.step != nil {
		model, answer = g.model, faultAt(AfterAnswer, g.set)
	}
	var afterClaim Middleware
	switch {
	case g.d != nil:
		afterClaim = faultAt(AfterDispatchClaim, g.set)
	case g.ledger != nil:
		afterClaim = faultAt(AfterClaim, g.set)
	}
	g.h = chain(g.effect,
		g.keys,
		faultAt(BeforeAck, g.set),
		wait,
		window,
		faultAt(AfterCommit, g.set),
		claim,
		afterClaim,
		model,
		answer,
		faultAt(AfterEffect, g.set),
	)
}

// run takes a batch of messages through the gate and settles each.
func (g *gate) run(ctx context.Context, msgs []jetstream.Msg) {
	t0 := time.Now()
	ts := make([]*Trigger, len(msgs))
	for i, m := range msgs {
		ts[i] = newTrigger(m)
		g.traceBegin(ctx, ts[i])
	}
	if g.n != nil {
		g.n.deliveries.Add(int64(len(ts)))
		g.c.obs.InFlight(g.pipeline, len(ts))
		defer g.c.obs.InFlight(g.pipeline, -len(ts))
		for range ts {
			g.c.obs.Trigger(g.pipeline)
		}
	}
	g.h(ctx, ts)
	for _, t := range ts {
		if !t.decided {
			if t.effected {
				g.done(t)
				t.decide(ack(t.keyRef(), nil))
			} else {
				t.decide(nak(t.keyRef(), 0, errors.New("no stage decided the trigger")))
			}
		}
		sp := t.child(g, "oncegate.settle", trace.SpanKindInternal)
		g.set.settle(ctx, t)
		if sp.IsRecording() {
			sp.SetAttributes(attrVerdict.String(t.v.kind.String()))
		}
		sp.End()
		t.traceEnd()
		if g.n != nil {
			g.c.obs.SettleTime(g.pipeline, t.v.kind.String(), time.Since(t0))
		}
	}
}

// pass runs next on the triggers of ts not yet decided, if any.
func pass(ctx context.Context, next Handler, ts []*Trigger) []*Trigger {
	rest := open(ts)
	if len(rest) > 0 {
		next(ctx, rest)
	}
	return rest
}

// keys derives each trigger's intent key.
func (g *gate) keys(next Handler) Handler {
	return func(ctx context.Context, ts []*Trigger) {
		for _, t := range ts {
			sp := t.child(g, "oncegate.key", trace.SpanKindInternal)
			if v := g.keyOf(t); v != nil {
				t.decide(*v)
				endSpan(sp, v.err)
			} else {
				t.keyed = true
				if sp.IsRecording() {
					sp.SetAttributes(attrKey.String(t.intent.String()))
				}
				sp.End()
			}
		}
		pass(ctx, next, ts)
	}
}

// exhausted reports whether t came back after its last delivery: its
// process died (or drained) during that delivery.
func (g *gate) exhausted(t *Trigger) bool {
	return g.maxDeliver > 0 && t.deliveries() > uint64(g.maxDeliver)
}

func (g *gate) exhaustedErr(t *Trigger) error {
	return fmt.Errorf("delivered %d times (max_deliver %d); the last delivery did not finish (its process stopped)", t.deliveries(), g.maxDeliver)
}

// windowKey is t's key in the window. Under a mismatch policy of reject it
// includes the payload fingerprint, so that a reused key with another
// payload misses the window and reaches the ledger, which refuses it.
func (g *gate) windowKey(t *Trigger) uint64 {
	k := ledger.WindowKey(t.key)
	if g.windowFP {
		k ^= ledger.WindowKey(dedupe.Key(t.fp))*0x9e3779b97f4a7c15 | 1
	}
	return k
}

// windowStage drops the triggers whose key the window has seen.
func (g *gate) windowStage(next Handler) Handler {
	if g.windowOnly {
		// The window alone decides: it remembers a key once its effect is
		// out (Add after the effect, not SeenOrAdd before it). A key still
		// at work is not yet a duplicate: acking on its word would trust a
		// delivery that may have stalled past its ack wait and whose message
		// the server delivered again (and this stage may be about to ack
		// that redelivery). Two triggers of one key at work at once both
		// publish, under one Nats-Msg-Id: the effect stream keeps one.
		return func(ctx context.Context, ts []*Trigger) {
			keys := make([]uint64, len(ts))
			seen := make([]bool, len(ts))
			for i, t := range ts {
				keys[i] = g.windowKey(t)
				seen[i] = g.window.Contains(keys[i])
				g.traceWindow(t, seen[i])
				switch {
				case seen[i]:
					g.duplicate(GuardWindow)
					t.decide(ack(t.keyRef(), nil))
				case g.exhausted(t):
					t.decide(dead(t.keyRef(), ReasonExhausted, g.exhaustedErr(t)))
				}
			}
			pass(ctx, next, ts)
			for i, t := range ts {
				if !seen[i] && t.effected {
					g.window.Add(keys[i])
					g.done(t)
					if !t.decided {
						t.decide(ack(t.keyRef(), nil))
					}
				}
			}
		}
	}
	return func(ctx context.Context, ts []*Trigger) {
		for _, t := range ts {
			seen := g.window.Contains(g.windowKey(t))
			g.traceWindow(t, seen)
			if seen {
				g.duplicate(GuardWindow)
				t.decide(ack(t.keyRef(), nil))
			}
		}
		for _, t := range pass(ctx, next, ts) {
			if t.committed {
				g.window.Add(g.windowKey(t))
			}
		}
	}
}

// claimStage claims each trigger's key in the ledger, runs the rest of the
// chain on the ones it holds, keeping their messages and leases alive, and
// commits what the effect stage delivered.
func (g *gate) claimStage(next Handler) Handler {
	return func(ctx context.Context, ts []*Trigger) {
		reqs := make([]ledger.BeginRequest, len(ts))
		refs := make([]string, len(ts))
		for i, t := range ts {
			refs[i] = "#" + t.ref()
			reqs[i] = ledger.BeginRequest{Key: t.key, Options: ledger.BeginOptions{
				Owner: g.owner + refs[i], Fingerprint: t.fp, Lease: g.lease, Volatile: g.volatile,
			}}
		}
		var held, waiting []*Trigger
		spans := g.spans(ts, "oncegate.ledger.claim", trace.SpanKindClient)
		for i, r := range ledger.BeginAll(ctx, g.ledger, reqs) {
			t := ts[i]
			if spans != nil {
				if sp := spans[i]; sp.IsRecording() && r.Err == nil {
					sp.SetAttributes(attrClaim.String(r.Claim.Status.String()), attrAttempts.Int64(int64(r.Claim.Record.Attempts)))
				}
				endSpan(spans[i], r.Err)
			}
			if r.Err != nil {
				if errors.Is(r.Err, ledger.ErrFingerprintMismatch) {
					t.decide(dead(t.keyRef(), ReasonMismatch, r.Err))
				} else {
					t.decide(nak(t.keyRef(), 0, fmt.Errorf("ledger begin: %w", r.Err)))
				}
				continue
			}
			t.claim = r.Claim
			g.c.obs.Claim(g.pipeline, r.Claim.Status)
			if r.Claim.Status == ledger.StatusHeld {
				waiting = append(waiting, t)
				continue
			}
			if g.claimed(ctx, t, refs[i]) {
				held = append(held, t)
			}
		}
		// The work this process holds is in flight: a duplicate of it here
		// waits for it in the process rather than coming back later.
		g.flights.start(held)
		var local []*Trigger
		for _, t := range waiting {
			if g.d == nil {
				if f := g.flights.get(t.key); f != nil {
					t.flight = f
					local = append(local, t)
					continue
				}
			}
			g.claimed(ctx, t, "#"+t.ref())
		}
		if len(held) > 0 {
			// The leases of held are ours until they are committed,
			// released or failed.
			g.c.obs.Leases(g.pipeline, len(held))
			hctx, stop := g.hold(ctx, held)
			next(hctx, held)
			stop()
			g.finish(ctx, held)
			g.flights.end(held)
			g.c.obs.Leases(g.pipeline, -len(held))
		}
		for _, t := range local {
			g.awaitLocal(ctx, t)
		}
	}
}

// maxLocalWait bounds how long a duplicate waits in the process for the
// local work that holds its intent (a worker waits with it): work on the
// gate's paths ends in milliseconds; past this, a model step's, say, the
// duplicate comes back later instead.
const maxLocalWait = 2 * time.Second

// awaitLocal decides a trigger whose intent is held by work in this
// process: once that work is over, a duplicate if it committed, else it
// waits on the intent as any duplicate of held work does.
func (g *gate) awaitLocal(ctx context.Context, t *Trigger) {
	f := t.flight
	tm := time.NewTimer(min(t.claim.RetryAfter, maxLocalWait))
	defer tm.Stop()
	select {
	case <-f.done:
	case <-tm.C:
	case <-ctx.Done():
	}
	select {
	case <-f.done:
		if f.committed {
			t.committed = true // the window remembers it
			g.duplicate(GuardLedger)
			t.decide(ack(t.keyRef(), f.response))
			return
		}
	default:
	}
	g.claimed(ctx, t, "#"+t.ref())
}

// claimed decides a trigger by its claim's status, and reports whether the
// caller now holds its work.
func (g *gate) claimed(ctx context.Context, t *Trigger, ref string) bool {
	c := t.claim
	switch c.Status {
	case ledger.StatusCommitted:
		if g.d != nil { // the effect was sent; this is a redelivery of its entry
			t.decide(ack(t.keyRef(), nil))
			return false
		}
		t.committed = true // the window remembers it
		g.duplicate(GuardLedger)
		t.decide(ack(t.keyRef(), c.Record.Result.Response))
		return false
	case ledger.StatusHeld:
		// Another message's work holds the intent (or this message's own,
		// through an earlier delivery that is stalled or dead; or an outbox
		// entry someone is cancelling). This one waits: it comes back when
		// the work is likely done, or the lease out. It is not acked as a
		// duplicate yet: the holder may be working through a stale
		// delivery, one the server delivered again meanwhile, and whose
		// message another worker may have acked already; if that work
		// fails, this message is what brings the intent back.
		if g.n != nil {
			g.n.held.Add(1)
		}
		own := strings.HasSuffix(c.Record.Owner, ref)
		g.c.log.Debug("work held by another", "pipeline", g.pipeline, "key", t.intent.String(), "ref", ref, "holder", c.Record.Owner, "own", own, "for", c.RetryAfter)
		d := c.RetryAfter + 10*time.Millisecond
		if !own {
			// The holder is likely alive and soon done: look again on the
			// retry schedule, up to the lease's end.
			d = min(d, g.set.retryDelay(int(t.deliveries())))
		}
		t.decide(wait(t.keyRef(), d, errors.New("held by another worker")))
		return false
	case ledger.StatusFailed:
		if g.d != nil && c.Record.Reason == reasonCancelled {
			g.d.count(func(s *DispatchStats) { s.Cancelled++ })
			t.decide(ack(t.keyRef(), nil))
			return false
		}
		// The work was given up, and this message dead-lettered or on its
		// way to be: dead-letter it (again). Its dead letter's Nats-Msg-Id
		// names the message, so one published already, whose message came
		// back because its term or the publish's answer was lost, is not
		// kept twice; one whose publish failed is published now. (Acking it
		// as "dead-lettered before" lost an outbox entry whose dead letter
		// a cluster node's fault had refused.)
		r, why := failure(c.Record.Reason)
		t.decide(dead(t.keyRef(), r, errors.New(why)))
		return false
	case ledger.StatusTakenOver:
		if g.n != nil {
			g.n.takenOver.Add(1)
		}
	}
	t.token.Store(c.Lease.Token)
	switch {
	case g.maxDeliver > 0 && c.Record.Attempts > uint32(g.maxDeliver):
		g.giveUp(ctx, t, dead(t.keyRef(), ReasonExhausted, fmt.Errorf(
			"the work was begun %d times (max_deliver %d); the last attempt did not finish (its process stopped)", c.Record.Attempts-1, g.maxDeliver)))
		return false
	case c.Status != ledger.StatusTakenOver:
		return true
	case g.d != nil:
		// A dispatcher claimed this one-shot effect and stopped before
		// recording the outcome. It may or may not have gone out, and a
		// one-shot sink cannot be asked: report it, never resend it.
		g.d.count(func(s *DispatchStats) { s.Unknown++ })
		g.giveUp(ctx, t, dead(t.keyRef(), ReasonUnknownOutcome, errors.New("a dispatcher claimed this effect and stopped before recording the outcome; it may or may not have been sent, and a one-shot effect is not resent")))
		return false
	}
	// An earlier holder may have performed the effect. A redo is harmless
	// only while the target still drops a repeat of the key.
	if g.dedupeWindow > 0 {
		now := c.Lease.Until.Add(-g.lease) // on the ledger's clock, as Created is
		if age := now.Sub(c.Record.Created); age+g.c.cfg.Ledger.MaxClockSkew >= g.dedupeWindow {
			g.giveUp(ctx, t, dead(t.keyRef(), ReasonUnknownOutcome, fmt.Errorf(
				"the work was begun %s ago (clocks apart by up to %s) and its holder stopped: it may have performed the effect, and a redo past the target's duplicate window (%s) would not be dropped",
				age.Round(time.Millisecond), g.c.cfg.Ledger.MaxClockSkew, g.dedupeWindow)))
			return false
		}
	}
	return true
}

// hold keeps the held triggers' messages and leases alive while the rest
// of the chain works on them. The context it returns ends if the leases
// run out without renewal, or are all taken over: work past that point
// could race the new holder.
//
// Renewals run on a timer, so work that ends before the first one is due
// (most work: a renewal is due after a third of the ack wait or the lease)
// costs no goroutine; the stop function waits for a renewal under way.
func (g *gate) hold(ctx context.Context, held []*Trigger) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	until := held[0].claim.Lease.Until
	for _, t := range held[1:] {
		if t.claim.Lease.Until.Before(until) {
			until = t.claim.Lease.Until
		}
	}
	expire := time.AfterFunc(time.Until(until), func() { cancel(errLeaseExpired) })
	every := max(g.keepEvery(held[0])/3, 50*time.Millisecond)
	var (
		mu      sync.Mutex // held by a renewal under way, and by stop
		stopped bool
		tick    *time.Timer
	)
	mu.Lock() // tick is set before the renewal reads it
	tick = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		// The next renewal is due every after this one began, not after
		// it ended: a pass over many leases on a slow store (a KV bucket
		// electing a leader) must not stretch the interval past a lease.
		start := time.Now()
		g.renew(ctx, held, cancel, expire)
		tick.Reset(max(every-time.Since(start), 0))
	})
	mu.Unlock()
	return ctx, func() {
		mu.Lock()
		stopped = true
		tick.Stop()
		mu.Unlock()
		expire.Stop()
		cancel(nil)
	}
}

// renew marks the held triggers in progress and extends their leases; it
// cancels the work if every lease was taken over, and moves the expiry to
// the earliest new deadline.
func (g *gate) renew(ctx context.Context, held []*Trigger, cancel context.CancelCauseFunc, expire *time.Timer) {
	live := 0
	var next time.Time
	for _, t := range held {
		if t.lost.Load() {
			continue
		}
		g.set.inProgress(t.msg)
		l, err := g.ledger.Extend(context.WithoutCancel(ctx), t.key, t.token.Load(), g.lease)
		switch {
		case err == nil:
			t.token.Store(l.Token)
			if next.IsZero() || l.Until.Before(next) {
				next = l.Until
			}
			live++
		case errors.Is(err, ledger.ErrStaleToken):
			t.lost.Store(true) // taken over: the new holder answers for it
		default:
			live++
			g.c.log.Warn("lease renewal failed", "pipeline", g.pipeline, "key", t.key.String(), "err", err)
		}
	}
	if live == 0 {
		cancel(errLeaseLost)
	} else if !next.IsZero() {
		expire.Reset(time.Until(next))
	}
}

var (
	errLeaseExpired = errors.New("consumer: the lease ran out before the work finished")
	errLeaseLost    = errors.New("consumer: the lease was taken over by another worker")
)

// finish commits what the held triggers' effects produced, and releases or
// fails the leases of the others.
func (g *gate) finish(ctx context.Context, held []*Trigger) {
	var commits []ledger.CommitRequest
	var done []*Trigger
	for _, t := range held {
		token := t.token.Load()
		switch {
		case t.lost.Load() && !t.effected:
			// Taken over while it worked: the new holder answers for the
			// intent; this message waits to see it done.
			g.stale()
			t.decide(wait(t.keyRef(), g.lease, errLeaseLost))
		case t.effected:
			res := ledger.Result{DownstreamID: string(t.res.Body), ModelRef: t.modelRef}
			if g.step != nil && len(t.body)+len(res.DownstreamID)+len(res.ModelRef) <= g.maxResult {
				// Kept for the replies to later duplicates. A larger body is
				// not kept: the ledger would refuse the commit, and the
				// effect went out all the same.
				res.Response = t.body
			}
			commits = append(commits, ledger.CommitRequest{Key: t.key, Token: token, Result: res})
			done = append(done, t)
		case !t.decided:
			g.release(ctx, t)
			t.decide(nak(t.keyRef(), 0, errors.New("the work did not finish")))
			t.v.token, t.v.attempts = token, t.claim.Record.Attempts
		case t.v.kind == settleDead:
			g.giveUp(ctx, t, t.v)
		case t.v.kind == settleNak && t.v.waits:
			// Its lease went to another holder: nothing to release.
		case t.v.kind == settleNak:
			g.release(ctx, t)
			t.v.token, t.v.attempts = token, t.claim.Record.Attempts
		}
	}
	if len(commits) == 0 {
		return
	}
	spans := g.spans(done, "oncegate.ledger.commit", trace.SpanKindClient)
	for i, err := range ledger.CommitAll(ctx, g.ledger, commits) {
		t := done[i]
		if spans != nil {
			endSpan(spans[i], err)
		}
		switch {
		case errors.Is(err, ledger.ErrStaleToken):
			// Another worker took the work over and commits it; the effect
			// went out under the same key, so the target collapses the two.
			g.stale()
			t.decide(ack(t.keyRef(), nil))
		case err != nil:
			// The effect went out; the redelivery takes the work over at
			// once and sends it again under the same key, which the target
			// collapses (a one-shot dispatch reports its outcome unknown).
			g.release(ctx, t)
			t.decide(nak(t.keyRef(), 0, fmt.Errorf("ledger commit: %w", err)))
			t.v.token, t.v.attempts = commits[i].Token, t.claim.Record.Attempts
		default:
			t.committed = true
			g.done(t)
			t.decide(ack(t.keyRef(), commits[i].Result.Response))
		}
	}
}

// release ends t's lease now, so that its redelivery takes the work over
// at once instead of waiting for the lease to run out.
func (g *gate) release(ctx context.Context, t *Trigger) {
	if _, err := g.ledger.Extend(ctx, t.key, t.token.Load(), time.Nanosecond); err != nil && !errors.Is(err, ledger.ErrStaleToken) {
		g.c.log.Warn("releasing a lease failed; the redelivery waits for it to run out", "pipeline", g.pipeline, "key", t.key.String(), "err", err)
	}
}

// giveUp decides a dead letter for work that failed for good, and records
// it failed in the ledger, unless another worker has taken the work over
// meanwhile: its failure is then not the intent's (a refusal because the
// new holder sent first, say), the new holder settles the intent, and this
// trigger waits to see it settled.
func (g *gate) giveUp(ctx context.Context, t *Trigger, v verdict) {
	err := g.ledger.Fail(ctx, t.key, t.token.Load(), failureReason(v.reason, v.err))
	switch {
	case errors.Is(err, ledger.ErrStaleToken):
		// Put back rather than acked: the new holder may hold a redelivery
		// of this very message; the next delivery finds the work
		// committed, or failed, or takes it over.
		g.stale()
		g.c.log.Info("gave up on work another worker has taken over; it answers for the intent", "pipeline", g.pipeline, "key", t.key.String(), "err", v.err)
		t.decide(wait(t.keyRef(), g.lease, fmt.Errorf("another worker took the work over: %w", errOr(v.err))))
		return
	case err != nil:
		g.c.log.Warn("recording a failure in the ledger failed", "pipeline", g.pipeline, "key", t.key.String(), "err", err)
	}
	t.decide(v)
}

// model runs the model step of each trigger.
func (g *gate) model(next Handler) Handler {
	return func(ctx context.Context, ts []*Trigger) {
		each(ts, func(t *Trigger) {
			t0 := time.Now()
			sp := t.child(g, "chat "+g.step.model, trace.SpanKindClient)
			ans, err := g.step.run(trace.ContextWithSpan(ctx, sp), t.intent, t.msg.Data())
			traceModel(sp, g.step.model, ans, err)
			g.n.modelCalls.Add(1)
			g.c.obs.Step(g.pipeline, g.step.cfg.Name, time.Since(t0))
			if err != nil {
				if se, ok := errors.AsType[*stepError](err); ok && se.permanent {
					t.decide(dead(t.keyRef(), se.reason, err))
				} else {
					t.decide(nak(t.keyRef(), 0, err))
				}
				return
			}
			body, err := g.effectBody(t.intent, t.msg.Data(), ans)
			if err != nil {
				t.decide(dead(t.keyRef(), ReasonInvalidJSON, err))
				return
			}
			t.body, t.modelRef = body, ans.cacheKey
		})
		pass(ctx, next, ts)
	}
}

// failureReason is what a failed record says: the dead letter's reason,
// then why.
func failureReason(r Reason, err error) string {
	return string(r) + ": " + errOr(err).Error()
}

// failure splits a failed record's reason back into the dead letter's
// reason and why; a reason without one is poison.
func failure(s string) (Reason, string) {
	if r, why, ok := strings.Cut(s, ": "); ok && validReason(Reason(r)) {
		return Reason(r), why
	}
	return ReasonPoison, s
}

// each runs f on every trigger, concurrently when there are several.
func each(ts []*Trigger, f func(t *Trigger)) {
	if len(ts) == 1 {
		f(ts[0])
		return
	}
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Go(func() { f(t) })
	}
	wg.Wait()
}

// effect performs each trigger's effect; it is the last stage.
func (g *gate) effect(ctx context.Context, ts []*Trigger) {
	live := ts[:0:0]
	for _, t := range ts {
		if t.lost.Load() {
			// Taken over before the effect: the new holder does it. The
			// trigger is put back, not acked: the new holder may be working
			// on a redelivery of this very message, and if it fails, the
			// message must still come back. Its next delivery finds the
			// work committed, or takes it over again.
			g.stale()
			t.decide(wait(t.keyRef(), g.lease, errLeaseLost))
			continue
		}
		live = append(live, t)
	}
	eff := func(t *Trigger) sink.Effect {
		e := sink.Effect{Key: t.intent.String(), Pipeline: g.pipeline, Step: g.stepName, Body: t.body}
		if t.span != nil {
			t.esp = t.child(g, "oncegate.effect", trace.SpanKindProducer)
			e.Header = injectTrace(t.esp, e.Header)
		}
		return e
	}
	if g.js != nil {
		for _, t := range live {
			t.pend = g.js.PublishAsync(eff(t))
		}
		// One deadline for the batch's PubAcks.
		wctx, cancel := context.WithTimeout(ctx, g.js.Timeout())
		defer cancel()
		t0 := time.Now()
		for _, t := range live {
			res, err := t.pend.Wait(wctx)
			g.effectOutcome(t, res, err, time.Since(t0))
		}
		return
	}
	each(live, func(t *Trigger) {
		t0 := time.Now()
		res, err := g.sink.Deliver(ctx, eff(t))
		g.effectOutcome(t, res, err, time.Since(t0))
	})
}

// effectOutcome records what the sink said of t's effect.
func (g *gate) effectOutcome(t *Trigger, res sink.Result, err error, took time.Duration) {
	outcome := "done"
	switch {
	case err == nil:
		t.res, t.effected = res, true
		if res.Duplicate {
			outcome = "duplicate"
		}
	case errors.Is(err, sink.ErrKeyConflict):
		// The target already has this key with another body: the
		// intent's effect exists (a holder before a crash sent it, or a
		// reworded duplicate did). Record it as done, never as failed: a
		// person replaying a dead letter would do it twice.
		g.c.log.Info("the target already has this key with another body: the effect exists", "pipeline", g.pipeline, "key", t.intent.String(), "err", err)
		t.res, t.effected = sink.Result{Status: res.Status, Duplicate: true}, true
		outcome = "key_reused"
	case g.d != nil:
		// A one-shot sink that failed may have acted all the same (a
		// timeout after the message went out): nothing is resent.
		if errors.Is(err, sink.ErrPermanent) {
			g.d.count(func(s *DispatchStats) { s.Failed++ })
			t.decide(dead(t.keyRef(), ReasonPermanentEffect, err))
			outcome = "dead"
		} else {
			g.d.count(func(s *DispatchStats) { s.Unknown++ })
			t.decide(dead(t.keyRef(), ReasonUnknownOutcome, err))
			outcome = "retry"
		}
	case errors.Is(err, sink.ErrPermanent):
		t.decide(dead(t.keyRef(), ReasonPermanentEffect, err))
		outcome = "dead"
	default:
		t.decide(nak(t.keyRef(), 0, err))
		outcome = "retry"
	}
	name := g.sinkName
	g.c.obs.Effect(g.pipeline, name, outcome, took)
	if t.esp != nil {
		t.esp.SetAttributes(attrSink.String(name), attrOutcome.String(outcome))
		endSpan(t.esp, err)
	}
}

// done counts an effect performed and settled.
func (g *gate) done(t *Trigger) {
	if g.d != nil {
		g.d.count(func(s *DispatchStats) { s.Sent++ })
		return
	}
	g.n.effects.Add(1)
	if t.res.Duplicate {
		g.n.dupStream.Add(1)
		g.c.obs.Duplicate(g.pipeline, GuardStream)
	}
}

// duplicate counts a trigger stopped as a duplicate by the window or the
// ledger.
func (g *gate) duplicate(gd Guard) {
	if g.n == nil {
		return
	}
	if gd == GuardWindow {
		g.n.dupWindow.Add(1)
	} else {
		g.n.dupLedger.Add(1)
	}
	g.c.obs.Duplicate(g.pipeline, gd)
}

func (g *gate) stale() {
	if g.n != nil {
		g.n.stale.Add(1)
	}
}

// flight is work on an intent this process holds.
type flight struct {
	done      chan struct{} // closed when the work is over; made when a duplicate first waits
	committed bool          // set before done is closed
	response  []byte        // the committed result's response, for replies
}

// flights are the intents a gate's work holds in this process, by ledger
// key.
type flights struct {
	mu sync.Mutex
	m  map[dedupe.Key]*flight
}

// start records the work of held as in flight.
func (fs *flights) start(held []*Trigger) {
	if len(held) == 0 {
		return
	}
	fs.mu.Lock()
	if fs.m == nil {
		fs.m = make(map[dedupe.Key]*flight)
	}
	for _, t := range held {
		fs.m[t.key] = &flight{}
	}
	fs.mu.Unlock()
}

// get returns the flight of key, ready to be waited on, or nil.
func (fs *flights) get(key dedupe.Key) *flight {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.m[key]
	if f != nil && f.done == nil {
		f.done = make(chan struct{})
	}
	return f
}

// end records the work of held as over, committed or not.
func (fs *flights) end(held []*Trigger) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, t := range held {
		f := fs.m[t.key]
		if f == nil {
			continue
		}
		delete(fs.m, t.key)
		if f.done == nil {
			continue // no duplicate waited
		}
		f.committed = t.committed
		if t.committed && t.v.kind == settleAck {
			f.response = t.v.reply
		}
		close(f.done)
	}
}
