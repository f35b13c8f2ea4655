package ops

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncegate/oncegate/internal/llmhook"
)

// The collectors below read cumulative snapshots at scrape time and expose
// them as const metrics: a scrape reports the totals as they are, so
// nothing is added twice however often it runs.

// emit sends one const metric, or an invalid metric carrying the error
// (label values that are not valid UTF-8), which the registry reports
// without failing the rest of the scrape.
func emit(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
}

// llmCollector exposes llmhook.StepStats, labelled by pipeline (the
// cache's namespace, which the consumer sets to the pipeline's name) and
// step, as the other metrics are. The steps Metrics.AddStep names are
// exposed at 0 before their first model call.
type llmCollector struct {
	stats func() []llmhook.StepStats
	known func() []llmhook.StepStats

	requests, tokensSpent, tokensSaved, tokensEstimated     *prometheus.Desc
	costSpent, costSaved, stored, notStored, upstreamErrors *prometheus.Desc
	held                                                    *prometheus.Desc
}

func newLLMCollector(stats, known func() []llmhook.StepStats) *llmCollector {
	return &llmCollector{
		stats: stats, known: known,
		requests: desc("llm_requests_total",
			"Chat completion requests through the LLM cache, by result (hit, shared, miss, bypass, budget_denied, invalid).",
			"pipeline", "step", "result"),
		tokensSpent: desc("llm_tokens_spent_total",
			"Tokens spent by upstream model calls, by kind (prompt, completion).", "pipeline", "step", "kind"),
		tokensSaved: desc("llm_tokens_saved_total",
			"Tokens that cache hits and shared answers did not spend again, by kind (prompt, completion).",
			"pipeline", "step", "kind"),
		tokensEstimated: desc("llm_tokens_estimated_total",
			"Prompt tokens estimated by the tokenizer before upstream calls, to compare with the spent prompt tokens.",
			"pipeline", "step"),
		costSpent: desc("llm_cost_spent_usd_total",
			"Cost of the tokens spent, in US dollars at the configured prices.", "pipeline", "step"),
		costSaved: desc("llm_cost_saved_usd_total",
			"Cost of the tokens saved, in US dollars at the configured prices.", "pipeline", "step"),
		stored: desc("llm_answers_stored_total",
			"Upstream answers written to the cache.", "pipeline", "step"),
		notStored: desc("llm_answers_not_stored_total",
			"Upstream answers not written to the cache: errors, truncations, cancellations, no-store.",
			"pipeline", "step"),
		upstreamErrors: desc("llm_upstream_errors_total",
			"Upstream model calls that failed (transport error or status >= 400).", "pipeline", "step"),
		held: desc("llm_answers_held",
			"Answers paid for that the cache's store refused, held in the process and served from it while their write is retried.",
			"pipeline", "step"),
	}
}

func (c *llmCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.tokensSpent, c.tokensSaved, c.tokensEstimated,
		c.costSpent, c.costSaved, c.stored, c.notStored, c.upstreamErrors, c.held} {
		ch <- d
	}
}

func (c *llmCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range mergeStepStats(append(c.known(), c.stats()...)) {
		ns, step := s.Namespace, s.Step
		counter := func(d *prometheus.Desc, v float64, labels ...string) {
			emit(ch, d, prometheus.CounterValue, v, append([]string{ns, step}, labels...)...)
		}
		counter(c.requests, float64(s.Hits), "hit")
		counter(c.requests, float64(s.Shared), "shared")
		counter(c.requests, float64(s.Misses), "miss")
		counter(c.requests, float64(s.Bypassed), "bypass")
		counter(c.requests, float64(s.BudgetDenied), "budget_denied")
		counter(c.requests, float64(s.Invalid), "invalid")
		counter(c.tokensSpent, float64(s.PromptTokens), "prompt")
		counter(c.tokensSpent, float64(s.CompletionTokens), "completion")
		counter(c.tokensSaved, float64(s.SavedPromptTokens), "prompt")
		counter(c.tokensSaved, float64(s.SavedCompletionTokens), "completion")
		counter(c.tokensEstimated, float64(s.EstimatedPromptTokens))
		counter(c.costSpent, s.CostSpent)
		counter(c.costSaved, s.CostSaved)
		counter(c.stored, float64(s.Stored))
		counter(c.notStored, float64(s.NotStored))
		counter(c.upstreamErrors, float64(s.Errors))
		emit(ch, c.held, prometheus.GaugeValue, float64(s.Held), ns, step)
	}
}

// mergeStepStats sums the rows that share a namespace and step, which a
// registry would otherwise reject as duplicate series. It keeps the order
// of first appearance.
func mergeStepStats(rows []llmhook.StepStats) []llmhook.StepStats {
	type id struct{ ns, step string }
	at := make(map[id]int, len(rows))
	out := make([]llmhook.StepStats, 0, len(rows))
	for _, r := range rows {
		i, ok := at[id{r.Namespace, r.Step}]
		if !ok {
			at[id{r.Namespace, r.Step}] = len(out)
			out = append(out, r)
			continue
		}
		o := &out[i]
		o.Requests += r.Requests
		o.Hits += r.Hits
		o.Shared += r.Shared
		o.Misses += r.Misses
		o.Bypassed += r.Bypassed
		o.BudgetDenied += r.BudgetDenied
		o.Invalid += r.Invalid
		o.Stored += r.Stored
		o.NotStored += r.NotStored
		o.Errors += r.Errors
		o.Held += r.Held
		o.PromptTokens += r.PromptTokens
		o.CompletionTokens += r.CompletionTokens
		o.EstimatedPromptTokens += r.EstimatedPromptTokens
		o.SavedPromptTokens += r.SavedPromptTokens
		o.SavedCompletionTokens += r.SavedCompletionTokens
		o.CostSpent += r.CostSpent
		o.CostSaved += r.CostSaved
	}
	return out
}

// windowCollector exposes WindowStats.
type windowCollector struct {
	stats func() []WindowStats

	live, capacity, bytes, hits, evictions, expired *prometheus.Desc
}

func newWindowCollector(stats func() []WindowStats) *windowCollector {
	return &windowCollector{
		stats:     stats,
		live:      desc("window_live_keys", "Keys live in the pipeline's duplicate window.", "pipeline"),
		capacity:  desc("window_capacity_keys", "Keys the duplicate window holds without eviction.", "pipeline"),
		bytes:     desc("window_bytes", "Memory held by the duplicate window's table.", "pipeline"),
		hits:      desc("window_hits_total", "Window lookups that found the key live.", "pipeline"),
		evictions: desc("window_evictions_total", "Live keys pushed out of the window because their slots were full.", "pipeline"),
		expired:   desc("window_expired_total", "Window slots reclaimed after their key expired.", "pipeline"),
	}
}

func (c *windowCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.live, c.capacity, c.bytes, c.hits, c.evictions, c.expired} {
		ch <- d
	}
}

func (c *windowCollector) Collect(ch chan<- prometheus.Metric) {
	rows := c.stats()
	at := make(map[string]int, len(rows))
	merged := make([]WindowStats, 0, len(rows))
	for _, r := range rows {
		i, ok := at[r.Pipeline]
		if !ok {
			at[r.Pipeline] = len(merged)
			merged = append(merged, r)
			continue
		}
		o := &merged[i]
		o.Capacity += r.Capacity
		o.Bytes += r.Bytes
		o.Live += r.Live
		o.Hits += r.Hits
		o.Evictions += r.Evictions
		o.Expired += r.Expired
	}
	for _, s := range merged {
		emit(ch, c.live, prometheus.GaugeValue, float64(s.Live), s.Pipeline)
		emit(ch, c.capacity, prometheus.GaugeValue, float64(s.Capacity), s.Pipeline)
		emit(ch, c.bytes, prometheus.GaugeValue, float64(s.Bytes), s.Pipeline)
		emit(ch, c.hits, prometheus.CounterValue, float64(s.Hits), s.Pipeline)
		emit(ch, c.evictions, prometheus.CounterValue, float64(s.Evictions), s.Pipeline)
		emit(ch, c.expired, prometheus.CounterValue, float64(s.Expired), s.Pipeline)
	}
}
