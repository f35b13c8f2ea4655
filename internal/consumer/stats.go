package consumer

import "sync/atomic"

// Guard names what stopped a duplicate.
type Guard string

// The guards, from the cheapest to the last.
const (
	GuardWindow Guard = "window" // the in-memory window had the key
	GuardLedger Guard = "ledger" // the ledger had it committed
	GuardStream Guard = "stream" // the effect stream had the Nats-Msg-Id
)

// Reason says why a trigger went to the dead-letter subject.
type Reason string

// The reasons.
const (
	ReasonInvalidJSON     Reason = "invalid_json"     // not strict JSON (I-JSON)
	ReasonTooLarge        Reason = "too_large"        // past a size, depth or count limit
	ReasonMissingField    Reason = "missing_field"    // a key field is absent
	ReasonPoison          Reason = "poison"           // the work was given up before (ledger state failed)
	ReasonExhausted       Reason = "exhausted"        // MaxDeliver attempts used up
	ReasonPermanentEffect Reason = "permanent_effect" // the sink refused the effect for good
	ReasonBudget          Reason = "budget"           // the intent's token budget is spent
	ReasonMismatch        Reason = "mismatch"         // a key reused for a different payload, refused by policy
	ReasonTemplate        Reason = "template"         // the prompt template failed on this trigger
)

// validReason reports whether r is one of the reasons.
func validReason(r Reason) bool {
	switch r {
	case ReasonInvalidJSON, ReasonTooLarge, ReasonMissingField, ReasonPoison, ReasonExhausted,
		ReasonPermanentEffect, ReasonBudget, ReasonMismatch, ReasonTemplate, ReasonUnknownOutcome:
		return true
	}
	return false
}

// PipelineStats counts what one pipeline did. Each trigger delivery is
// counted once in Deliveries and, when it is settled, once in exactly one
// of Effects, Duplicates*, Retries, Held and DeadLetters.
type PipelineStats struct {
	Pipeline   string
	Deliveries int64 // messages received, redeliveries included

	Effects          int64 // effects performed and committed (or forwarded, for a gate)
	DuplicatesWindow int64 // acked as duplicates by the window
	DuplicatesLedger int64 // acked as duplicates by the ledger
	DuplicatesStream int64 // of Effects, those the effect stream reported as duplicates (Nats-Msg-Id)
	Held             int64 // naked because another worker held the lease
	Retries          int64 // naked after a retryable failure
	DeadLetters      int64 // sent to the dead-letter subject and termed
	TakenOver        int64 // claims that took over an expired lease
	ModelCalls       int64 // model step calls made (hits included)
	Stale            int64 // commits refused because another worker took over
}

type pipelineCounters struct {
	deliveries, effects, dupWindow, dupLedger, dupStream atomic.Int64
	held, retries, dead, takenOver, modelCalls, stale    atomic.Int64
}

func (c *pipelineCounters) snapshot(name string) PipelineStats {
	return PipelineStats{
		Pipeline: name, Deliveries: c.deliveries.Load(), Effects: c.effects.Load(),
		DuplicatesWindow: c.dupWindow.Load(), DuplicatesLedger: c.dupLedger.Load(),
		DuplicatesStream: c.dupStream.Load(), Held: c.held.Load(), Retries: c.retries.Load(),
		DeadLetters: c.dead.Load(), TakenOver: c.takenOver.Load(), ModelCalls: c.modelCalls.Load(),
		Stale: c.stale.Load(),
	}
}
