package proxy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncegate/oncegate/internal/llmhook"
)

// Outcome is how the OpenAI-compatible proxy answered a request.
type Outcome string

// The proxy's outcomes.
const (
	OutcomeHit          Outcome = "hit"            // answered from the cache
	OutcomeShared       Outcome = "shared"         // joined an identical call in flight, here or on another replica
	OutcomeMiss         Outcome = "miss"           // the provider was called
	OutcomeBypass       Outcome = "bypass"         // sent past the cache (a body too large to key)
	OutcomePassThrough  Outcome = "pass_through"   // another endpoint (/v1/models), sent to the provider as it is
	OutcomeSpendLimited Outcome = "spend_limited"  // refused: a spend limit in dollars (429)
	OutcomeBudgetDenied Outcome = "budget_denied"  // refused: the intent's token budget (429)
	OutcomeRateLimited  Outcome = "rate_limited"   // refused: the provider's rate limit would make it wait too long (429)
	OutcomeUnavailable  Outcome = "unavailable"    // refused: the shared cache could not be read (503)
	OutcomeUpstream     Outcome = "upstream_error" // the provider answered an error, passed on
	OutcomeUpstreamAuth Outcome = "upstream_auth"  // the provider refused the proxy's own key (401, 403): answered 502
	OutcomeError        Outcome = "error"          // the provider could not be reached (502)
	OutcomeInvalid      Outcome = "invalid"        // a request that could not be served (400, 404, 405, 413)
	OutcomeUnauthorized Outcome = "unauthorized"   // no or an unknown client key (401)
)

var outcomes = []Outcome{OutcomeHit, OutcomeShared, OutcomeMiss, OutcomeBypass, OutcomePassThrough, OutcomeSpendLimited,
	OutcomeBudgetDenied, OutcomeRateLimited, OutcomeUnavailable, OutcomeUpstream, OutcomeUpstreamAuth, OutcomeError, OutcomeInvalid, OutcomeUnauthorized}

// Namespace is the cache namespace of the proxy's calls for client:
// "proxy/" followed by the client's name, or "proxy/" alone when clients
// share answers. The calls' Step is the client's name in both cases, so
// that usage and cost are told apart per client.
func Namespace(client string, shared bool) string {
	if shared {
		return "proxy/"
	}
	return "proxy/" + client
}

// Spend is one client's spending against its limit, in the period
// that holds now.
type Spend struct {
	Client     string
	SpentUSD   float64
	LimitUSD   float64
	ResetsUnix float64 // when the period ends; 0 for one that never ends
}

// metrics are the proxy's: requests by client and outcome, their time,
// and (at scrape time) each client's usage from the LLM cache's figures
// and its spending against its limit.
type metrics struct {
	requests *prometheus.CounterVec   // client, outcome
	time     *prometheus.HistogramVec // client
}

// requestBuckets covers a request from a cache hit to a long completion.
var requestBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// newMetrics registers the proxy's metrics with reg, with a series for
// each of clients at 0; stats and spend, if set, are called at each
// scrape for the clients' usage and their spending against their limits.
func newMetrics(reg prometheus.Registerer, clients []string, stats func() []llmhook.StepStats, spend func() []Spend) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "oncegate", Name: "proxy_requests_total",
			Help: "Requests to the OpenAI-compatible proxy, by client key and outcome (hit, shared, miss, bypass, pass_through, spend_limited, budget_denied, rate_limited, unavailable, upstream_error, upstream_auth, error, invalid, unauthorized).",
		}, []string{"client", "outcome"}),
		time: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "oncegate", Name: "proxy_request_seconds",
			Help:    "Time the proxy took to answer a request, to its last byte, by client key.",
			Buckets: requestBuckets,
		}, []string{"client"}),
	}
	col := &proxyCollector{stats: stats, spend: spend,
		tokens: desc("proxy_tokens_total",
			"Tokens the proxy's calls spent at the provider, by client key and kind (prompt, completion).", "client", "kind"),
		tokensSaved: desc("proxy_tokens_saved_total",
			"Tokens the cache answered the proxy's calls with instead of the provider, by client key and kind (prompt, completion).", "client", "kind"),
		cost: desc("proxy_cost_usd_total",
			"Cost of the tokens the proxy's calls spent, in US dollars at llm.prices, by client key.", "client"),
		costSaved: desc("proxy_cost_saved_usd_total",
			"Cost of the tokens the cache saved the proxy's calls, in US dollars at llm.prices, by client key.", "client"),
		spent: desc("proxy_spend_usd",
			"What a client key spent in its spend limit's current period, in US dollars.", "client"),
		limit: desc("proxy_spend_limit_usd",
			"A client key's spend limit per period, in US dollars.", "client"),
		resets: desc("proxy_spend_resets_timestamp_seconds",
			"When a client key's current spend period ends, as a Unix time (0 for a period that never ends).", "client"),
	}
	for _, c := range []prometheus.Collector{m.requests, m.time, col} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("proxy: metrics: %w", err)
		}
	}
	for _, c := range clients {
		m.time.WithLabelValues(c)
		for _, o := range outcomes {
			m.requests.WithLabelValues(c, string(o))
		}
	}
	return m, nil
}

// request records a request the proxy answered for client ("" for one
// without a valid key), with outcome o, in took. A nil m records nothing.
func (m *metrics) request(client string, o Outcome, took time.Duration) {
	if m == nil {
		return
	}
	if !slices.Contains(outcomes, o) {
		o = "other" // one series for a bad conversion, not one per value
	}
	m.requests.WithLabelValues(client, string(o)).Inc()
	m.time.WithLabelValues(client).Observe(took.Seconds())
}

type proxyCollector struct {
	stats func() []llmhook.StepStats
	spend func() []Spend

	tokens, tokensSaved, cost, costSaved, spent, limit, resets *prometheus.Desc
}

func (c *proxyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.tokens, c.tokensSaved, c.cost, c.costSaved, c.spent, c.limit, c.resets} {
		ch <- d
	}
}

func (c *proxyCollector) Collect(ch chan<- prometheus.Metric) {
	if c.stats != nil {
		type sums struct{ prompt, completion, savedPrompt, savedCompletion, cost, saved float64 }
		by := map[string]*sums{}
		var order []string
		for _, s := range c.stats() {
			if !strings.HasPrefix(s.Namespace, "proxy/") {
				continue
			}
			x := by[s.Step]
			if x == nil {
				x = &sums{}
				by[s.Step] = x
				order = append(order, s.Step)
			}
			x.prompt += float64(s.PromptTokens)
			x.completion += float64(s.CompletionTokens)
			x.savedPrompt += float64(s.SavedPromptTokens)
			x.savedCompletion += float64(s.SavedCompletionTokens)
			x.cost += s.CostSpent
			x.saved += s.CostSaved
		}
		for _, client := range order {
			x := by[client]
			emit(ch, c.tokens, prometheus.CounterValue, x.prompt, client, "prompt")
			emit(ch, c.tokens, prometheus.CounterValue, x.completion, client, "completion")
			emit(ch, c.tokensSaved, prometheus.CounterValue, x.savedPrompt, client, "prompt")
			emit(ch, c.tokensSaved, prometheus.CounterValue, x.savedCompletion, client, "completion")
			emit(ch, c.cost, prometheus.CounterValue, x.cost, client)
			emit(ch, c.costSaved, prometheus.CounterValue, x.saved, client)
		}
	}
	if c.spend != nil {
		for _, s := range c.spend() {
			emit(ch, c.spent, prometheus.GaugeValue, s.SpentUSD, s.Client)
			emit(ch, c.limit, prometheus.GaugeValue, s.LimitUSD, s.Client)
			emit(ch, c.resets, prometheus.GaugeValue, s.ResetsUnix, s.Client)
		}
	}
}

func emit(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName("oncegate", "", name), help, labels, nil)
}
