package config

import "time"

// What a trigger does when its step's spend limit (Step.MaxBudget) refuses
// its model call.
const (
	// OverBudgetDeadLetter dead-letters the trigger with reason
	// over_budget: nothing is paid, and a person redrives it once the
	// budget allows.
	OverBudgetDeadLetter = "dead_letter"
	// OverBudgetWait puts the trigger back until the limit's period ends
	// (an hour at most between looks), holding its place; the wait is not
	// a try, so the trigger is never exhausted by it.
	OverBudgetWait = "wait"
)

func (c *Config) spendDefaults() {
	for i := range c.Pipelines {
		p := &c.Pipelines[i]
		if p.Step != nil {
			setDefault(c, joinPath(indexPath("pipelines", i), "step.over_budget"), &p.Step.OverBudget, OverBudgetDeadLetter)
		}
	}
}

func (v *validator) spend() {
	for i := range v.c.Pipelines {
		s := v.c.Pipelines[i].Step
		if s == nil {
			continue
		}
		at := joinPath(indexPath("pipelines", i), "step") + "."
		if !(s.MaxBudget >= 0) {
			v.add(at+"max_budget", invalid("must be 0 or more US dollars, got %v", s.MaxBudget))
		}
		if s.BudgetDuration < 0 {
			v.add(at+"budget_duration", invalid("must be 0 or more, got %s", s.BudgetDuration))
		}
		v.oneOf(at+"over_budget", s.OverBudget, OverBudgetDeadLetter, OverBudgetWait)
		if s.MaxBudget <= 0 || s.Model == "" {
			continue
		}
		// A limit counts in dollars: a model without a price costs
		// nothing to it, and a call without a cap on its answer reserves
		// nothing for the answer, so calls made together pass it.
		pr, ok := v.c.LLM.PriceOf(s.Model)
		switch {
		case !ok:
			v.add(at+"max_budget", invalid("the step's model %q has no price in llm.prices (nor a \"*\" price), so the spend limit cannot count what its calls cost: price it in llm.prices", s.Model))
		case s.MaxTokens == 0 && pr.MaxOutputTokens == 0:
			v.add(at+"max_budget", invalid("the step sets no max_tokens and llm.prices has no max_output_tokens for %q, so a call's answer cannot be reserved from the spend limit before it goes out: set step.max_tokens or the model's max_output_tokens", s.Model))
		}
	}
}

// PriceOf returns the price of model in l.Prices, or of "*", and whether
// there is one.
func (l *LLM) PriceOf(model string) (Price, bool) {
	if p, ok := l.Prices[model]; ok {
		return p, true
	}
	p, ok := l.Prices["*"]
	return p, ok
}

// LongestBudgetPeriod is the longest period of a spend limit the
// configuration sets (steps' and the proxy's): the cache's store must keep
// spending records at least that long.
func (c *Config) LongestBudgetPeriod() time.Duration {
	d := time.Duration(c.Proxy.BudgetDuration)
	for _, cl := range c.Proxy.Clients {
		d = max(d, time.Duration(cl.BudgetDuration))
	}
	for _, p := range c.Pipelines {
		if p.Step != nil {
			d = max(d, time.Duration(p.Step.BudgetDuration))
		}
	}
	return d
}
