package main

import (
	"strings"
	"testing"
)

func TestFullAgainstCalls(t *testing.T) {
	var b strings.Builder
	fullAgainstCalls(&b, medians{rate: 5800, cpu: 308}, medians{rate: 17400, cpu: 102}, 30)
	got := b.String()
	for _, want := range []string{
		"rate 0.33× (target ≥ 0.6: not met), CPU per trigger 3.02× the call's",
		"full's 308 CPU µs per trigger: the call 102 (calls), the gate without a model step 30 (gate-ledger at 0%), the model step's own work 176",
		"about 170 µs per trigger: 38 for the model step's own work, 22% of what it costs now",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}

	b.Reset()
	fullAgainstCalls(&b, medians{rate: 12000, cpu: 150}, medians{rate: 18000, cpu: 100}, 0)
	if got := b.String(); !strings.Contains(got, "rate 0.67× (target ≥ 0.6: met)") || strings.Contains(got, "gate") {
		t.Errorf("without the gate cell:\n%s", got)
	}

	b.Reset()
	fullAgainstCalls(&b, medians{rate: 5000, cpu: 300}, medians{rate: 17000, cpu: 100}, 80)
	if got := b.String(); !strings.Contains(got, "less than the call and the gate alone, nothing for the model step") {
		t.Errorf("a gate dearer than the budget:\n%s", got)
	}
}
