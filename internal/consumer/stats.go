package consumer

import "sync/atomic"

// PipelineStats counts what one pipeline did. Each trigger delivery is
// counted once in Deliveries and, when it is settled, once in exactly one
// of Effects, Duplicates*, Filtered, Retries, Held and DeadLetters. (An
// intent that no route matches is committed with that decision and counted
// in Effects.)
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
	// RecordAnswers counts the model step's answers (of ModelCalls) taken
	// from the intent's ledger record, paid for by an earlier delivery or
	// holder of the intent; SavedTokens is what they had cost.
	RecordAnswers, SavedTokens int64
	Stale                      int64 // commits refused because another worker took over
	Filtered                   int64 // acked because the pipeline's when: condition was false
	StepsSkipped               int64 // model steps not run because skip_when held (a resolve)
	// AfterResolve counts firings (of Effects: committed with that
	// decision) whose effects were not sent, or not all of them, because
	// the resolve of their identity had gone out first (key.status).
	AfterResolve int64
}

type pipelineCounters struct {
	deliveries, effects, dupWindow, dupLedger, dupStream atomic.Int64
	held, retries, dead, takenOver, modelCalls, stale    atomic.Int64
	filtered, skipped, afterResolve                      atomic.Int64
	recorded, savedTokens                                atomic.Int64
}

func (c *pipelineCounters) snapshot(name string) PipelineStats {
	return PipelineStats{
		Pipeline: name, Deliveries: c.deliveries.Load(), Effects: c.effects.Load(),
		DuplicatesWindow: c.dupWindow.Load(), DuplicatesLedger: c.dupLedger.Load(),
		DuplicatesStream: c.dupStream.Load(), Held: c.held.Load(), Retries: c.retries.Load(),
		DeadLetters: c.dead.Load(), TakenOver: c.takenOver.Load(), ModelCalls: c.modelCalls.Load(),
		Stale: c.stale.Load(), Filtered: c.filtered.Load(), StepsSkipped: c.skipped.Load(),
		AfterResolve: c.afterResolve.Load(), RecordAnswers: c.recorded.Load(), SavedTokens: c.savedTokens.Load(),
	}
}
