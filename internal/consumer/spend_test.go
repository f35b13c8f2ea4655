package consumer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/standin"
)

// TestStepSpendLimitWithoutMaxTokens: a step with a spend limit and no
// max_tokens, its alerts published at once against a slow model, each
// call's answer costing more than its prompt. Each call reserves the
// model's output limit (llm.prices' max_output_tokens) before it goes
// out, and is settled to its usage after, so the calls made together stay
// within the limit: what the model was paid never passes it.
func TestStepSpendLimitWithoutMaxTokens(t *testing.T) {
	const max = 1500 // dollars, at a dollar a token
	f := start(t, func(cfg *config.Config) {
		cfg.LLM.Prices = map[string]config.Price{"*": {PromptPerMTok: 1e6, CompletionPerMTok: 1e6, MaxOutputTokens: 400}}
		for i := range cfg.Pipelines {
			if p := &cfg.Pipelines[i]; p.Step != nil && p.Name == "alerts" {
				p.Step.MaxTokens = 0
				p.Step.MaxBudget, p.Step.OverBudget = max, config.OverBudgetDeadLetter
			}
		}
	}, standin.Options{Latency: 300 * time.Millisecond})
	const n = 24
	for i := range n {
		f.publish("triggers.alerts", alert(fmt.Sprintf("spend-%d", i), 1, 0))
	}
	waitFor(t, 60*time.Second, "every alert to settle", func() bool { return settled(f.stats("alerts")) == n }, f)
	ms := f.model.Stats()
	spent := ms.PromptTokens + ms.CompletionTokens
	st := f.stats("alerts")
	t.Logf("%d calls, %d prompt and %d completion tokens, %d effects, %d dead letters", ms.Completions, ms.PromptTokens, ms.CompletionTokens, st.Effects, st.DeadLetters)
	if ms.Completions > 0 && ms.CompletionTokens/ms.Completions > 400 {
		t.Fatalf("answers of %d tokens on average; the test needs them within max_output_tokens 400", ms.CompletionTokens/ms.Completions)
	}
	if spent > max {
		t.Errorf("the model was paid $%d against a limit of $%d (%d calls)", spent, max, ms.Completions)
	}
	if st.Effects < 1 || st.DeadLetters < 1 {
		t.Errorf("%d effects, %d dead letters; want calls within the limit and the rest refused", st.Effects, st.DeadLetters)
	}
}
