package config

import (
	"fmt"
	"math"
	"time"
)

// DefaultRateLimitCompletionTokens is the completion a model request that
// sets no max_tokens reserves from llm.rate_limit.tokens_per_minute.
const DefaultRateLimitCompletionTokens = 256

// RateLimit is the model endpoint's limits, as the provider sets them for
// the account (llm.base_url and its key). It is off unless
// RequestsPerMinute or TokensPerMinute is set.
//
// With it on, model calls the cache does not answer wait for room in the
// budgets before they go out (answers from the cache never wait), and a 429
// from the endpoint pauses every call to it until its Retry-After and is
// retried, rather than failing the trigger: a trigger waiting for capacity
// keeps its lease and its message, and is not redelivered or
// dead-lettered. A 429 also halves the rates for a while (see
// pkg/llmcache/ratelimit). Configure the budgets at or just under the
// provider's limits.
type RateLimit struct {
	// RequestsPerMinute is the request budget; 0 (the default) sets none.
	RequestsPerMinute float64 `yaml:"requests_per_minute"`
	// TokensPerMinute is the token budget, prompt and completion together:
	// a call reserves its prompt (counted by the offline tokenizer) and its
	// max_tokens, and the usage of the answer replaces the reservation. 0
	// (the default) sets none.
	TokensPerMinute float64 `yaml:"tokens_per_minute"`
	// CompletionTokens is what a call whose step sets no max_tokens
	// reserves for its completion. The default is 256.
	CompletionTokens int64 `yaml:"completion_tokens"`
	// MaxWait bounds how long one model call waits for capacity, 429
	// pauses and retries included; a call that would wait longer fails,
	// and its trigger is retried as after any failed call. The wait is part
	// of the call's llm.timeout, so it must be shorter; and every trigger
	// of the pipelines with a model step (their concurrency, summed) may be
	// in line at once, so MaxWait must let that many through at
	// RequestsPerMinute. The default is half of llm.timeout.
	MaxWait time.Duration `yaml:"max_wait"`
}

// On reports whether a budget is set.
func (r RateLimit) On() bool { return r.RequestsPerMinute > 0 || r.TokensPerMinute > 0 }

func (c *Config) rateLimitDefaults() {
	r := &c.LLM.RateLimit
	setDefault(c, "llm.rate_limit.requests_per_minute", &r.RequestsPerMinute, 0)
	setDefault(c, "llm.rate_limit.tokens_per_minute", &r.TokensPerMinute, 0)
	setDefault(c, "llm.rate_limit.completion_tokens", &r.CompletionTokens, DefaultRateLimitCompletionTokens)
	setDefault(c, "llm.rate_limit.max_wait", &r.MaxWait, c.LLM.Timeout/2)
}

func (v *validator) rateLimit() {
	r := &v.c.LLM.RateLimit
	for _, f := range []struct {
		key string
		val float64
	}{{"requests_per_minute", r.RequestsPerMinute}, {"tokens_per_minute", r.TokensPerMinute}} {
		if f.val < 0 || math.IsNaN(f.val) || math.IsInf(f.val, 0) {
			v.add("llm.rate_limit."+f.key, invalid("must be 0 (no budget) or positive, got %v", f.val))
		}
	}
	if r.CompletionTokens < 0 {
		v.add("llm.rate_limit.completion_tokens", invalid("must not be negative, got %d", r.CompletionTokens))
	}
	if !r.On() {
		// max_wait means nothing then; it may lag a llm.timeout changed
		// in Go after the defaults were filled in.
		return
	}
	v.positive("llm.rate_limit.max_wait", r.MaxWait)
	// The triggers of every pipeline with a model step may all be waiting
	// for the request budget at once; the last in line must get through
	// within max_wait, or its call gives up, its trigger is retried and,
	// after max_deliver tries, dead-lettered.
	if r.RequestsPerMinute > 0 && r.MaxWait > 0 {
		inFlight := 0
		for _, p := range v.c.Pipelines {
			if p.Step != nil {
				inFlight += p.Concurrency
			}
		}
		if room := r.RequestsPerMinute*r.MaxWait.Minutes() + max(1, r.RequestsPerMinute/600); float64(inFlight) > room {
			v.add("llm.rate_limit.max_wait", invalid("%s at %v requests/min lets %.0f calls through, but the pipelines with a model step "+
				"work on %d triggers at once (concurrency): the last in line would give up and be retried; "+
				"lower their concurrency, or raise max_wait (and llm.timeout)",
				formatDuration(r.MaxWait), r.RequestsPerMinute, room, inFlight))
		}
	}
	if r.MaxWait > 0 && v.c.LLM.Timeout > 0 && r.MaxWait >= v.c.LLM.Timeout {
		v.add("llm.rate_limit.max_wait", invalid("%s must be shorter than llm.timeout (%s): the wait is part of the call",
			formatDuration(r.MaxWait), formatDuration(v.c.LLM.Timeout)))
	}
}

// explainRateLimit adds the rate limit's row to an explanation.
func (x *explainer) explainRateLimit() {
	r := &x.c.LLM.RateLimit
	if !r.On() {
		x.row("llm rate limit", "off (set llm.rate_limit.requests_per_minute or tokens_per_minute to pace model calls and wait out 429s)")
		return
	}
	budget := func(v float64, unit, none string) string {
		if v == 0 {
			return none
		}
		return fmt.Sprintf("%v %s/min", v, unit)
	}
	x.row("llm rate limit", x.d("llm.rate_limit.requests_per_minute", r.RequestsPerMinute, budget(r.RequestsPerMinute, "requests", "no request budget")),
		x.d("llm.rate_limit.tokens_per_minute", r.TokensPerMinute, budget(r.TokensPerMinute, "tokens", "no token budget")),
		"completion allowance "+x.d("llm.rate_limit.completion_tokens", r.CompletionTokens, fmt.Sprint(r.CompletionTokens)),
		"max wait "+x.d("llm.rate_limit.max_wait", r.MaxWait, formatDuration(r.MaxWait))+"; 429s paused and retried")
}
