package config

import (
	"errors"
	"strings"
	"testing"
)

// TestStepSpendLimitNeedsPriceAndCap: a step's spend limit counts
// dollars at llm.prices, so a step whose model has no price, or whose
// calls set no max_tokens with no max_output_tokens for the model to
// reserve, is refused where the limit is set; priced and capped either
// way, it is taken.
func TestStepSpendLimitNeedsPriceAndCap(t *testing.T) {
	const step = `pipelines:
  - name: p
    subject: triggers.p
    key: {fields: [/id]}
    step: {name: s, model: m, prompt: "x", max_budget: 5%s}
    effect: {sink: jetstream, subject: effects.p}
llm: {standin: true, prices: %s}
`
	for _, tt := range []struct {
		name, maxTokens, prices, want string
	}{
		{"unpriced", "", `{other: {prompt_per_mtok: 1, completion_per_mtok: 1, max_output_tokens: 100}}`, `model "m" has no price`},
		{"no cap to reserve", "", `{m: {prompt_per_mtok: 1, completion_per_mtok: 1}}`, "sets no max_tokens"},
		{"no cap, star price", "", `{"*": {prompt_per_mtok: 1, completion_per_mtok: 1}}`, "sets no max_tokens"},
		{"max_tokens", ", max_tokens: 200", `{m: {prompt_per_mtok: 1, completion_per_mtok: 1}}`, ""},
		{"output limit", "", `{m: {prompt_per_mtok: 1, completion_per_mtok: 1, max_output_tokens: 100}}`, ""},
		{"star output limit", "", `{"*": {prompt_per_mtok: 1, completion_per_mtok: 1, max_output_tokens: 100}}`, ""},
	} {
		doc := strings.Replace(strings.Replace(step, "%s", tt.maxTokens, 1), "%s", tt.prices, 1)
		_, err := Parse([]byte(doc), "spend.yaml")
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: %v; want it taken", tt.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "pipelines[p].step.max_budget") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want ErrInvalid at pipelines[p].step.max_budget saying %q", tt.name, err, tt.want)
		}
	}
}
