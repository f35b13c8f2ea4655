package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Redrive implements [API]. Each dead letter selected is taken in turn:
//
//  1. one already redriven (its mark) is left alone unless r.Again; one of
//     reason unknown_outcome is refused without r.UnknownOutcome
//     StatementNotSent, and one whose payload was cut is refused;
//  2. the intent's record is read: committed means nothing to redo, and
//     pending means someone is on it, and either way nothing is sent; a
//     record that failed with an unknown outcome is refused without the
//     statement, whatever the dead letter's headers say (they are what
//     its publisher wrote); a failed record is cleared with ledger.Ledger.Clear at the token read,
//     which refuses if the record changed since (then it is read again);
//  3. the trigger is republished to its subject with its payload and
//     headers, Oncegate-Redrive, and a Nats-Msg-Id naming the dead letter
//     and the redrive's generation, so that a retried redrive is kept once;
//  4. the dead letter is marked redriven, with who asked.
//
// Without r.Yes it stops before step 2 writes anything, and says what it
// would do.
func (a *Admin) Redrive(ctx context.Context, r RedriveRequest) (RedriveReply, error) {
	reply := RedriveReply{DryRun: !r.Yes, Results: []RedriveResult{}}
	if r.UnknownOutcome != "" && r.UnknownOutcome != StatementNotSent {
		return reply, errorf(ErrBadRequest, "admin: the one statement about an unknown outcome is %q (the effect did not happen), not %q", StatementNotSent, r.UnknownOutcome)
	}
	marks := a.marks(ctx, r.Yes)
	if r.Yes && marks == nil {
		return reply, fmt.Errorf("admin: the redrive marks bucket %s cannot be opened or created", MarksBucket)
	}
	var err error
	reply.More, reply.Next, err = a.scan(ctx, r.Selection, func(d DeadLetter, h nats.Header, data []byte) error {
		res, err := a.redriveOne(ctx, r, "", marks, d, h, data, nil)
		if err != nil {
			return fmt.Errorf("admin: dead letter %s %d: %w", d.Stream, d.Seq, err)
		}
		if r.Yes {
			_ = a.record(ctx, auditOf(&d, &res, r, ""))
		}
		reply.Results = append(reply.Results, res)
		return nil
	})
	return reply, err
}

// auditOf is the audit entry of a redrive of d that came to res.
func auditOf(d *DeadLetter, res *RedriveResult, r RedriveRequest, job string) AuditEntry {
	e := AuditEntry{
		Action: AuditRedrive, By: r.By.String(), Key: d.Key, Pipeline: d.Pipeline, Effect: d.Effect,
		Letter: refOf(d), Job: job, Outcome: res.Outcome, Ledger: res.Ledger, Detail: res.Detail,
	}
	if m := res.Mark; m != nil {
		e.Statement = m.Statement
		if res.Outcome == OutcomeRedriven {
			e.At = m.At
		}
		if res.Outcome == OutcomeRedriven && e.Detail == "" {
			e.Detail = fmt.Sprintf("republished as %s %d", m.Stream, m.Seq)
		}
	}
	return e
}

// knownMark is a dead letter's mark as the caller read it (from the
// index, for a preview): redriveOne then does not read it again.
type knownMark struct {
	mark *Mark
}

// redriveOne redrives d (its message's headers h and data), or says what
// it would do (without r.Yes; then h and data are not read). job names the
// bulk redrive it is part of.
func (a *Admin) redriveOne(ctx context.Context, r RedriveRequest, job string, marks jetstream.KeyValue, d DeadLetter, h nats.Header, data []byte, known *knownMark) (RedriveResult, error) {
	res := RedriveResult{Stream: d.Stream, Seq: d.Seq, Pipeline: d.Pipeline, Reason: d.Reason, Key: d.Key, Effect: d.Effect, Sink: d.Sink}
	refuse := func(format string, args ...any) (RedriveResult, error) {
		res.Outcome, res.Detail = OutcomeRefused, fmt.Sprintf(format, args...)
		return res, nil
	}
	p, ok := a.pipes[d.Pipeline]
	if !ok {
		return refuse("pipeline %q is not in the configuration", d.Pipeline)
	}
	var mark *Mark
	var rev uint64
	switch {
	case known != nil:
		mark = known.mark
	case marks != nil:
		var err error
		if mark, rev, err = readMark(ctx, marks, d.Stream, d.Seq); err != nil {
			return res, err
		}
	}
	gen := 1
	if mark != nil {
		if !r.Again {
			res.Outcome, res.Mark = OutcomeAlreadyRedriven, mark
			res.Detail = fmt.Sprintf("redriven at %s by %s (insist with again)", mark.At.Format(time.RFC3339), mark.By)
			return res, nil
		}
		gen = mark.Generation + 1
	}
	if d.Truncated {
		return refuse("the dead letter kept only the first %d bytes of the trigger's payload; republish the trigger from its source", d.Size)
	}
	if outcome.Reason(d.Reason) == outcome.ReasonUnknownOutcome && r.UnknownOutcome != StatementNotSent {
		return refuse("its effect may have happened: check the target, and redrive it with the statement %s only if it did not", StatementNotSent)
	}
	subject := d.Subject
	// An outbox entry (or its parked copy, waiting for an approval) goes
	// back to the outbox, keyed by the key its effect is sent under: the
	// intent's for the pipeline's one-shot effect, a named one-shot
	// effect's (consumer.EffectKey) for a named one; its dispatch record
	// is the one to clear. The outbox's subjects are Oncegate's own.
	oneShotEntry := isOutbox(subject, p.Name)
	if oneShotEntry {
		subject = consumer.OutboxSubject(p.Name)
	}
	what := "the failure"
	if oneShotEntry {
		what = "the failed dispatch"
		if d.Effect != "" {
			what += " of " + d.Effect
		}
	}

	// The intent's record, or its effect's dispatch.
	var lkey dedupe.Key
	haveKey := false
	if d.Key != "" && a.hasLedger(p) {
		raw := d.Key
		if oneShotEntry && d.EffectKey != "" {
			raw = d.EffectKey
		}
		k, err := dedupe.ParseKey(raw)
		if err != nil {
			return refuse("its key header %q does not parse: %v", raw, err)
		}
		lkey, haveKey = k, true
		if oneShotEntry {
			lkey = consumer.DispatchKey(k)
		}
	}
	note := fmt.Sprintf("redriven from dead letter %s %d by %s", d.Stream, d.Seq, r.By)
	if r.UnknownOutcome != "" {
		note += ", who stated that the effect was " + r.UnknownOutcome
	}
	if haveKey {
		for try := 0; ; try++ {
			rec, err := a.opts.Ledger.Get(ctx, lkey)
			switch {
			case errors.Is(err, ledger.ErrNotFound):
				res.Ledger = "no record"
			case err != nil:
				return res, err
			case rec.State == ledger.StateCommitted:
				res.Outcome, res.Ledger = OutcomeCommitted, "committed"
				res.Detail = fmt.Sprintf("the intent was done at %s: nothing to redrive", rec.Result.Committed.UTC().Format(time.RFC3339))
				if oneShotEntry {
					res.Detail = fmt.Sprintf("the effect %s was sent at %s: nothing to redrive", cmpOr(d.Effect, "of the pipeline"), rec.Result.Committed.UTC().Format(time.RFC3339))
				}
				return res, nil
			case rec.State == ledger.StatePending:
				res.Outcome, res.Ledger = OutcomeInProgress, "pending"
				res.Detail = fmt.Sprintf("held by %s (lease until %s), or its holder stopped: nothing cleared, nothing sent", rec.Owner, rec.LeaseUntil.UTC().Format(time.RFC3339Nano))
				return res, nil
			case rec.State == ledger.StateCleared:
				res.Ledger = "already cleared"
			case failedWith(rec.Reason) == outcome.ReasonUnknownOutcome && r.UnknownOutcome != StatementNotSent:
				// The record decides, not the letter's headers, which
				// whoever may publish on the dead-letter subject wrote.
				res.Ledger = "failed: " + string(outcome.ReasonUnknownOutcome)
				return refuse("the intent's ledger record failed with reason %s: its effect may have happened: check the target, and redrive it with the statement %s only if it did not",
					outcome.ReasonUnknownOutcome, StatementNotSent)
			case !r.Yes:
				res.Ledger = fmt.Sprintf("would clear %s (token %d)", what, rec.Token)
			default:
				if a.testHookRead != nil {
					a.testHookRead(lkey)
				}
				err := a.opts.Ledger.Clear(ctx, lkey, rec.Token, note)
				if (errors.Is(err, ledger.ErrNotFailed) || errors.Is(err, ledger.ErrStaleToken)) && try < 3 {
					continue // it changed since the read: decide again
				}
				if err != nil {
					return res, err
				}
				res.Ledger = fmt.Sprintf("cleared %s (token %d)", what, rec.Token)
			}
			break
		}
	}
	if !r.Yes {
		res.Outcome = OutcomeWouldRedrive
		return res, nil
	}
	if haveKey && a.testHookCleared != nil {
		a.testHookCleared(lkey)
	}

	// Republish.
	out := nats.NewMsg(subject)
	out.Header = consumer.RedriveHeaders(h)
	out.Header.Set(consumer.HeaderRedrive, fmt.Sprint(d.Seq))
	if oneShotEntry {
		out.Header.Set(consumer.HeaderKey, cmpOr(d.EffectKey, d.Key))
	}
	out.Data = data
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	at := time.Now().UTC() // before the redriven trigger can be done
	ack, err := a.js.PublishMsg(pctx, out, jetstream.WithMsgID(consumer.RedriveID(d.Stream, d.Seq, gen)))
	cancel()
	if err != nil {
		return res, fmt.Errorf("republishing to %s: %w", subject, err)
	}
	nm := &Mark{Generation: gen, At: at, By: r.By.String(), Stream: ack.Stream, Seq: ack.Sequence, Ledger: res.Ledger, Job: job}
	if outcome.Reason(d.Reason) == outcome.ReasonUnknownOutcome || strings.HasPrefix(res.Ledger, "cleared") && r.UnknownOutcome != "" {
		nm.Statement = r.UnknownOutcome
	}
	if ack.Duplicate {
		res.Detail = "the trigger stream had this redrive already (a retried redrive): kept once"
	}
	if err := writeMark(ctx, marks, d.Stream, d.Seq, nm, rev); err != nil {
		return res, err
	}
	a.index.noteMark(d.Stream, d.Seq, nm)
	res.Outcome, res.Mark = OutcomeRedriven, nm
	if a.opts.Counter != nil && !ack.Duplicate {
		a.opts.Counter.Redriven(d.Pipeline, outcome.Reason(d.Reason))
	}
	a.log.Warn("redriven", "by", r.By.String(), "pipeline", d.Pipeline, "dead_letter", fmt.Sprintf("%s:%d", d.Stream, d.Seq),
		"reason", d.Reason, "key", d.Key, "ledger", res.Ledger, "generation", gen, "statement", nm.Statement,
		"subject", subject, "trigger", fmt.Sprintf("%s:%d", ack.Stream, ack.Sequence), "duplicate", ack.Duplicate)
	return res, nil
}

// writeMark records m as the mark of a dead letter whose mark was at
// revision rev (0: none). If another redrive wrote one since, the later
// generation stands.
func writeMark(ctx context.Context, kv jetstream.KeyValue, stream string, seq uint64, m *Mark, rev uint64) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	k := markKey(stream, seq)
	for range 5 {
		if rev == 0 {
			_, err = kv.Create(ctx, k, b)
		} else {
			_, err = kv.Update(ctx, k, b, rev)
		}
		if err == nil || !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			break
		}
		cur, r, rerr := readMark(ctx, kv, stream, seq)
		if rerr != nil {
			return rerr
		}
		if cur != nil && cur.Generation >= m.Generation {
			return nil
		}
		rev = r
	}
	if err != nil {
		return fmt.Errorf("marking %s %d redriven: %w", stream, seq, err)
	}
	return nil
}
