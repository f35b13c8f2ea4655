package llmcache

import (
	"context"

	"github.com/oncegate/oncegate/internal/llmhook"
)

// The reads Oncegate's own packages make of a Cache (its counters, its
// store's summary, a stored answer, an intent's spending) and the request
// reading they share with it are set in internal/llmhook, out of the API a
// user of the cache sees.
func init() {
	llmhook.Stats = func(c any) []llmhook.StepStats { return c.(*Cache).stats.snapshot() }
	llmhook.Saved = func(c any, namespace, step, model string, prompt, completion int64) {
		cc := c.(*Cache)
		u := usage{PromptTokens: prompt, CompletionTokens: completion}
		cc.stats.step(namespace, step).save(u, cc.opts.Prices.cost(model, u))
	}
	llmhook.Summarize = func(c any) (llmhook.Summary, error) { return c.(*Cache).summarize() }
	llmhook.Get = func(c any, k [16]byte) (*llmhook.Answer, bool, error) {
		a, ok, err := c.(*Cache).get(context.Background(), k)
		if a == nil {
			return nil, ok, err
		}
		return &llmhook.Answer{
			Created: a.Created, Expires: a.Expires, Status: a.Status,
			ContentType: a.ContentType, Model: a.Model, Stream: a.Stream, Body: a.Body,
			PromptTokens: a.Usage.PromptTokens, CompletionTokens: a.Usage.CompletionTokens,
			Estimated: a.Usage.Estimated,
		}, ok, err
	}
	llmhook.Delete = func(c any, k [16]byte) error {
		return c.(*Cache).store.Delete(context.Background(), k)
	}
	llmhook.Spent = func(c any, namespace, intent string) (int64, error) {
		return c.(*Cache).spent(namespace, intent)
	}
	llmhook.ReadRequest = readRequest
	llmhook.EstimateRequest = estimateRequest
}
