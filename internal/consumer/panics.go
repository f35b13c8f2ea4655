package consumer

import (
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/oncegate/oncegate/internal/outcome"
)

// A panic in one trigger's work (its key, its prompt, the model's answer,
// its effect's body or sink) is that trigger's failure, never the
// process's: a process that died on it would get the trigger back after a
// restart, die again, and take every pipeline down with it, for ever. The
// gate recovers it in the goroutine that ran the work, logs it with its
// stack, and decides the trigger as a failed try: it is retried, and its
// last try dead-letters it with reason panic. (What cannot be recovered, a
// process run out of memory or killed, is bounded by the tries the ledger
// counts: the intent is dead-lettered exhausted after max_deliver of them.)

// guard runs f, t's work at stage; a panic in it decides t (see panicked).
func (g *gate) guard(t *Trigger, stage string, f func()) {
	defer func() {
		if r := recover(); r != nil {
			g.panicked(t, stage, r, debug.Stack())
		}
	}()
	f()
}

// each runs f on every trigger, concurrently when there are several, each
// under guard.
func (g *gate) each(ts []*Trigger, stage string, f func(t *Trigger)) {
	if len(ts) == 1 {
		g.guard(ts[0], stage, func() { f(ts[0]) })
		return
	}
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Go(func() { g.guard(t, stage, func() { f(t) }) })
	}
	wg.Wait()
}

// recoverBatch, deferred by a stage over a batch, turns a panic that no
// trigger's guard caught (in the stage's own code over the batch) into the
// verdict of every trigger of ts not yet decided, so that the stages
// around it still release or record their leases and every trigger is
// settled.
func (g *gate) recoverBatch(ts []*Trigger, stage string) {
	r := recover()
	if r == nil {
		return
	}
	stack := debug.Stack()
	for _, t := range ts {
		if !t.decided {
			g.panicked(t, stage, r, stack)
		}
	}
}

// panicked decides t after a panic in its work: a failed try, whose last
// try is dead-lettered with reason panic. A dispatcher's one-shot effect
// that panicked in its sink may have gone out: its outcome is unknown, and
// it is not sent again.
func (g *gate) panicked(t *Trigger, stage string, r any, stack []byte) {
	err := fmt.Errorf("panic in %s: %v", stage, r)
	g.c.log.Error("a trigger's work panicked; it is settled as a failed try", "pipeline", g.pipeline, "stage", stage,
		"key", keyString(t.keyRef()), "ref", t.ref(), "panic", fmt.Sprint(r), "stack", string(stack))
	g.c.obs.Panic(g.pipeline)
	if !g.pol.retryEffect && stage == stageEffect {
		g.pol.unknown()
		t.decide(dead(t.keyRef(), outcome.ReasonUnknownOutcome, fmt.Errorf("%w; the one-shot effect may or may not have been sent, and is not resent", err)))
		return
	}
	v := nak(t.keyRef(), 0, err)
	v.last = outcome.ReasonPanic
	t.decide(v)
}

// The stages a panic is reported in.
const (
	stageKey    = "key"
	stageGate   = "gate"
	stageModel  = "model step"
	stageEffect = "effect"
)
