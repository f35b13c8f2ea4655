package consumer_test

import (
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/standin"
)

// overBudget returns a configuration mutator: the alerts pipeline's step
// may spend max dollars per period, at a dollar a token, and does what
// over says past it.
func overBudget(max float64, period time.Duration, over string) func(*config.Config) {
	return func(cfg *config.Config) {
		cfg.LLM.Prices = map[string]config.Price{"*": {PromptPerMTok: 1e6, CompletionPerMTok: 1e6}}
		for i := range cfg.Pipelines {
			if p := &cfg.Pipelines[i]; p.Step != nil && p.Name == "alerts" {
				p.Step.MaxBudget, p.Step.BudgetDuration, p.Step.OverBudget = max, config.Period(period), over
			}
		}
	}
}

// TestOverBudgetDeadLetter: alerts published one by one against a
// pipeline spend limit of a few calls: the calls within it are made, and
// the triggers past it are dead-lettered over_budget without a model call.
func TestOverBudgetDeadLetter(t *testing.T) {
	const max = 200 // dollars, at a dollar a token: one or two alerts' calls
	f := start(t, overBudget(max, 0, config.OverBudgetDeadLetter), standin.Options{})
	const n = 6
	for i := range n {
		f.publish("triggers.alerts", alert(string(rune('a'+i)), 1, 0))
		waitFor(t, 10*time.Second, "the alert to settle", func() bool { return settled(f.stats("alerts")) == int64(i+1) }, f)
	}
	st := f.stats("alerts")
	ms := f.model.Stats()
	spent := float64(ms.PromptTokens + ms.CompletionTokens)
	if st.Effects < 1 || st.DeadLetters < 1 || st.Effects+st.DeadLetters != n || ms.Completions != st.Effects {
		t.Fatalf("%d effects, %d dead letters, %d model calls; want some calls within the limit, the rest dead-lettered without a call", st.Effects, st.DeadLetters, ms.Completions)
	}
	if perCall := spent / float64(ms.Completions); spent > max+perCall {
		t.Errorf("the model was paid $%.0f against a limit of $%d", spent, max)
	}
	for _, m := range f.streamMsgs("ONCEGATE", "oncegate.dead.alerts") {
		if got := m.Headers().Get(consumer.HeaderReason); got != string(outcome.ReasonOverBudget) {
			t.Errorf("dead letter with reason %q; want %q", got, outcome.ReasonOverBudget)
		}
	}
}

// TestOverBudgetWait: with over_budget: wait, a trigger past the limit is
// put back until the limit's period ends, and then done: three alerts
// published at once against a limit of one call per 2s period (two of them
// at least fall in one period, so one at least is refused) all get their
// effect, with no dead letter.
func TestOverBudgetWait(t *testing.T) {
	slowTest(t)
	const max = 200 // dollars, at a dollar a token: one alert's call a period
	f := start(t, overBudget(max, 2*time.Second, config.OverBudgetWait), standin.Options{})
	for _, fp := range []string{"w1", "w2", "w3"} {
		f.publish("triggers.alerts", alert(fp, 1, 0))
	}
	waitFor(t, 30*time.Second, "the alerts' effects", func() bool { return f.stats("alerts").Effects == 3 }, f)
	if st := f.stats("alerts"); st.DeadLetters != 0 {
		t.Errorf("%d dead letters; want none", st.DeadLetters)
	}
	if ms := f.model.Stats(); ms.Completions != 3 {
		t.Errorf("%d model calls; want 3", ms.Completions)
	}
	var refused int64
	for _, s := range llmhook.Stats(f.cache) {
		refused += s.BudgetDenied
	}
	if refused == 0 {
		t.Error("no call was refused; the test did not test a wait")
	}
}
