package admin

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// An intent's records: its own (the trigger's work) and, for each one-shot
// effect, the record of its dispatch (whether it went out), which the
// dispatcher keeps under consumer.DispatchKey of the key the effect is sent
// under (consumer.EffectKey of the intent's). Every operation that takes a
// key takes the intent's, and looks at all of them: Record shows them and
// the intent's story, Forget clears the one that failed, and a redrive of
// a one-shot effect's dead letter clears its dispatch.

// EffectDispatch is the dispatch record of one of an intent's one-shot
// effects.
type EffectDispatch struct {
	Pipeline string `json:"pipeline"`
	// Effect is the effect's name ("" for the pipeline's single effect),
	// Sink its kind.
	Effect string `json:"effect,omitempty"`
	Sink   string `json:"sink,omitempty"`
	// Key is the key the effect is sent under (its Idempotency-Key).
	Key string `json:"key"`
	// Dispatch is its dispatch's record; nil if it was not dispatched.
	Dispatch *Record `json:"dispatch,omitempty"`
}

// Event is a step of an intent's story, from its records and the audit.
type Event struct {
	At time.Time `json:"at"`
	// What happened: one of the Event* constants.
	What string `json:"what"`
	// Effect names the effect the event is about ("" for the trigger's
	// work, or the pipeline's single effect).
	Effect string `json:"effect,omitempty"`
	By     string `json:"by,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// What an Event says happened.
const (
	EventCommitted    = "trigger committed" // the trigger's work was done and recorded
	EventFailed       = "trigger failed"    // the trigger's work failed for good
	EventInProgress   = "trigger in progress"
	EventCleared      = "failure cleared" // a failed record cleared (by whom: its detail)
	EventDispatchFail = "dispatch failed" // a one-shot effect's dispatch failed for good
	EventSent         = "sent"            // a one-shot effect went out
	EventSending      = "sending"         // a one-shot effect's dispatch is under way
	EventRedriven     = "redriven"        // a dead letter of it was redriven
	EventForgotten    = "forgotten"       // a failed record of it was forgotten
	EventApproved     = "approved"        // its one-shot effect was approved
	EventCancelled    = "cancelled"       // its one-shot effect was cancelled
	EventRefused      = "change refused"  // a redrive or forget of it was refused
	EventDeadLettered = "dead-lettered"   // a dead letter of it was kept
)

// oneShotEffects lists p's one-shot effects.
func oneShotEffects(p *config.Pipeline) []config.NamedEffect {
	var out []config.NamedEffect
	for _, e := range p.AllEffects() {
		if e.Class == config.ClassOneShot {
			out = append(out, e)
		}
	}
	return out
}

// dispatches returns the dispatch records of k's one-shot effects: those of
// pipeline p, or of every pipeline when p is nil, in which case only the
// ones that exist are listed.
func (a *Admin) dispatches(ctx context.Context, p *config.Pipeline, k dedupe.Key) ([]EffectDispatch, error) {
	var out []EffectDispatch
	pipes := []*config.Pipeline{p}
	if p == nil {
		pipes = nil
		for i := range a.cfg.Pipelines {
			pipes = append(pipes, &a.cfg.Pipelines[i])
		}
	}
	seen := map[dedupe.Key]bool{}
	for _, pp := range pipes {
		if !a.hasLedger(pp) {
			continue
		}
		for _, e := range oneShotEffects(pp) {
			ek := consumer.EffectKey(k, e.Name)
			dk := consumer.DispatchKey(ek)
			if seen[dk] {
				continue
			}
			seen[dk] = true
			rec, err := a.get(ctx, dk)
			if err != nil {
				return nil, err
			}
			if rec == nil && p == nil {
				continue
			}
			out = append(out, EffectDispatch{Pipeline: pp.Name, Effect: e.Name, Sink: effectKind(e.Effect), Key: ek.String(), Dispatch: rec})
		}
	}
	return out, nil
}

// story tells what became of intent k, oldest first: its records as they
// stand (rec, its dispatches ds) and what the audit recorded about it.
func story(rec *Record, ds []EffectDispatch, audit []AuditEntry) []Event {
	var out []Event
	changed := len(audit) > 0
	if rec != nil {
		switch rec.State {
		case "committed":
			e := Event{At: rec.Committed, What: EventCommitted}
			if len(ds) > 0 {
				e.Detail = "its one-shot effects queued in the outbox"
			} else if rec.DownstreamID != "" {
				e.Detail = "the effect's target answered " + clipBytes(rec.DownstreamID, 120)
			}
			out = append(out, e)
		case "failed":
			out = append(out, Event{At: rec.Updated, What: EventFailed, Detail: rec.Reason})
		case "pending":
			out = append(out, Event{At: rec.Updated, What: EventInProgress, Detail: "held by " + rec.Owner})
		case "cleared":
			if !changed {
				out = append(out, Event{At: rec.Updated, What: EventCleared, Detail: rec.Reason})
			}
		}
	}
	for _, d := range ds {
		r := d.Dispatch
		if r == nil {
			continue
		}
		switch r.State {
		case "committed":
			out = append(out, Event{At: r.Committed, What: EventSent, Effect: d.Effect, Detail: sentDetail(d)})
		case "failed":
			out = append(out, Event{At: r.Updated, What: EventDispatchFail, Effect: d.Effect, Detail: r.Reason})
		case "pending":
			out = append(out, Event{At: r.Updated, What: EventSending, Effect: d.Effect, Detail: "held by " + r.Owner})
		case "cleared":
			if !changed {
				out = append(out, Event{At: r.Updated, What: EventCleared, Effect: d.Effect, Detail: r.Reason})
			}
		}
	}
	for _, e := range audit {
		if l := e.Letter; l != nil && e.Action == AuditRedrive {
			what := EventFailed
			if l.OneShot {
				what = EventDispatchFail
			}
			out = append(out, Event{At: l.Time, What: what, Effect: e.Effect, Detail: l.summary()})
		}
		ev := Event{At: e.At, By: e.By, Effect: e.Effect, Detail: e.Detail}
		switch {
		case e.Outcome == OutcomeRefused:
			ev.What, ev.Detail = EventRefused, e.Action+": "+e.Detail
		case e.Action == AuditRedrive && e.Outcome == OutcomeRedriven:
			ev.What = EventRedriven
			ev.Detail = strings.TrimSpace(fmt.Sprintf("from dead letter %s %d; %s", e.Letter.Stream, e.Letter.Seq, e.Ledger))
		case e.Action == AuditRedrive:
			continue // it changed nothing: already redriven, committed, in progress
		case e.Action == AuditForget:
			ev.What = EventForgotten
			ev.Detail = e.Ledger
		case e.Action == AuditApprove:
			ev.What = EventApproved
		case e.Action == AuditCancel:
			ev.What = EventCancelled
		default:
			continue
		}
		out = append(out, ev)
	}
	slices.SortStableFunc(out, func(x, y Event) int { return x.At.Compare(y.At) })
	return out
}

func sentDetail(d EffectDispatch) string {
	name := cmp.Or(d.Effect, "the effect")
	if d.Sink != "" {
		name += " (" + d.Sink + ")"
	}
	if r := d.Dispatch; r != nil && r.DownstreamID != "" {
		return name + ": " + clipBytes(r.DownstreamID, 120)
	}
	return name
}

// failedRecord is a failed (or cleared) record among an intent's: its own
// or one of its effects' dispatches.
type failedRecord struct {
	key      dedupe.Key
	rec      ledger.Record
	effect   string // "" for the intent's own record
	dispatch bool
}

// describe names the record for people.
func (f failedRecord) describe(k dedupe.Key) string {
	if !f.dispatch {
		return fmt.Sprintf("the record of %v", k)
	}
	if f.effect == "" {
		return fmt.Sprintf("the dispatch of the one-shot effect of %v", k)
	}
	return fmt.Sprintf("the dispatch of effect %s of %v", f.effect, k)
}
