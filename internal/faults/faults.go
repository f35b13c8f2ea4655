// Package faults holds every crash and fault switch of Oncegate, for the
// crash tests and the soak. Only builds with the oncegate_faults build tag
// read the switches; in other builds [Enabled] is false, every function
// here does nothing (the compiler drops the calls), and [Env] is empty, so
// that a switch set on a production binary is refused by the configuration
// as any unknown ONCEGATE_* variable is.
//
// The switches an oncegate_faults build reads:
//
//	ONCEGATE_CRASH_AT=point:N          SIGKILL the Nth time a trigger passes point (N defaults to 1): see [Point]
//	ONCEGATE_BROKEN=ack-early          ack each trigger right after its claim, before the effect (a deliberate bug)
//	ONCEGATE_BROKEN=commit-skips-token every ledger store commits without checking the fencing token (a deliberate bug)
//	ONCEGATE_CLOCK_JUMP=d              the ledger's clock jumps ahead by d on every SIGUSR1
//	ONCEGATE_FAULTS_LEDGER_HISTORY=path append every ledger operation's invocation and response to path (package history)
//	ONCEGATE_FAULTS_LEDGER_OUTAGE=d    on each SIGUSR2, refuse every ledger write for d (a ledger blip)
//
// and a trigger can carry a poison in its [HeaderFault] header:
//
//	Oncegate-Fault: panic              its work panics when it reaches the effect
//	Oncegate-Fault: kill               the process SIGKILLs itself when the trigger's work reaches the effect
//
// The deliberate bugs let the soak show that its checkers notice lost work
// and a ledger history that is not linearizable.
package faults

// Point names a place between two stages of the consumer's gate where a
// build with the oncegate_faults tag may crash the process
// (ONCEGATE_CRASH_AT=point:N kills it with SIGKILL the Nth time a trigger
// passes there). Other builds have no such stage at all.
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

// Points lists the points of a pipeline's gate.
var Points = []Point{AfterClaim, AfterAnswer, AfterEffect, AfterCommit, BeforeAck}

// MilePoints lists the points only a pipeline with the last mile (routes,
// named or templated effects) passes.
var MilePoints = []Point{AfterRoute}

// HeaderFault names the fault a trigger carries, which builds with the
// oncegate_faults tag act out at its effect: "panic" (its work panics) or
// "kill" (the process SIGKILLs itself). Other builds ignore it.
const HeaderFault = "Oncegate-Fault"
