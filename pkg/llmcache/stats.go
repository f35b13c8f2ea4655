package llmcache

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/oncegate/oncegate/internal/llmhook"
)

type stepCounters struct {
	requests, hits, shared, misses, bypassed, budgetDenied, invalid atomic.Int64
	unavailable                                                     atomic.Int64
	stored, notStored, errors, held                                 atomic.Int64
	prompt, completion, estimated, savedPrompt, savedCompletion     atomic.Int64
	costSpent, costSaved                                            atomic.Int64 // nano-dollars
}

type stepID struct{ ns, step string }

type counters struct {
	mu    sync.RWMutex
	steps map[stepID]*stepCounters
}

func (c *counters) step(ns, step string) *stepCounters {
	id := stepID{ns, step}
	c.mu.RLock()
	s := c.steps[id]
	c.mu.RUnlock()
	if s != nil {
		return s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s = c.steps[id]; s == nil {
		if c.steps == nil {
			c.steps = map[stepID]*stepCounters{}
		}
		s = new(stepCounters)
		c.steps[id] = s
	}
	return s
}

func (s *stepCounters) spend(u usage, cost float64) {
	s.prompt.Add(u.PromptTokens)
	s.completion.Add(u.CompletionTokens)
	s.costSpent.Add(int64(cost * 1e9))
}

func (s *stepCounters) save(u usage, cost float64) {
	s.savedPrompt.Add(u.PromptTokens)
	s.savedCompletion.Add(u.CompletionTokens)
	s.costSaved.Add(int64(cost * 1e9))
}

func (c *counters) snapshot() []llmhook.StepStats {
	c.mu.RLock()
	out := make([]llmhook.StepStats, 0, len(c.steps))
	for id, s := range c.steps {
		out = append(out, llmhook.StepStats{
			Namespace: id.ns, Step: id.step,
			Requests: s.requests.Load(), Hits: s.hits.Load(), Shared: s.shared.Load(),
			Misses: s.misses.Load(), Bypassed: s.bypassed.Load(), BudgetDenied: s.budgetDenied.Load(),
			Invalid: s.invalid.Load(), Unavailable: s.unavailable.Load(), Stored: s.stored.Load(), NotStored: s.notStored.Load(),
			Errors: s.errors.Load(), Held: s.held.Load(), PromptTokens: s.prompt.Load(), CompletionTokens: s.completion.Load(),
			EstimatedPromptTokens: s.estimated.Load(),
			SavedPromptTokens:     s.savedPrompt.Load(), SavedCompletionTokens: s.savedCompletion.Load(),
			CostSpent: float64(s.costSpent.Load()) / 1e9, CostSaved: float64(s.costSaved.Load()) / 1e9,
		})
	}
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b llmhook.StepStats) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Step, b.Step))
	})
	return out
}
