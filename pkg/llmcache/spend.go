package llmcache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// ErrSpendLimit is wrapped by the *SpendLimitError returned, through
// go-openai, for a call that could take an account past its spend limit.
var ErrSpendLimit = errors.New("llmcache: spend limit reached")

// SpendLimit caps what the model calls of one account (a client, a
// pipeline, a team) may cost in each period, in US dollars as
// [Options.Prices] prices their tokens: a maximum and a period, as
// LiteLLM's max_budget and budget_duration. A call names the limits it
// draws from in [Call.Limits]. Only the calls that go to the model count
// and are refused: an answer from the cache costs nothing.
//
// Before a call goes out, its worst cost (its prompt, counted with the
// tokenizer, and n times its max_tokens or max_completion_tokens, or
// [Call.CompletionTokens] when it sets neither) is reserved from each of
// its limits; a call that could take an account past one is refused with
// a *SpendLimitError, never sent, and so is one whose worst cost is too
// large to count. Reservations of calls in flight at once count against
// each other, so a burst stops at the limit. Once the model answers, the
// reservation gives way to the call's real cost (the API's usage). A call
// that sets no max tokens, with no CompletionTokens, reserves only its
// prompt: the last call allowed can overshoot by its whole completion. Set
// max tokens on the calls, or CompletionTokens to the model's output
// limit, for a limit that is never passed. A model without a price (and no
// "*" price) costs nothing and is never refused: a caller that must not
// spend unpriced refuses such models itself, as Oncegate's proxy does.
//
// What each account spent is kept in the cache's [Store] (with budgets):
// it outlives restarts and, with a shared store, is one account across
// replicas. A store keeps a record for its budget retention after its last
// change (Options.BudgetTTL; a jsstore bucket's BudgetTTL), which should
// exceed the longest Period.
type SpendLimit struct {
	// Name names the account; the limits of the calls that share a Name
	// are one account.
	Name string
	// Max is the most the account may spend in a period, in US dollars.
	Max float64
	// Period is the length of a period. Periods are counted from the Unix
	// epoch, so that every process agrees where one ends: a period of 24h
	// ends at midnight UTC. 0 means a single period that never ends.
	Period time.Duration
}

// SpendLimitError reports a call refused by a [SpendLimit].
type SpendLimitError struct {
	// Limit is the limit that refused the call.
	Limit SpendLimit
	// Spent is what the account spent in the period, and Reserved what
	// calls in flight may still spend, in US dollars.
	Spent, Reserved float64
	// Need is the most the call refused could have cost.
	Need float64
	// Reset is when the period ends, and the account may spend again; the
	// zero Time for a period that never ends.
	Reset time.Time
}

func (e *SpendLimitError) Error() string {
	reset := "never resets"
	if !e.Reset.IsZero() {
		reset = "resets at " + e.Reset.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("llmcache: spend limit %q reached: $%.4f of $%.2f spent, $%.4f reserved, the call may cost $%.4f; the limit %s",
		e.Limit.Name, e.Spent, e.Limit.Max, e.Reserved, e.Need, reset)
}

// Unwrap returns ErrSpendLimit.
func (e *SpendLimitError) Unwrap() error { return ErrSpendLimit }

// spendNS is the namespace of spend records among the budget records: no
// cache namespace is empty with a NUL after it.
const spendNS = "\x00spend"

// spendPeriod returns the index and end of the period of l that holds now.
func spendPeriod(l SpendLimit, now time.Time) (idx int64, reset time.Time) {
	if l.Period <= 0 {
		return 0, time.Time{}
	}
	idx = now.UnixNano() / int64(l.Period)
	return idx, time.Unix(0, (idx+1)*int64(l.Period))
}

func spendID(name string, idx int64) []byte {
	return budgetID(spendNS, name+"\x00"+strconv.FormatInt(idx, 10))
}

// nanoDollars converts US dollars to the integer units spend records
// count, rounding up, from 0 (for less, or NaN) to math.MaxInt64 (for a
// cost too large to count: a float beyond int64 converts to anything).
func nanoDollars(usd float64) int64 {
	n := math.Ceil(usd * 1e9)
	switch {
	case !(n > 0):
		return 0
	case n >= math.MaxInt64: // 2^63, as a float64
		return math.MaxInt64
	}
	return int64(n)
}

// spendHold is one reservation from a spend limit.
type spendHold struct {
	rid []byte
	id  uint64
}

// reserveSpend reserves need dollars from each limit, or returns the
// *SpendLimitError of the first that refuses (releasing the others).
func (c *Cache) reserveSpend(ctx context.Context, limits []SpendLimit, need float64, until time.Time) ([]spendHold, error) {
	now := c.opts.Clock()
	var holds []spendHold
	for _, l := range limits {
		idx, reset := spendPeriod(l, now)
		rid := spendID(l.Name, idx)
		var denied *SpendLimitError
		id, err := c.budgets.reserveID(ctx, rid, c.spendTTL(l), nanoDollars(need), nanoDollars(l.Max), until, func(spent, held int64) error {
			denied = &SpendLimitError{Limit: l, Spent: float64(spent) / 1e9, Reserved: float64(held) / 1e9, Need: need, Reset: reset}
			return denied
		})
		if err == nil {
			holds = append(holds, spendHold{rid, id})
			continue
		}
		c.settleSpend(context.WithoutCancel(ctx), holds, limits, 0)
		if denied != nil && errors.Is(err, ErrSpendLimit) {
			return nil, denied
		}
		return nil, fmt.Errorf("llmcache: reserve from spend limit %q: %w", l.Name, err)
	}
	return holds, nil
}

// settleSpend releases holds and records cost against each.
func (c *Cache) settleSpend(ctx context.Context, holds []spendHold, limits []SpendLimit, cost float64) {
	for i, h := range holds {
		if err := c.budgets.settleID(ctx, h.rid, c.spendTTL(limits[i]), h.id, nanoDollars(cost)); err != nil {
			c.opts.Logger.Warn("llmcache: recording a spend failed", "limit", limits[i].Name, "err", err)
		}
	}
}

// spendTTL is how long a store should keep the spend record of l: its
// period and an hour, or the budget retention if longer.
func (c *Cache) spendTTL(l SpendLimit) time.Duration {
	return max(l.Period+time.Hour, c.opts.BudgetTTL)
}

// Spending returns what the account of l spent in the period that holds
// now, in US dollars, and when that period ends (the zero Time for one
// that never ends).
func (c *Cache) Spending(l SpendLimit) (spent float64, reset time.Time, err error) {
	idx, reset := spendPeriod(l, c.opts.Clock())
	v, err := c.budgets.budget(c.ctx, spendID(l.Name, idx))
	if err != nil {
		return 0, reset, err
	}
	r, err := decodeBudget(v)
	return float64(r.spent) / 1e9, reset, err
}
