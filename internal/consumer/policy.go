package consumer

// policy says what the gate's outcomes mean for the effect it guards, and
// counts them. The same stages run a pipeline's effect (replayable, or its
// keyed publish to the outbox) and a dispatcher's one-shot send; where the
// two part, the stages ask the policy, never which of the two they run.
type policy struct {
	// counts keeps the gate's figures: a pipeline's or a dispatcher's.
	counts

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
	// forwardDigest: a trigger's digest group (sink.DigestHeader) goes on
	// to the sink, which gathers its group: an outbox entry of a digest.
	forwardDigest bool
}

// replayablePolicy is the policy of pipeline p.
func replayablePolicy(p *pipeline) policy {
	return policy{
		counts:     &pipelineCounts{c: p.c, pipeline: p.cfg.Name, n: &p.n},
		duplicates: true, redoTakenOver: true, retryEffect: true, waitLocal: true,
	}
}

// oneShotPolicy is the dispatcher d's.
func oneShotPolicy(d *dispatcher) policy {
	return policy{
		counts:    dispatchCounts{d},
		ackFailed: reasonCancelled, forwardDigest: true,
	}
}
