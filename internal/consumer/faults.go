package consumer

// Point names a place between two steps of the flow where a test may crash
// the process ([Options.Fault]).
type Point string

// The points, in the order a new trigger passes them.
const (
	AfterClaim  Point = "after-claim"  // the ledger claim is durable; nothing else happened
	AfterAnswer Point = "after-answer" // the model answered (and the cache stored it)
	AfterEffect Point = "after-effect" // the sink accepted the effect; not committed
	AfterCommit Point = "after-commit" // committed in the ledger; the trigger is not acked
	BeforeAck   Point = "before-ack"   // about to ack a trigger whose work is done

	// AfterDispatchClaim is in the one-shot dispatcher: the dispatch is
	// claimed and the effect not yet sent.
	AfterDispatchClaim Point = "after-dispatch-claim"
)

// Points lists every Point.
var Points = []Point{AfterClaim, AfterAnswer, AfterEffect, AfterCommit, BeforeAck}
