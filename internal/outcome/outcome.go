// Package outcome names how a trigger's journey through Oncegate can end
// short of its effect: the guard that stopped it as a duplicate, or the
// reason it was dead-lettered. The consumer decides them, the metrics count
// them, dead letters carry them and the admin tools select by them; they are
// declared here once, for all of those.
package outcome

// Guard names the guard that stopped a duplicate trigger.
type Guard string

// The guards, from the cheapest to the last resort.
const (
	GuardWindow Guard = "window" // the in-memory window had the key
	GuardLedger Guard = "ledger" // the ledger had it committed
	GuardStream Guard = "stream" // the effect stream had the Nats-Msg-Id (a PubAck marked duplicate)
)

// Guards lists the guards.
var Guards = []Guard{GuardWindow, GuardLedger, GuardStream}

// Reason says why a trigger went to its pipeline's dead-letter subject; it
// is the dead letter's Oncegate-Reason header.
type Reason string

// The reasons.
const (
	ReasonInvalidJSON     Reason = "invalid_json"     // not strict JSON (I-JSON)
	ReasonTooLarge        Reason = "too_large"        // past a size, depth or count limit
	ReasonMissingField    Reason = "missing_field"    // a key field is absent
	ReasonPoison          Reason = "poison"           // the model refused the input, or the work was given up before for a reason not recorded
	ReasonExhausted       Reason = "exhausted"        // max_deliver tries used up
	ReasonPermanentEffect Reason = "permanent_effect" // the sink refused the effect for good
	ReasonBudget          Reason = "budget"           // the intent's token budget is spent
	ReasonMismatch        Reason = "mismatch"         // a key reused for a different payload, refused by policy
	ReasonTemplate        Reason = "template"         // a template failed on this trigger
	ReasonUnknownOutcome  Reason = "unknown_outcome"  // a holder stopped mid-effect, and a redo could repeat it
	ReasonPanic           Reason = "panic"            // the trigger's work panicked on its last try
	ReasonBadAnswer       Reason = "bad_answer"       // the model's answers did not match the step's schema, within the intent's attempts and budget
	ReasonCondition       Reason = "condition"        // a when:, skip_when or route condition failed on this trigger (a missing member, a type mismatch, the cost limit)
	ReasonRoute           Reason = "route"            // the route recorded for the intent is no longer in the configuration
	ReasonNotApproved     Reason = "not_approved"     // a one-shot effect waited for approval past its approval_timeout
	ReasonOverBudget      Reason = "over_budget"      // the step's spend limit (dollars per period) refused its model call
)

// Reasons lists the reasons.
var Reasons = []Reason{
	ReasonInvalidJSON, ReasonTooLarge, ReasonMissingField, ReasonPoison, ReasonExhausted,
	ReasonPermanentEffect, ReasonBudget, ReasonMismatch, ReasonTemplate, ReasonUnknownOutcome,
	ReasonPanic, ReasonBadAnswer, ReasonCondition, ReasonRoute, ReasonNotApproved, ReasonOverBudget,
}

// Valid reports whether r is one of the reasons.
func (r Reason) Valid() bool {
	for _, k := range Reasons {
		if r == k {
			return true
		}
	}
	return false
}
