package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// claimStage claims each trigger's key in the ledger, runs the rest of the
// chain on the ones it holds, keeping their messages and leases alive
// (lease.go), and commits what the effect stage delivered.
type claimStage struct {
	g         *gate
	volatile  bool                           // the claims may be kept in memory (ledger.BeginOptions.Volatile)
	keepEvery func(t *Trigger) time.Duration // how often to renew a held trigger
	flights   flights                        // the work this process holds
}

func (s *claimStage) name() string { return "claim" }

func (s *claimStage) wrap(next Handler) Handler {
	g := s.g
	return func(ctx context.Context, ts []*Trigger) {
		reqs := make([]ledger.BeginRequest, len(ts))
		refs := make([]string, len(ts))
		for i, t := range ts {
			refs[i] = "#" + t.ref()
			reqs[i] = ledger.BeginRequest{Key: t.key, Options: ledger.BeginOptions{
				Owner: g.owner + refs[i], Fingerprint: t.fp, Lease: g.lease, Volatile: s.volatile,
			}}
		}
		var held, waiting []*Trigger
		spans := g.spans(ts, "oncegate.ledger.claim", trace.SpanKindClient)
		asked := mono()
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
					t.decide(dead(t.keyRef(), outcome.ReasonMismatch, r.Err))
				} else {
					t.decide(g.unavailable(t, fmt.Errorf("ledger begin: %w", r.Err)))
				}
				continue
			}
			g.c.health.ok()
			t.claim = r.Claim
			status := r.Claim.Status
			if status == ledger.StatusTakenOver && r.Claim.Released {
				status = ledger.StatusNew // given back undone: nothing to take over
			}
			g.c.obs.Claim(g.pipeline, status)
			if r.Claim.Status == ledger.StatusHeld {
				waiting = append(waiting, t)
				continue
			}
			t.leaseEnd.Store(asked + int64(g.lease))
			if g.claimed(ctx, t, refs[i]) {
				held = append(held, t)
			}
		}
		// The work this process holds is in flight: a duplicate of it here
		// waits for it in the process rather than coming back later.
		s.flights.start(held)
		if g.step != nil {
			// From the claim on, a replica that takes one of these
			// intents over and asks for its answer waits for this work.
			for _, t := range held {
				t.call = g.c.board.start(t.key)
			}
		}
		var local []*Trigger
		for _, t := range waiting {
			if g.pol.waitLocal {
				if f := s.flights.get(t.key); f != nil {
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
			hctx, stop := s.hold(ctx, held)
			func() {
				// A panic past the claim still leaves the leases to
				// finish, which releases or records them.
				defer g.recoverBatch(held, stageGate)
				next(hctx, held)
			}()
			stop()
			for _, t := range held {
				if t.call != nil {
					g.c.board.finish(t.key, t.call, t.stepNote)
				}
			}
			g.finish(ctx, held)
			s.flights.end(held)
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
			g.pol.duplicate(t, outcome.GuardLedger)
			t.decide(ack(t.keyRef(), g.answer(t, f.fp, f.response)))
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
		if !g.pol.duplicates { // the effect was sent; this is a redelivery of its entry
			t.decide(ack(t.keyRef(), nil))
			return false
		}
		t.committed = true // the window remembers it
		g.pol.duplicate(t, outcome.GuardLedger)
		t.decide(ack(t.keyRef(), g.answer(t, c.Record.Fingerprint, c.Record.Result.Response)))
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
		g.pol.held()
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
		if g.pol.ackFailed != "" && c.Record.Reason == g.pol.ackFailed {
			g.pol.cancelled()
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
		if !c.Released {
			g.pol.takenOver()
		}
	}
	t.token.Store(c.Lease.Token)
	switch {
	case g.maxDeliver > 0 && c.Record.Attempts > uint32(g.maxDeliver):
		g.giveUp(ctx, t, dead(t.keyRef(), outcome.ReasonExhausted, fmt.Errorf(
			"the work was begun %d times (max_deliver %d); the last attempt did not finish (its process stopped)", c.Record.Attempts-1, g.maxDeliver)))
		return false
	case c.Status != ledger.StatusTakenOver || c.Released:
		// New work, or work its last holder gave back before sending its
		// effect (released): nothing may have been done.
		return true
	case !g.pol.redoTakenOver:
		// A dispatcher claimed this one-shot effect and stopped before
		// recording the outcome. It may or may not have gone out, and a
		// one-shot sink cannot be asked: report it, never resend it.
		g.pol.unknown()
		g.giveUp(ctx, t, dead(t.keyRef(), outcome.ReasonUnknownOutcome, errors.New("a dispatcher claimed this effect and stopped before recording the outcome; it may or may not have been sent, and a one-shot effect is not resent")))
		return false
	}
	// An earlier holder may have performed the effect. A redo is harmless
	// only while the target still drops a repeat of the key.
	if g.dedupeWindow > 0 {
		now := c.Lease.Until.Add(-g.lease) // on the ledger's clock, as Created is
		if age := now.Sub(c.Record.Created); age+g.c.cfg.Ledger.MaxClockSkew >= g.dedupeWindow {
			g.giveUp(ctx, t, dead(t.keyRef(), outcome.ReasonUnknownOutcome, fmt.Errorf(
				"the work was begun %s ago (clocks apart by up to %s) and its holder stopped: it may have performed the effect, and a redo past the target's duplicate window (%s) would not be dropped",
				age.Round(time.Millisecond), g.c.cfg.Ledger.MaxClockSkew, g.dedupeWindow)))
			return false
		}
	}
	return true
}

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
			g.pol.stale()
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
			g.release(ctx, t, !t.sent)
			t.decide(nak(t.keyRef(), 0, errors.New("the work did not finish")))
			t.v.token, t.v.attempts = token, t.claim.Record.Attempts
		case t.v.kind == settleDead:
			g.giveUp(ctx, t, t.v)
		case t.v.kind == settleNak && t.v.waits:
			// Its lease went to another holder: nothing to release.
		case t.v.kind == settleNak:
			g.release(ctx, t, !t.sent)
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
			// The message is put back, not acked: the new holder may hold a
			// redelivery of this very message, and if its work fails this
			// one must still come back; its next delivery finds the work
			// committed, or takes it over.
			g.pol.stale()
			t.decide(wait(t.keyRef(), g.lease, errLeaseLost))
		case err != nil:
			// The effect went out and the ledger did not record it: that is
			// no failure of the work, and no try. The redelivery takes the
			// work over (at once if the release gets through, else when the
			// lease runs out) and sends it again under the same key, which
			// the target collapses (a one-shot dispatch reports its outcome
			// unknown).
			g.release(ctx, t, false)
			t.decide(g.unavailable(t, fmt.Errorf("ledger commit: %w", err)))
		default:
			t.committed = true
			g.pol.done(t)
			t.decide(ack(t.keyRef(), commits[i].Result.Response))
		}
	}
}

// release ends t's lease now, so that its redelivery takes the work over
// at once instead of waiting for the lease to run out: undone (Extend by
// 0: the redelivery claims it as new work, Claim.Released) if its effect
// was never handed to its sink, else as a holder that stopped (its lease
// ends in a nanosecond: the effect may exist, and the redelivery takes the
// work over as such).
func (g *gate) release(ctx context.Context, t *Trigger, undone bool) {
	end := time.Nanosecond
	if undone {
		end = 0
	}
	if _, err := g.ledger.Extend(ctx, t.key, t.token.Load(), end); err != nil && !errors.Is(err, ledger.ErrStaleToken) {
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
		g.pol.stale()
		g.c.log.Info("gave up on work another worker has taken over; it answers for the intent", "pipeline", g.pipeline, "key", t.key.String(), "err", v.err)
		t.decide(wait(t.keyRef(), g.lease, fmt.Errorf("another worker took the work over: %w", errOr(v.err))))
		return
	case err != nil:
		// No dead letter while the record stays pending: a later delivery
		// could take the work over and do it after the dead letter said it
		// was not done. The trigger waits, and gives up again when the
		// ledger answers.
		t.decide(g.unavailable(t, fmt.Errorf("recording the failure (%s: %v) in the ledger: %w", v.reason, v.err, err))) //nolint:errorlint // the ledger's error decides; the failure is told, not matched
		return
	}
	t.decide(v)
}

// answer is the reply to t, a duplicate of committed work: the stored
// response if t's payload is the one the work was done for (fp), else the
// status and key only. The stored response embeds the first trigger's
// payload and the model's answer, which a publisher who knows only the key
// fields of someone else's trigger must not read.
func (g *gate) answer(t *Trigger, fp dedupe.Fingerprint, response []byte) []byte {
	if t.fp == fp {
		return response
	}
	b, _ := json.Marshal(struct {
		Key      string `json:"key"`
		Status   string `json:"status"`
		Mismatch bool   `json:"mismatch"`
	}{t.intent.String(), "committed", true})
	return b
}

// unavailable is the verdict on a trigger whose claim, commit or failure
// the ledger did not record: it waits, and it is not a try (see health.go).
func (g *gate) unavailable(t *Trigger, err error) verdict {
	d := g.c.health.failed(err)
	g.c.obs.LedgerUnavailable(g.pipeline)
	g.c.log.Warn("the ledger does not answer; the trigger waits, and it is not a try", "pipeline", g.pipeline, "key", keyString(t.keyRef()), "in", d, "err", err)
	return wait(t.keyRef(), d, err)
}

// failureReason is what a failed record says: the dead letter's reason,
// then why.
func failureReason(r outcome.Reason, err error) string {
	return string(r) + ": " + errOr(err).Error()
}

// failure splits a failed record's reason back into the dead letter's
// reason and why; a reason without one is poison.
func failure(s string) (outcome.Reason, string) {
	if r, why, ok := strings.Cut(s, ": "); ok && outcome.Reason(r).Valid() {
		return outcome.Reason(r), why
	}
	return outcome.ReasonPoison, s
}
