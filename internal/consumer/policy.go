package consumer

import "github.com/oncegate/oncegate/internal/faults"

// policy says what the gate's outcomes mean for the effect it guards. The
// same stages run a pipeline's effect (replayable, or its keyed publish to
// the outbox) and a dispatcher's one-shot send; where the two part, the
// stages ask the policy, never which of the two they run.
type policy struct {
	// duplicates: a trigger that finds its intent committed is a duplicate,
	// counted and answered with the stored result. For a dispatcher it is
	// a redelivery of the entry it sent, acked and nothing else.
	duplicates bool
	// redoTakenOver: work taken over from a holder that stopped may be
	// done again, while the target still drops a repeat of the key. A
	// one-shot send taken over may or may not have gone out, and cannot be
	// asked: its outcome is unknown, and it is never sent again.
	redoTakenOver bool
	// retryEffect: an effect that failed, and was not refused for good, is
	// tried again. A one-shot send that failed may have acted all the same
	// (a timeout after the message went out): its outcome is unknown.
	retryEffect bool
	// ackFailed is the reason of a failed record whose triggers are acked,
	// not dead-lettered: a dispatch cancelled before it went out.
	ackFailed string
	// waitLocal: a duplicate of work this process holds waits for it in
	// the process rather than coming back later.
	waitLocal bool
	// afterClaim is the crash point right after the claim.
	afterClaim faults.Point
	// count receives the dispatcher's counts; nil for a pipeline.
	count func(func(*DispatchStats))
}

// replayablePolicy is a pipeline's.
var replayablePolicy = policy{duplicates: true, redoTakenOver: true, retryEffect: true, waitLocal: true, afterClaim: faults.AfterClaim}

// oneShotPolicy is the dispatcher d's.
func oneShotPolicy(d *dispatcher) policy {
	return policy{ackFailed: reasonCancelled, afterClaim: faults.AfterDispatchClaim, count: d.count}
}

// counted adds to the dispatcher's counts, if the policy keeps them.
func (p *policy) counted(f func(*DispatchStats)) {
	if p.count != nil {
		p.count(f)
	}
}
