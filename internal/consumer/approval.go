package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// A one-shot effect may wait for a person: in its delay window, where it
// can be cancelled, and for an approval. Waiting must not hold the slots
// that other work needs: an entry that waits for an approval is parked (a
// copy published under the pipeline's parked subject, the outbox entry
// acked), and a durable consumer of its own, without a limit on the
// entries pending, looks at the parked ones now and then, until each is
// approved (then sent), cancelled (then acked) or past its approval
// timeout (then dead-lettered not_approved). An approval also sends its
// parked entry back to the outbox at once, so that it does not wait for
// that look. Every one of these decisions is a fenced ledger operation on
// the dispatch record, so none can report an outcome it cannot know. An
// entry whose dispatch is settled goes only once its approval record is
// final, so that no approval claim is left pending by a request that
// stopped (settleApproval).

// parkedSubject is the subject under which pipeline's entry for the intent
// key waits for its approval.
func parkedSubject(pipeline, key string) string {
	return OutboxSubject(pipeline) + ".parked." + key
}

// parkedPoll is how often a parked entry is looked at, when no approval
// sends it back sooner.
const parkedPoll = 30 * time.Second

func (d *dispatcher) isParked(t *Trigger) bool {
	return strings.HasPrefix(t.msg.Subject(), OutboxSubject(d.p.cfg.Name)+".parked.")
}

// pastDelay reports whether t has waited out its delay window already: a
// parked entry, or one an approval sent back (both carry Oncegate-Key).
func pastDelay(t *Trigger) bool { return t.msg.Headers().Get(HeaderKey) != "" }

// approvalStage puts back the entries still in their delay window, and
// parks or keeps parked the ones waiting for an approval. An entry whose
// dispatch is settled already (sent, cancelled, given up) goes on at once,
// approved or not, to be acked or dead-lettered.
type approvalStage struct{ d *dispatcher }

func (s *approvalStage) name() string { return "approval" }

func (s *approvalStage) wrap(next Handler) Handler {
	d := s.d
	return func(ctx context.Context, ts []*Trigger) {
		p := d.p
		for _, t := range ts {
			if delay := p.cfg.Effect.Delay; delay > 0 && !pastDelay(t) && t.metadata() != nil {
				if wait := time.Until(t.metadata().Timestamp.Add(delay)); wait > 0 {
					d.count(func(s *DispatchStats) { s.Waiting++ })
					t.decide(nak(t.keyRef(), wait, nil))
					continue
				}
			}
			if p.cfg.Effect.ApprovalSubject == "" {
				continue
			}
			l := d.gate.ledger
			rec, err := l.Get(ctx, t.key)
			switch {
			case err == nil && rec.State != ledger.StatePending:
				// Settled (or cleared by a redrive): the claim stage acks
				// or dead-letters it; a settled one, once its approval
				// record is final. While it is not, the entry stays, to
				// come back and finish it: nothing else would
				// (settleApproval).
				if !settled(rec) {
					continue
				}
				if after, err := d.settleApproval(ctx, t.intent); err != nil {
					t.decide(d.gate.unavailable(t, fmt.Errorf("settling the approval record: %w", err)))
				} else if after > 0 {
					d.count(func(s *DispatchStats) { s.Waiting++ })
					t.decide(wait(t.keyRef(), after+10*time.Millisecond, errors.New("an approval of this effect is being recorded")))
				}
				continue
			case err != nil && !errors.Is(err, ledger.ErrNotFound):
				t.decide(d.gate.unavailable(t, fmt.Errorf("reading the dispatch: %w", err)))
				continue
			}
			rec, err = l.Get(ctx, ApprovalKey(t.intent))
			switch {
			case err == nil && rec.State == ledger.StateCommitted:
				continue // approved: on to the send
			case err != nil && !errors.Is(err, ledger.ErrNotFound):
				t.decide(d.gate.unavailable(t, fmt.Errorf("reading the approval: %w", err)))
			case !d.isParked(t):
				d.park(ctx, t)
			default:
				d.keepParked(ctx, t)
			}
		}
		pass(ctx, next, ts)
	}
}

// park publishes a copy of t under its parked subject and acks t. The copy's
// Nats-Msg-Id names the intent, so that a redelivered entry parked again
// is kept once.
func (d *dispatcher) park(ctx context.Context, t *Trigger) {
	key := t.intent.String()
	m := nats.NewMsg(parkedSubject(d.p.cfg.Name, key))
	for k, vs := range t.msg.Headers() {
		if !strings.EqualFold(k, nats.MsgIdHdr) {
			m.Header[k] = vs
		}
	}
	m.Header.Set(HeaderKey, key)
	m.Data = t.msg.Data()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := d.p.c.js.PublishMsg(pctx, m, jetstream.WithMsgID("parked:"+key)); err != nil {
		d.p.c.log.Warn("parking a one-shot effect for its approval failed; it comes back", "pipeline", d.p.cfg.Name, "key", key, "err", err)
		t.decide(nak(t.keyRef(), time.Second, err))
		return
	}
	d.count(func(s *DispatchStats) { s.Parked++ })
	t.decide(ack(t.keyRef(), nil))
}

// keepParked decides a parked entry not approved yet: it waits, unless its
// approval timeout has passed; then its dispatch is given up, fenced, and
// the entry dead-lettered not_approved.
func (d *dispatcher) keepParked(ctx context.Context, t *Trigger) {
	timeout := cmp.Or(d.p.cfg.Effect.ApprovalTimeout, config.DefaultApprovalTimeout)
	var parked time.Time
	if meta := t.metadata(); meta != nil {
		parked = meta.Timestamp
	}
	if left := time.Until(parked.Add(timeout)); left > 0 {
		d.count(func(s *DispatchStats) { s.Waiting++ })
		t.decide(wait(t.keyRef(), min(left+10*time.Millisecond, parkedPoll), nil))
		return
	}
	why := fmt.Sprintf("no approval on %s within %s", d.p.cfg.Effect.ApprovalSubject, timeout)
	st, err := d.stop(ctx, t.intent, string(outcome.ReasonNotApproved)+": "+why)
	switch {
	case err != nil:
		t.decide(d.gate.unavailable(t, err))
		return
	case st == sending:
		return // approved, and being sent: the claim stage decides
	case st == stopped:
		d.count(func(s *DispatchStats) { s.NotApproved++ })
	}
	// Settled: the entry goes only once its approval record is final; if
	// it cannot be made so now, the entry comes back, finds its dispatch
	// settled, and the approval stage finishes it then.
	switch after, err := d.settleApproval(ctx, t.intent); {
	case err != nil:
		t.decide(d.gate.unavailable(t, fmt.Errorf("settling the approval record: %w", err)))
		return
	case after > 0:
		t.decide(wait(t.keyRef(), after+10*time.Millisecond, errors.New("an approval of this effect is being recorded")))
		return
	}
	if st == stopped {
		t.decide(dead(t.keyRef(), outcome.ReasonNotApproved, errors.New(why)))
	}
	// Else settled otherwise meanwhile (approved and sent, cancelled, an
	// unknown outcome): the claim stage decides.
}

// stopState is what stop found.
type stopState uint8

const (
	stopped stopState = iota // the dispatch is recorded failed for the reason asked
	unknown                  // a dispatcher died mid-send: recorded unknown_outcome
	sent                     // it went out
	given                    // it was given up before; Record.Reason says why
	sending                  // a dispatcher is sending it now
)

// A stop's claim of a dispatch record: its owner's suffix, its lease, and
// how long a stop waits for another stop holding the record to finish.
const (
	stopOwner = "#stop"
	stopLease = time.Second
	stopWait  = 2 * stopLease
)

// stop records the dispatch of k's effect failed for reason, if it has not
// gone out: a fenced claim of the dispatch record, then its failure. A
// dispatch a dispatcher claimed and did not record (taken over here) may
// have gone out: it is recorded unknown_outcome instead, and stop says so.
func (d *dispatcher) stop(ctx context.Context, k dedupe.Key, reason string) (stopState, error) {
	st, _, err := d.stopRecord(ctx, k, reason)
	return st, err
}

func (d *dispatcher) stopRecord(ctx context.Context, k dedupe.Key, reason string) (stopState, ledger.Record, error) {
	l := d.gate.ledger
	dk := DispatchKey(k)
	var claim ledger.Claim
	for deadline := time.Now().Add(stopWait); ; {
		var err error
		claim, err = l.Begin(ctx, dk, ledger.BeginOptions{Owner: d.p.c.opts.Owner + stopOwner, Lease: stopLease})
		if err != nil {
			return 0, ledger.Record{}, err
		}
		// Held by another stop (a cancel sent twice — a retry after a
		// slow answer — or by two people): its outcome is this one's
		// too, and comes within its lease. Answering "sending" would be
		// wrong: nothing is being sent.
		if claim.Status != ledger.StatusHeld || !strings.HasSuffix(claim.Record.Owner, stopOwner) || !time.Now().Before(deadline) {
			break
		}
		tm := time.NewTimer(min(max(claim.RetryAfter, 10*time.Millisecond), 100*time.Millisecond))
		select {
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return 0, claim.Record, ctx.Err()
		}
	}
	switch claim.Status {
	case ledger.StatusNew:
		if err := d.fail(ctx, dk, claim.Lease.Token, reason); err != nil {
			return 0, claim.Record, err
		}
		return stopped, claim.Record, nil
	case ledger.StatusTakenOver:
		why := failureReason(outcome.ReasonUnknownOutcome, errors.New("a dispatcher claimed this effect and stopped before recording the outcome; it may or may not have been sent, and a one-shot effect is not resent"))
		if err := d.fail(ctx, dk, claim.Lease.Token, why); err != nil {
			return 0, claim.Record, err
		}
		return unknown, claim.Record, nil
	case ledger.StatusCommitted:
		return sent, claim.Record, nil
	case ledger.StatusFailed:
		return given, claim.Record, nil
	}
	return sending, claim.Record, nil
}

// fail records the dispatch dk failed, trying a few times within its
// claim's second: a claim left behind by a stop that could not record its
// failure would look, to the dispatcher that next takes it over, like a
// send of unknown outcome.
func (d *dispatcher) fail(ctx context.Context, dk dedupe.Key, token uint64, reason string) error {
	return d.retryWrite(func() error { return d.gate.ledger.Fail(ctx, dk, token, reason) })
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

// cancel answers a cancel request: the body is an intent key. The reply
// says what happened: cancelled; unknown (a dispatcher died while sending
// it: it may have gone out, and is dead-lettered unknown_outcome); already
// sent; already <reason>; sending.
func (d *dispatcher) cancel(msg *nats.Msg) {
	k, reply, err := request(msg)
	if err != nil {
		return
	}
	ctx := context.Background()
	st, rec, err := d.stopRecord(ctx, k, reasonCancelled)
	final := false
	if err == nil && st != sending {
		// Settled: the approval record is made final (settleApproval).
		after, serr := d.settleApproval(ctx, k)
		final = serr == nil && after == 0
	}
	switch {
	case err != nil:
		reply("error: " + err.Error())
	case st == stopped:
		// The parked entry is dropped only once the approval record is
		// final: else it is what comes back to make it so.
		if final {
			d.dropParked(ctx, k)
		}
		reply("cancelled")
	case st == unknown:
		reply("unknown: a dispatcher was sending it when it stopped; it may have gone out, and is dead-lettered unknown_outcome")
	case st == sent:
		reply("already sent")
	case st == given:
		reply("already " + rec.Reason)
	default:
		reply("sending")
	}
}

// approve records an approval (the body is an intent key), and sends the
// entry back from where it is parked. It answers approved only once the
// approval is recorded, and says so when the effect went out or was given
// up before.
func (d *dispatcher) approve(msg *nats.Msg) {
	k, reply, err := request(msg)
	if err != nil {
		return
	}
	ctx := context.Background()
	if rec, err := d.gate.ledger.Get(ctx, DispatchKey(k)); err == nil {
		if settled(rec) {
			// Sooner than the entry's next look, where it is still
			// about; what becomes of it, the entry sees to.
			d.settleApproval(ctx, k)
			reply(alreadyAnswer(rec))
			return
		}
	} else if !errors.Is(err, ledger.ErrNotFound) {
		reply("error: " + err.Error())
		return
	}
	if err := d.recordApproval(ctx, k); err != nil {
		var s *settledFirst
		if errors.As(err, &s) {
			reply(alreadyAnswer(s.dispatch))
			return
		}
		reply("error: " + err.Error())
		return
	}
	d.unpark(ctx, k)
	reply("approved")
}

// settled reports whether a dispatch record is settled: sent, or given up.
func settled(rec ledger.Record) bool {
	return rec.State == ledger.StateCommitted || rec.State == ledger.StateFailed
}

// alreadyAnswer is the answer to an approval of an effect whose dispatch
// record rec is settled.
func alreadyAnswer(rec ledger.Record) string {
	if rec.State == ledger.StateCommitted {
		return "already sent"
	}
	return "already " + rec.Reason
}

// settledFirst is recordApproval's error for an approval record made final
// unapproved (settleApproval) because the dispatch was settled first.
type settledFirst struct{ dispatch ledger.Record }

func (e *settledFirst) Error() string {
	return "the effect was settled first: " + alreadyAnswer(e.dispatch)
}

// Owner suffixes of the claims of an approval record: a request to
// approve, and settleApproval.
const (
	approveOwner = "#approve"
	sealOwner    = "#seal"
)

// recordApproval records the approval of k's effect: a claim of its
// approval record, committed. A claim left behind by a request that died
// before its commit is taken over once its second is out. An approval
// record made final unapproved (settleApproval: the dispatch was settled
// first) is answered with the dispatch's outcome (settledFirst); if the
// dispatch is no longer settled (a person redrove it, clearing its record),
// that record is cleared and the approval recorded. The commit is
// retried, with backoff, for approvalCommitFor (not only within the claim's
// second: a commit still holds while no other request has taken the claim
// over), so that a ledger that refuses writes for a while (a blip, a full
// disk) does not leave the claim behind: the asker may have gone (a
// replica resuming from a pause answers a request whose asker heard from
// another meanwhile), and then only the effect's outbox entry, once its
// dispatch is settled, finishes it (settleApproval).
func (d *dispatcher) recordApproval(ctx context.Context, k dedupe.Key) error {
	l := d.gate.ledger
	ak := ApprovalKey(k)
	for deadline := time.Now().Add(3 * time.Second); ; {
		claim, err := l.Begin(ctx, ak, ledger.BeginOptions{Owner: d.p.c.opts.Owner + approveOwner, Lease: time.Second})
		if err != nil {
			return err
		}
		switch claim.Status {
		case ledger.StatusNew, ledger.StatusTakenOver:
			wait := 50 * time.Millisecond
			for until := time.Now().Add(approvalCommitFor); ; {
				err = l.Commit(ctx, ak, claim.Lease.Token, ledger.Result{DownstreamID: "approved"})
				if err == nil || errors.Is(err, ledger.ErrStaleToken) || time.Now().After(until) {
					return err
				}
				time.Sleep(wait)
				wait = min(2*wait, time.Second)
			}
		case ledger.StatusHeld:
			// Another request is recording the approval: answer once it
			// is recorded, not before.
			if time.Now().After(deadline) {
				return errors.New("another approval of this effect is being recorded and has not finished; ask again")
			}
			time.Sleep(min(claim.RetryAfter, 100*time.Millisecond))
		case ledger.StatusFailed:
			if time.Now().After(deadline) {
				return errors.New("the approval record changes under this request; ask again")
			}
			dr, err := l.Get(ctx, DispatchKey(k))
			switch {
			case err == nil && settled(dr):
				return &settledFirst{dispatch: dr}
			case err != nil && !errors.Is(err, ledger.ErrNotFound):
				return err
			}
			err = l.Clear(ctx, ak, claim.Record.Token, "cleared by an approval of the effect after its dispatch was redriven")
			if err != nil && !errors.Is(err, ledger.ErrStaleToken) && !errors.Is(err, ledger.ErrNotFailed) {
				return err
			}
		default: // committed: approved before
			return nil
		}
	}
}

// approvalCommitFor bounds the retries of an approval's commit.
const approvalCommitFor = 10 * time.Second

// settleApproval makes k's approval record final once k's dispatch is
// settled, and reports how long to wait before asking again when a request
// to approve holds it now (0 when it is final).
//
// An approval is a claim of its record and its commit: a request that dies
// between the two leaves the claim pending, and a request can make its
// claim after the dispatch was settled (it read the dispatch before), or
// after another try of the same request, answered by another replica,
// satisfied the person. No request is bound to come after it to finish
// it. The outbox entry is what is bound to come back: an entry whose
// dispatch is settled goes (acked, dead-lettered, dropped by a cancel)
// only once this has made the approval record final, and comes back to
// try again if it could not. Final is: committed (approved); or, if no
// request claimed it, failed, so that a request that comes after the
// entry has gone finds it final and claims nothing (recordApproval then
// answers with the dispatch's outcome). A claim of a request that stopped
// is committed (the person asked to approve, as when a request takes it
// over); one this function left (it stopped between its claim and its
// failure) is failed. A request's claim still held makes the caller wait:
// the request finishes it, or its lease runs out.
func (d *dispatcher) settleApproval(ctx context.Context, k dedupe.Key) (time.Duration, error) {
	l := d.gate.ledger
	ak := ApprovalKey(k)
	rec, err := l.Get(ctx, ak)
	switch {
	case err == nil && settled(rec):
		return 0, nil
	case err != nil && !errors.Is(err, ledger.ErrNotFound):
		return 0, err
	}
	claim, err := l.Begin(ctx, ak, ledger.BeginOptions{Owner: d.p.c.opts.Owner + sealOwner, Lease: time.Second})
	if err != nil {
		return 0, err
	}
	switch claim.Status {
	case ledger.StatusHeld:
		return max(claim.RetryAfter, 10*time.Millisecond), nil
	case ledger.StatusNew, ledger.StatusTakenOver:
	default:
		return 0, nil // final meanwhile
	}
	token := claim.Lease.Token
	if claim.Status == ledger.StatusTakenOver && strings.HasSuffix(claim.Previous, approveOwner) {
		d.p.c.log.Info("an approval claimed and not recorded (its request stopped) is recorded", "pipeline", d.p.cfg.Name, "key", k.String(), "claimed by", claim.Previous)
		return 0, d.retryWrite(func() error { return l.Commit(ctx, ak, token, ledger.Result{DownstreamID: "approved"}) })
	}
	return 0, d.retryWrite(func() error {
		return l.Fail(ctx, ak, token, "not approved: the effect's dispatch was settled before an approval was recorded")
	})
}

// retryWrite tries a commit or failure of a claim a few times within its
// second (four tries, 50 ms to 400 ms apart); a stale token ends it.
func (d *dispatcher) retryWrite(write func() error) error {
	var err error
	for i := range 4 {
		if err = write(); err == nil || errors.Is(err, ledger.ErrStaleToken) {
			return err // stale: taken over, by a request that may stop too; look again
		}
		time.Sleep(time.Duration(50<<i) * time.Millisecond)
	}
	return err
}

// unpark sends k's parked entry, if there is one, back to the outbox to be
// sent; the parked copy is acked when it is next looked at.
func (d *dispatcher) unpark(ctx context.Context, k dedupe.Key) {
	c := d.p.c
	key := k.String()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := c.js.Stream(ctx, OutboxStream(c.cfg.Stream.Name))
	if err != nil {
		c.log.Warn("an approved effect stays parked until it is next looked at", "pipeline", d.p.cfg.Name, "key", key, "err", err)
		return
	}
	raw, err := st.GetLastMsgForSubject(ctx, parkedSubject(d.p.cfg.Name, key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return // not parked yet (it sees the approval when it comes), or gone
	}
	if err != nil {
		c.log.Warn("an approved effect stays parked until it is next looked at", "pipeline", d.p.cfg.Name, "key", key, "err", err)
		return
	}
	m := nats.NewMsg(OutboxSubject(d.p.cfg.Name))
	for h, vs := range raw.Header {
		if !strings.EqualFold(h, nats.MsgIdHdr) {
			m.Header[h] = vs
		}
	}
	m.Header.Set(HeaderKey, key)
	m.Data = raw.Data
	if _, err := c.js.PublishMsg(ctx, m, jetstream.WithMsgID("approved:"+key)); err != nil {
		c.log.Warn("an approved effect stays parked until it is next looked at", "pipeline", d.p.cfg.Name, "key", key, "err", err)
	}
}

// dropParked removes k's parked entry, if there is one, once its dispatch
// is cancelled: it settles now rather than when it is next looked at.
func (d *dispatcher) dropParked(ctx context.Context, k dedupe.Key) {
	if d.parked == nil {
		return
	}
	c := d.p.c
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// Deleted by its sequence, never purged by subject: a subject purge
	// moves the parked consumer's ack floor past every entry parked before
	// this one (nats-server's consumer purge), losing them.
	st, err := c.js.Stream(ctx, OutboxStream(c.cfg.Stream.Name))
	var raw *jetstream.RawStreamMsg
	if err == nil {
		raw, err = st.GetLastMsgForSubject(ctx, parkedSubject(d.p.cfg.Name, k.String()))
	}
	if err == nil {
		err = st.DeleteMsg(ctx, raw.Sequence)
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return // not parked (yet), or gone
	}
	if err != nil {
		c.log.Warn("a cancelled effect stays parked until it is next looked at", "pipeline", d.p.cfg.Name, "key", k.String(), "err", err)
	}
}
