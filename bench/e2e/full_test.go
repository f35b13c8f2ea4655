package main

import (
	"strings"
	"testing"
	"time"
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

// TestVerdictDigits: a ratio just under its target is printed with the
// digit that shows it under, not rounded up to the target.
func TestVerdictDigits(t *testing.T) {
	cell := func(mode string, rep int, took time.Duration) result {
		return result{mode: mode, rep: rep, n: 1000, unique: 1000, took: took, cpu: time.Second, effects: 1000, expected: 1000}
	}
	for _, c := range []struct {
		took time.Duration // the gate-ledger cell's, against raw cells of 1 s
		want string
	}{
		{time.Second * 1000 / 697, "ledger unique 0.697 (≥0.70) MISS"},
		{time.Second * 1000 / 650, "ledger unique 0.65 (≥0.70) MISS"},
		{time.Second * 1000 / 720, "ledger unique 0.72 (≥0.70) ok"},
	} {
		var b strings.Builder
		report(&b, options{reps: 1, sync: true, dups: []int{0}},
			[]result{cell(modeRaw, 0, time.Second), cell(modeGateLedger, 0, c.took), cell(modeRaw, 1, time.Second)})
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("want %q in:\n%s", c.want, b.String())
		}
	}
}

// TestSplitNeedsTheFsyncedGate: a gate-ledger cell run without its fsyncs
// (-sync=false) is not the gate full runs, and is left out of the split.
func TestSplitNeedsTheFsyncedGate(t *testing.T) {
	cell := func(mode string, rep int) result {
		return result{mode: mode, rep: rep, n: 1000, unique: 1000, took: time.Second, cpu: 100 * time.Millisecond, effects: 1000, expected: 1000}
	}
	results := []result{cell(modeRaw, 0), cell(modeGateLedger, 0), cell(modeFull, 0), cell(modeCalls, 0), cell(modeRaw, 1)}
	for _, sync := range []bool{true, false} {
		var b strings.Builder
		report(&b, options{reps: 1, sync: sync, dups: []int{0}}, results)
		if got := strings.Contains(b.String(), "the gate without a model step"); got != sync {
			t.Errorf("-sync=%v: split printed %v; want %v:\n%s", sync, got, sync, b.String())
		}
	}
}
