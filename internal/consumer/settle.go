package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// This file is the only one in the package that acks, naks, terms or marks
// a message in progress (TestSettleIsTheOnlyAcker checks it).

// settler carries out verdicts for one source of messages: a pipeline's
// triggers, or its dispatcher's outbox entries.
type settler struct {
	c          *Consumer
	pipeline   string
	deadLetter string
	// maxDeliver is the most deliveries a message gets; 0 means no limit
	// (the outbox, whose entries wait for approvals).
	maxDeliver int
	retryDelay func(n int) time.Duration
	ledger     ledger.Ledger // nil without one
	counts     counts        // the retries and dead letters are counted here
	// effectOf names t's effect in the outcome lines (log.outcomes) of a
	// pipeline without the last mile's; nil: none.
	effectOf func(t *Trigger) string
}

// settle acks, naks or dead-letters t as its verdict says. A nak of a
// trigger on its last delivery becomes a dead letter: the server would
// not deliver it again.
func (s *settler) settle(ctx context.Context, t *Trigger) {
	v := t.v
	m := t.msg
	var deliveries uint64
	if v.kind != settleAck { // the common case skips parsing the metadata
		deliveries = t.deliveries()
	}
	if v.kind == settleNak && s.exhausted(v, deliveries) {
		v = s.lastTry(ctx, v, deliveries)
	}
	if s.c.log.Enabled(ctx, slog.LevelDebug) {
		s.c.log.Debug("settled", "pipeline", s.pipeline, "verdict", v.kind.String(), "key", keyString(v.key), "ref", t.ref(), "deliveries", t.deliveries(), "delay", v.delay, "err", v.err)
	}
	switch v.kind {
	case settleAck:
		if to := m.Headers().Get(HeaderReply); to != "" && v.reply != nil {
			s.reply(to, v.reply)
		}
		if err := m.Ack(); err != nil {
			s.c.log.Warn("ack failed; the trigger comes back and the ledger answers it", "pipeline", s.pipeline, "err", err)
		}
		s.c.obs.Settled(s.pipeline, "ack")
		if s.c.cfg.Log.Outcomes {
			s.logOutcome(t, v)
		}
	case settleNak:
		d := v.delay
		if d <= 0 {
			// A plain NAK is redelivered at once; the server's BackOff
			// only paces ack timeouts. So the delay is set here, from the
			// same schedule, or a failed effect's own.
			if v.schedule != nil {
				d = v.schedule(max(int(v.attempts), 1))
			} else {
				d = s.retryDelay(int(deliveries))
			}
			s.counts.retried()
			s.c.log.Info("retrying later", "pipeline", s.pipeline, "key", keyString(v.key), "ref", t.ref(), "deliveries", deliveries, "in", d, "err", v.err)
		}
		_ = m.NakWithDelay(d)
		s.c.obs.Settled(s.pipeline, "nak")
	case settleDead:
		if err := s.publishDead(ctx, t, v); err != nil {
			// Keep the trigger rather than lose it: it comes back.
			s.c.log.Error("dead letter not published; the message will be redelivered", "pipeline", s.pipeline, "err", err)
			_ = m.NakWithDelay(time.Second)
			s.c.obs.Settled(s.pipeline, "nak")
			return
		}
		s.counts.dead()
		s.c.obs.DeadLetter(s.pipeline, v.reason)
		s.c.log.Warn("dead-lettered", "pipeline", s.pipeline, "reason", v.reason, "subject", s.deadLetter, "err", v.err)
		_ = m.TermWithReason(string(v.reason))
		s.c.obs.Settled(s.pipeline, "term")
		if s.c.cfg.Log.Outcomes {
			s.logOutcome(t, v)
		}
	}
}

// logOutcome writes the INFO line of t's outcome (log.outcomes): its
// pipeline, key, route, effects and result.
func (s *settler) logOutcome(t *Trigger, v verdict) {
	var route string
	var effects []string
	switch {
	case t.lm != nil:
		route = t.lm.route
		for _, o := range t.lm.out {
			effects = append(effects, cmp.Or(o.t.name, o.t.kind))
		}
	case s.effectOf != nil:
		effects = append(effects, s.effectOf(t))
	}
	result := "no effect" // a duplicate, filtered, or no route
	switch {
	case v.kind == settleDead:
		result = "dead: " + string(v.reason)
	case t.effected && t.res.Duplicate:
		result = "done (the target had it)"
	case t.effected:
		result = "done"
	}
	key := keyString(v.key)
	if in := t.msg.Headers().Get(HeaderIntent); in != "" {
		key = in // a named one-shot effect's dispatch: the intent's key
	}
	s.c.log.Info("outcome", "pipeline", s.pipeline, "key", key, "route", route, "effect", strings.Join(effects, ","), "result", result)
}

// lastTry turns v, a nak on the last try, into the dead letter, once the
// work is recorded failed in the ledger (where it was claimed): a failed
// record is what stops a later duplicate from taking the work over and
// doing it after the dead letter. If another worker took the work over
// meanwhile, it answers for the intent, and this message waits to see it
// settled; if the ledger does not answer, the message waits too, and is
// not a try.
func (s *settler) lastTry(ctx context.Context, v verdict, deliveries uint64) verdict {
	err := fmt.Errorf("gave up after %d deliveries: %w", deliveries, errOr(v.err))
	last := cmp.Or(v.last, outcome.ReasonExhausted)
	if v.token == 0 || v.key == nil || s.ledger == nil {
		return dead(v.key, last, err)
	}
	ferr := s.ledger.Fail(ctx, *v.key, v.token, failureReason(last, err))
	switch {
	case errors.Is(ferr, ledger.ErrStaleToken):
		s.c.log.Info("the last try's work was taken over by another worker; it answers for the intent", "pipeline", s.pipeline, "key", v.key.String(), "err", v.err)
		return wait(v.key, s.retryDelay(int(deliveries)), fmt.Errorf("another worker took the work over: %w", errOr(v.err)))
	case ferr != nil:
		d := s.c.health.failed(ferr)
		s.c.obs.LedgerUnavailable(s.pipeline)
		s.c.log.Warn("the ledger does not answer; the last try waits to be recorded failed", "pipeline", s.pipeline, "key", v.key.String(), "in", d, "err", ferr)
		return wait(v.key, d, fmt.Errorf("recording the failure in the ledger: %w", ferr))
	}
	return dead(v.key, last, err)
}

// exhausted reports whether a nak is the last try, to be dead-lettered
// instead. Where work is claimed in the ledger, the tries are the intent's
// claims (whichever message made them); a message that only waits on work
// another holds is never exhausted. Without a ledger, the tries are the
// message's deliveries.
func (s *settler) exhausted(v verdict, deliveries uint64) bool {
	switch {
	case s.maxDeliver <= 0 || v.waits:
		return false
	case v.token != 0:
		return v.attempts >= uint32(s.maxDeliver)
	}
	return deliveries >= uint64(s.maxDeliver)
}

// reply publishes a trigger's stored result to the subject its
// Oncegate-Reply header names, if the configuration allows that subject
// (stream.reply_prefixes): a trigger must not make Oncegate publish into an
// effect, outbox or KV subject, or call the JetStream API.
func (s *settler) reply(to string, result []byte) {
	if !s.c.cfg.Stream.ReplyAllowed(to) {
		s.c.obs.ReplyRefused(s.pipeline)
		s.c.log.Warn("reply refused: the subject is not under stream.reply_prefixes", "pipeline", s.pipeline, "subject", to, "allowed", s.c.cfg.Stream.ReplyPrefixes)
		return
	}
	if err := s.c.nc.Publish(to, result); err != nil {
		s.c.log.Warn("reply failed", "pipeline", s.pipeline, "subject", to, "err", err)
	}
}

func keyString(k *dedupe.Key) string {
	if k == nil {
		return ""
	}
	return k.String()
}

// inProgress tells JetStream that work on m goes on, resetting its ack
// deadline.
func (s *settler) inProgress(m jetstream.Msg) {
	if m.InProgress() == nil {
		s.c.obs.Settled(s.pipeline, "in_progress")
	}
}

// ackEarly acks m before its work is done: the deliberate bug of the
// oncegate_faults build (ONCEGATE_BROKEN=ack-early), which the soak's
// checker must catch. Nothing else calls it.
func ackEarly(m jetstream.Msg) { _ = m.Ack() }

func errOr(err error) error {
	if err == nil {
		return errors.New("no success")
	}
	return err
}

// publishDead publishes t to the dead-letter subject, with the reason. A
// dead letter is a faithful copy of what arrived: the trigger's payload (up
// to maxDeadLetterBody) and all its headers (deadLetterCopy), so that
// replaying it derives the same key. Its Nats-Msg-Id names the pipeline and the message's stream and sequence, so
// that a dead letter published twice (the process died before the term) is
// kept once, and dead letters of two streams, or of two pipelines sharing a
// trigger, never collide.
func (s *settler) publishDead(ctx context.Context, t *Trigger, v verdict) error {
	m := t.msg
	out := nats.NewMsg(s.deadLetter)
	deadLetterCopy(out.Header, m.Headers())
	out.Header.Set(HeaderReason, string(v.reason))
	if v.err != nil {
		d := v.err.Error()
		if len(d) > 1024 {
			d = d[:1024]
		}
		out.Header.Set(HeaderDetail, d)
	}
	out.Header.Set(HeaderPipeline, s.pipeline)
	out.Header.Set(HeaderSubject, m.Subject())
	var opts []jetstream.PublishOpt
	if meta := t.metadata(); meta != nil {
		out.Header.Set(HeaderStream, meta.Stream)
		out.Header.Set(HeaderStreamSeq, strconv.FormatUint(meta.Sequence.Stream, 10))
		out.Header.Set(HeaderDeliveries, strconv.FormatUint(meta.NumDelivered, 10))
		opts = append(opts, jetstream.WithMsgID(DeadLetterID(s.pipeline, meta.Stream, meta.Sequence.Stream)))
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
	_, err := s.c.js.PublishMsg(ctx, out, opts...)
	return err
}

// deadLetterCopy copies a trigger's headers onto its dead letter: all but
// the ones the dead letter sets itself and the server's Nats-* headers,
// which would act on the dead letter's publish (Nats-Expected-Stream,
// Nats-TTL, ...); the trigger's Nats-Msg-Id is kept as Oncegate-Msg-Id.
func deadLetterCopy(dst, src nats.Header) {
	for k, vs := range src {
		switch {
		case strings.EqualFold(k, nats.MsgIdHdr):
			dst.Set(HeaderMsgID, vs[0])
		case len(k) >= 5 && strings.EqualFold(k[:5], "Nats-"):
		case slices.ContainsFunc(deadLetterHeaders, func(h string) bool { return strings.EqualFold(h, k) }):
		default:
			dst[k] = append([]string(nil), vs...)
		}
	}
}

// DeadLetterID is the Nats-Msg-Id of pipeline's dead letter of the message
// at sequence seq of stream. Pipeline names hold no ':'.
func DeadLetterID(pipeline, stream string, seq uint64) string {
	return "dead:" + pipeline + ":" + stream + ":" + strconv.FormatUint(seq, 10)
}
