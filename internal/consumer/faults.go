package consumer

// Point names a place between two stages of the gate where a build with the
// oncegate_faults tag may crash the process (ONCEGATE_CRASH_AT=point:N kills
// it with SIGKILL the Nth time a trigger passes there). Other builds have
// no such stage at all.
type Point string

// The points, in the order a new trigger passes them.
const (
	AfterClaim  Point = "after-claim"  // the ledger claim is made; nothing else happened
	AfterAnswer Point = "after-answer" // the model answered (and the cache stored it)
	AfterRoute  Point = "after-route"  // the route decision is recorded and the effects rendered; none sent
	AfterEffect Point = "after-effect" // the sink accepted the effect; not committed
	AfterCommit Point = "after-commit" // committed in the ledger; the trigger is not acked
	BeforeAck   Point = "before-ack"   // about to ack a trigger whose work is done

	// AfterDispatchClaim is in the one-shot dispatcher: the dispatch is
	// claimed and the effect not yet sent.
	AfterDispatchClaim Point = "after-dispatch-claim"
)

// HeaderFault names the fault a trigger carries, which builds with the
// oncegate_faults tag act out at its effect: "panic" (its work panics) or
// "kill" (the process SIGKILLs itself). Other builds ignore it.
const HeaderFault = "Oncegate-Fault"

// Points lists the points of a pipeline's gate.
var Points = []Point{AfterClaim, AfterAnswer, AfterEffect, AfterCommit, BeforeAck}

// MilePoints lists the points only a pipeline with the last mile (routes,
// named or templated effects) passes.
var MilePoints = []Point{AfterRoute}

// reaches reports which triggers pass p, and whether they do on the way
// in to the stages after it (false) or on the way back out of the stages
// before it (true).
func reaches(p Point) (out bool, on func(t *Trigger) bool) {
	all := func(*Trigger) bool { return true }
	switch p {
	case AfterEffect:
		return true, func(t *Trigger) bool { return t.effected }
	case AfterCommit:
		return true, func(t *Trigger) bool { return t.committed && t.claim.Lease.Token != 0 }
	case BeforeAck:
		return true, func(t *Trigger) bool { return t.decided && t.v.kind == settleAck && t.keyed }
	}
	return false, all
}
