package llmcache

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
)

// StepStats counts what one namespace's step did with the cache. Every
// chat completion request through the transport is counted once in
// Requests and once in exactly one of Hits, Shared, Misses, Bypassed,
// BudgetDenied, Invalid and Unavailable.
type StepStats struct {
	Namespace, Step string

	Requests     int64 // chat completion requests seen
	Hits         int64 // answered from the store
	Shared       int64 // answered by joining an identical call in flight
	Misses       int64 // sent upstream (default, no-store and refresh modes)
	Bypassed     int64 // sent upstream in ModeBypass, or too large to key
	BudgetDenied int64 // refused with ErrBudgetExceeded or ErrSpendLimit
	Invalid      int64 // bodies that could not be keyed, sent upstream as is
	Unavailable  int64 // refused with ErrStoreUnavailable: a shared store could not be read

	Stored    int64 // answers written to the store
	NotStored int64 // upstream answers not stored: errors, truncations, cancellations, no-store
	Errors    int64 // upstream calls that failed (transport error or status >= 400)
	// Held is a gauge: answers paid for that the store refused, held in
	// this process (and served from it) while their write is retried.
	Held int64

	// Tokens the upstream calls spent, from the API's usage where it was
	// given and from the tokenizer where it was not.
	PromptTokens, CompletionTokens int64
	// EstimatedPromptTokens sums the tokenizer's estimates of the prompts of
	// upstream calls, to compare with PromptTokens. The tokenizer runs only
	// where its count is used: a call under a token budget (counted before
	// it goes out), or an answer that reports no usage.
	EstimatedPromptTokens int64
	// Tokens that hits and shared answers did not spend again.
	SavedPromptTokens, SavedCompletionTokens int64

	// CostSpent and CostSaved price those tokens with Options.Prices, in US
	// dollars.
	CostSpent, CostSaved float64
}

// TokensSpent is PromptTokens + CompletionTokens.
func (s StepStats) TokensSpent() int64 { return s.PromptTokens + s.CompletionTokens }

// TokensSaved is SavedPromptTokens + SavedCompletionTokens.
func (s StepStats) TokensSaved() int64 { return s.SavedPromptTokens + s.SavedCompletionTokens }

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

func (s *stepCounters) spend(u Usage, cost float64) {
	s.prompt.Add(u.PromptTokens)
	s.completion.Add(u.CompletionTokens)
	s.costSpent.Add(int64(cost * 1e9))
}

func (s *stepCounters) save(u Usage, cost float64) {
	s.savedPrompt.Add(u.PromptTokens)
	s.savedCompletion.Add(u.CompletionTokens)
	s.costSaved.Add(int64(cost * 1e9))
}

func (c *counters) snapshot() []StepStats {
	c.mu.RLock()
	out := make([]StepStats, 0, len(c.steps))
	for id, s := range c.steps {
		out = append(out, StepStats{
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
	slices.SortFunc(out, func(a, b StepStats) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Step, b.Step))
	})
	return out
}
