package app

import (
	"fmt"
	"net/http"
	"time"

	"github.com/oncegate/oncegate/internal/ops"
	"github.com/oncegate/oncegate/pkg/llmcache/ratelimit"
)

// withRateLimit wraps rt, the transport of the LLM cache's upstream calls,
// in the endpoint's rate limiter when llm.rate_limit is on: between the
// cache and the network, so that answers from the cache never wait.
func (a *App) withRateLimit(rt http.RoundTripper) (http.RoundTripper, error) {
	r := a.Config.LLM.RateLimit
	if !r.On() {
		return rt, nil
	}
	lim, err := ratelimit.New(rt, ratelimit.Options{
		RequestsPerMinute: r.RequestsPerMinute, TokensPerMinute: r.TokensPerMinute,
		CompletionTokens: r.CompletionTokens, MaxWait: r.MaxWait,
		Observer: rateObserver{a.Metrics},
	})
	if err != nil {
		return nil, fmt.Errorf("app: llm.rate_limit: %w", err)
	}
	for _, p := range a.Config.Pipelines {
		if p.Step != nil {
			a.Metrics.AddRateLimit(p.Name, p.Step.Name)
		}
	}
	a.RateLimit = lim
	a.log.Info("model endpoint rate limit", "requests_per_minute", r.RequestsPerMinute,
		"tokens_per_minute", r.TokensPerMinute, "max_wait", r.MaxWait)
	return lim, nil
}

// rateObserver feeds the rate limiter's events to the metrics.
type rateObserver struct{ m *ops.Metrics }

func (o rateObserver) Waited(p, step string, d time.Duration) { o.m.RateLimitWaited(p, step, d) }

func (o rateObserver) Limited(p, step string) { o.m.RateLimited(p, step) }
