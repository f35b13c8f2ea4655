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
	}
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
