package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// An alert's lifecycle. With key.status, a firing and its resolve share an
// identity (the key the other fields give: an alert's fingerprint and
// startsAt), and the ledger orders them: a firing never reaches a target
// after its own resolve, and a resolve goes where its firing went.
//
//   - A resolve, before it is claimed (the order stage), reads its
//     firing's record. While the firing is at work (pending: its effects
//     failing and retried, its model step running) or not seen yet (it may
//     come after the resolve: a redelivery reorders them), the resolve
//     waits, up to key.resolve_wait after it reached the stream. Then it records
//     that it goes (resolvingKey, committed once and for good), and reads
//     the firing's record again: a firing that holds a live lease now may
//     be sending, and the resolve waits for that holder to finish.
//   - A firing, before each of its effects, reads that record: once its
//     resolve goes, it sends nothing more, and it is committed with that
//     decision and counted (PipelineStats.AfterResolve).
//
// The firing claims its record (a write) before it reads the resolve's;
// the resolve writes its record before it reads the firing's. Whichever
// reads second sees the other: either the firing sees the resolve going
// and stops, or the resolve sees the firing's live lease and waits for it
// to finish. The claims of an ordered pipeline are durable (never
// volatile), so that another process reads them.
//
// A resolve takes its firing's route, read from the firing's recorded
// route decision, rather than choosing one: it resolves the page, or
// posts its note, where the firing went, and a resolve whose firing left
// no route (it never fired here, or was filtered, or no route held) sends
// nothing.
//
// A one-shot effect is sent later by the dispatcher, so the dispatcher
// orders the two again, by the outbox entries' Oncegate-Identity and
// Oncegate-Status headers: a firing's entry is not sent once its resolve
// goes, and a resolve's entry waits while its firing's dispatch holds a
// live lease, and is not sent when the firing's message never was.

// ResolvedStatus is the status that ends an identity's lifecycle.
const ResolvedStatus = "resolved"

// Headers of an ordered pipeline's outbox entries.
const (
	HeaderIdentity = "Oncegate-Identity" // the intent's identity
	HeaderStatus   = "Oncegate-Status"   // the intent's status
)

// DefaultResolveWait is key.resolve_wait's default.
const DefaultResolveWait = config.DefaultResolveWait

// resolvingKey is the ledger key recording that the resolve of identity
// goes out: from then on, its firing sends nothing.
func resolvingKey(identity dedupe.Key) dedupe.Key {
	return deriveKey("oncegate/resolving", identity, "")
}

// droppedResult is what a firing (or a one-shot entry) dropped for its
// resolve commits: the effect was not sent, for good.
var droppedResult = []byte(`{"dropped":"its resolve went out first"}`)

// droppedMaybeSentResult is what a firing dropped for its resolve commits
// when some of it may have gone out before: an earlier holder's try that
// stopped without a word (the claim was taken over, not released), or an
// effect of its route this try sent before the resolve was recorded. What
// is left is not sent; what went out is not known, so the record does not
// say "not sent" (a resolve's entry sends behind it: see
// entryOrderStage).
var droppedMaybeSentResult = []byte(`{"dropped":"its resolve went out first","sent":"unknown: an earlier try may have sent some of it"}`)

// dropped marks t, a firing, dropped for its resolve: see droppedResult.
func (g *gate) dropped(t *Trigger) {
	body := droppedResult
	if t.sent || t.claim.Status == ledger.StatusTakenOver && !t.claim.Released {
		body = droppedMaybeSentResult
	}
	t.res, t.effected, t.dropped = sink.Result{Body: body}, true, true
}

// ordered reports whether the gate orders the lifecycle of identities.
func (g *gate) ordered() bool { return g.mile != nil && g.mile.ordered && g.ledger != nil }

// closing reports whether t is a resolve of an ordered pipeline.
func (g *gate) closing(t *Trigger) bool {
	return g.ordered() && t.lm != nil && t.lm.status == ResolvedStatus
}

// opening reports whether t is a firing of an ordered pipeline (a trigger
// with a status other than resolved: OpenStatus, or none).
func (g *gate) opening(t *Trigger) bool {
	return g.ordered() && t.lm != nil && t.lm.status != ResolvedStatus
}

// live reports whether a record's lease may still be held: its holder may
// be sending.
func (g *gate) live(rec ledger.Record) bool {
	return rec.State == ledger.StatePending && time.Now().Before(rec.LeaseUntil.Add(g.c.cfg.Ledger.MaxClockSkew))
}

// orderStage holds back the resolves whose firing is at work, and records
// that the others go.
type orderStage struct {
	g *gate
	// resolveWait is how long a resolve waits for its firing's outcome.
	resolveWait time.Duration
}

func (s *orderStage) name() string { return "order" }

func (s *orderStage) wrap(next Handler) Handler {
	g := s.g
	return func(ctx context.Context, ts []*Trigger) {
		g.each(ts, stageRoute, func(t *Trigger) {
			if t.decided || !g.closing(t) {
				return
			}
			identity := t.lm.identity
			rec, err := g.ledger.Get(ctx, identity)
			switch {
			case err != nil && !errors.Is(err, ledger.ErrNotFound):
				t.decide(g.unavailable(t, fmt.Errorf("reading the firing's record: %w", err)))
				return
			case err != nil || rec.State == ledger.StatePending:
				// Its firing is at work, or not seen yet (it may be
				// behind the resolve, redelivered out of order).
				if left := s.resolveWait - g.age(t); left > 0 {
					g.c.log.Debug("the resolve waits for its firing", "pipeline", g.pipeline, "identity", identity.String(), "left", left)
					t.decide(wait(t.keyRef(), min(left, g.set.retryDelay(int(t.deliveries()))), errors.New("its firing is at work, or not seen yet")))
					return
				}
			}
			if err := g.recordOnce(ctx, resolvingKey(identity), "#resolving", []byte(`{}`)); err != nil {
				if h, ok := errors.AsType[*heldError](err); ok {
					t.decide(wait(t.keyRef(), h.retryAfter, fmt.Errorf("recording that the resolve goes: %w", err)))
				} else {
					t.decide(g.unavailable(t, fmt.Errorf("recording that the resolve goes: %w", err)))
				}
				return
			}
			// A firing that read no such record before this one was
			// written holds its lease now: wait for it to finish.
			rec, err = g.ledger.Get(ctx, identity)
			switch {
			case errors.Is(err, ledger.ErrNotFound):
			case err != nil:
				t.decide(g.unavailable(t, fmt.Errorf("reading the firing's record: %w", err)))
			case g.live(rec):
				// Looked at again soon: the holder is likely sending now,
				// and done in moments.
				t.decide(wait(t.keyRef(), g.lookAgain(t, rec), errors.New("its firing may be sending")))
			}
		})
		pass(ctx, next, ts)
	}
}

// lookAgain is how long t waits before it looks again at a record whose
// lease is live: on the retry schedule, at most a second, and no longer
// than the lease.
func (g *gate) lookAgain(t *Trigger, rec ledger.Record) time.Duration {
	return max(min(time.Until(rec.LeaseUntil), g.set.retryDelay(int(t.deliveries())), time.Second), 10*time.Millisecond)
}

// age is how long ago t reached the stream.
func (g *gate) age(t *Trigger) time.Duration {
	if m := t.metadata(); m != nil && !m.Timestamp.IsZero() {
		return time.Since(m.Timestamp)
	}
	return 0
}

// heldError is recordOnce's answer when another claim holds the record:
// look again after retryAfter, when it is committed or can be taken over.
type heldError struct{ retryAfter time.Duration }

func (e *heldError) Error() string {
	return fmt.Sprintf("another claim holds the record for %v more", e.retryAfter.Round(time.Millisecond))
}

// recordOnce records key as committed with response, unless it is
// recorded already. A record another claim holds — another resolve of the
// identity recording it now, or one whose commit was lost (a ledger
// outage, a crash between the two writes) — is a *heldError: the caller
// looks again, and takes the claim over once its lease is out, so that no
// claim is left pending.
func (g *gate) recordOnce(ctx context.Context, key dedupe.Key, owner string, response []byte) error {
	for range 3 {
		claim, err := g.ledger.Begin(ctx, key, ledger.BeginOptions{Owner: g.owner + owner, Lease: g.lease})
		if err != nil {
			return err
		}
		switch claim.Status {
		case ledger.StatusCommitted:
			return nil
		case ledger.StatusNew, ledger.StatusTakenOver:
			err := g.ledger.Commit(ctx, key, claim.Lease.Token, ledger.Result{Response: response})
			if err == nil || !errors.Is(err, ledger.ErrStaleToken) {
				return err
			}
		case ledger.StatusHeld:
			return &heldError{retryAfter: max(claim.RetryAfter, 10*time.Millisecond)}
		default:
			return fmt.Errorf("the record is %s", claim.Status)
		}
	}
	return errors.New("the record keeps being taken over")
}

// resolvedFirst reports whether t, a firing, must send nothing more: its
// resolve goes out. It decides t on a ledger error, and then reports true.
func (g *gate) resolvedFirst(ctx context.Context, t *Trigger) bool {
	if !g.opening(t) {
		return false
	}
	_, err := g.ledger.Get(ctx, resolvingKey(t.lm.identity))
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return false
	case err != nil:
		t.decide(g.unavailable(t, fmt.Errorf("reading whether the resolve went out: %w", err)))
		return true
	}
	g.c.log.Info("a firing not sent: its resolve went out first", "pipeline", g.pipeline, "identity", t.lm.identity.String(), "key", t.intent.String())
	g.pol.afterResolve()
	g.dropped(t)
	return true
}

// firingRoute is the route a resolve takes: its firing's recorded route,
// or none.
func (g *gate) firingRoute(ctx context.Context, t *Trigger) (string, error) {
	rec, err := g.ledger.Get(ctx, routeKey(t.lm.identity))
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return "", nil
	case err != nil:
		return "", err
	case rec.State != ledger.StateCommitted:
		return "", nil
	}
	var r routeRecord
	if err := json.Unmarshal(rec.Result.Response, &r); err != nil {
		return "", fmt.Errorf("the firing's recorded route decision does not decode: %w", err)
	}
	return r.Route, nil
}

// entryOrderStage orders an ordered pipeline's one-shot entries, once
// their dispatch is claimed: a firing's entry is dropped once its resolve
// goes; a resolve's entry waits while its firing's dispatch holds a live
// lease, and is dropped when the firing's message was not sent and will
// not be.
type entryOrderStage struct{ g *gate }

func (s *entryOrderStage) name() string { return "order-entries" }

func (s *entryOrderStage) wrap(next Handler) Handler {
	g := s.g
	return func(ctx context.Context, ts []*Trigger) {
		g.each(ts, stageEffect, func(t *Trigger) {
			h := t.msg.Headers()
			if t.decided || h.Get(HeaderIdentity) == "" {
				return
			}
			identity, err := dedupe.ParseKey(h.Get(HeaderIdentity))
			if err != nil {
				return // not ours to order: sent as any entry
			}
			if h.Get(HeaderStatus) != ResolvedStatus {
				_, err := g.ledger.Get(ctx, resolvingKey(identity))
				switch {
				case errors.Is(err, ledger.ErrNotFound):
				case err != nil:
					t.decide(nak(t.keyRef(), time.Second, fmt.Errorf("reading whether the resolve went out: %w", err)))
				default:
					g.c.log.Info("a firing's one-shot effect not sent: its resolve went out first", "pipeline", g.pipeline, "identity", identity.String(), "key", t.intent.String())
					g.pol.afterResolve()
					g.dropped(t)
				}
				return
			}
			drop := false
			rec, err := g.ledger.Get(ctx, DispatchKey(EffectKey(identity, h.Get(HeaderEffect))))
			switch {
			case errors.Is(err, ledger.ErrNotFound):
				// The firing's entry was not dispatched: it never was
				// published (the firing was dropped before it), or it
				// will be dropped when it is, its resolve having gone. A
				// resolve whose alert never fired here is sent.
				_, ferr := g.ledger.Get(ctx, identity)
				switch {
				case ferr == nil:
					drop = true
				case !errors.Is(ferr, ledger.ErrNotFound):
					err = ferr
				}
			case err != nil:
			case g.live(rec):
				t.decide(nak(t.keyRef(), g.lookAgain(t, rec), errors.New("its firing's message may be being sent")))
				return
			case rec.State == ledger.StateCommitted && rec.Result.DownstreamID == string(droppedResult):
				drop = true
			}
			if err != nil && !errors.Is(err, ledger.ErrNotFound) {
				t.decide(nak(t.keyRef(), time.Second, fmt.Errorf("reading the firing's dispatch: %w", err)))
				return
			}
			if drop {
				g.c.log.Info("a resolve's one-shot effect not sent: its firing's was not", "pipeline", g.pipeline, "identity", identity.String(), "key", t.intent.String())
				g.pol.unopened()
				t.res, t.effected, t.dropped = sink.Result{Body: droppedResult}, true, true
			}
		})
		// A dropped entry goes no further: the claim stage commits its
		// dispatch as dropped, and the effect stage must not send it.
		var rest []*Trigger
		for _, t := range open(ts) {
			if !t.dropped {
				rest = append(rest, t)
			}
		}
		if len(rest) > 0 {
			next(ctx, rest)
		}
	}
}
