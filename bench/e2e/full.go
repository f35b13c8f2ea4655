package main

import (
	"fmt"
	"io"
)

// targetFull is the bar for full: its rate at least this share of
// the calls cell's.
const targetFull = 0.6

// medians is a cell's medians: triggers (or calls) per second and CPU µs
// per trigger.
type medians struct{ rate, cpu float64 }

// fullAgainstCalls prints full against calls and where full's CPU per
// trigger goes: the call, the gate without a model step (gateCPU, the
// gate-ledger cell's at 0% duplicates; 0 when it did not run, or ran
// without the fsyncs full makes) and the model step's own work, the rest.
// Both cells keep the two cores busy, so a rate is about the cores' time
// over the CPU per trigger: full at targetFull × the calls' rate has about
// calls.cpu / targetFull µs per trigger in all.
func fullAgainstCalls(w io.Writer, full, calls medians, gateCPU float64) {
	x := full.rate / calls.rate
	verdict := "met"
	if x < targetFull {
		verdict = "not met"
	}
	fmt.Fprintf(w, "full against calls (the same model calls from a plain go-openai loop): rate %.2f× (target ≥ %.1f: %s), CPU per trigger %.2f× the call's\n",
		x, targetFull, verdict, full.cpu/calls.cpu)
	if gateCPU <= 0 {
		return
	}
	own := full.cpu - calls.cpu - gateCPU
	budget := calls.cpu/targetFull - calls.cpu - gateCPU
	fmt.Fprintf(w, "full's %.0f CPU µs per trigger: the call %.0f (calls), the gate without a model step %.0f (gate-ledger at 0%%), the model step's own work %.0f (prompt, cache key, lookup, store and single flight, the rest)\n",
		full.cpu, calls.cpu, gateCPU, own)
	if budget <= 0 {
		fmt.Fprintf(w, "at %.1f× the calls' rate full would have about %.0f µs per trigger: less than the call and the gate alone, nothing for the model step\n",
			targetFull, calls.cpu/targetFull)
		return
	}
	fmt.Fprintf(w, "at %.1f× the calls' rate full would have about %.0f µs per trigger: %.0f for the model step's own work, %.0f%% of what it costs now\n",
		targetFull, calls.cpu/targetFull, budget, 100*budget/max(own, 1))
}
