package ops

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// waitBuckets covers a model call's wait for the endpoint's rate limit,
// from none to a minute.
var waitBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// rateLimitMetrics are the model endpoint's rate limit's (llm.rate_limit).
type rateLimitMetrics struct {
	wait    *prometheus.HistogramVec // pipeline, step
	limited *prometheus.CounterVec   // pipeline, step
}

func (m *Metrics) registerRateLimit() {
	m.rl.wait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "llm_rate_limit_wait_seconds",
		Help:    "Time a model call waited for the endpoint's rate limit (budget and 429 pauses) before it was sent; cache hits do not wait and are not counted.",
		Buckets: waitBuckets,
	}, []string{"pipeline", "step"})
	m.rl.limited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "llm_rate_limited_total",
		Help: "429 answers from the model endpoint, each waited out and retried while the call's wait allowed.",
	}, []string{"pipeline", "step"})
	m.reg.MustRegister(m.rl.wait, m.rl.limited)
}

// AddRateLimit creates the rate limit series of a pipeline's step, empty,
// for a process with llm.rate_limit on.
func (m *Metrics) AddRateLimit(pipeline, step string) {
	if m == nil {
		return
	}
	m.rl.wait.WithLabelValues(pipeline, step)
	m.rl.limited.WithLabelValues(pipeline, step)
}

// RateLimitWaited records a model call that waited d for the endpoint's
// rate limit (0 if it did not wait).
func (m *Metrics) RateLimitWaited(pipeline, step string, d time.Duration) {
	if m == nil {
		return
	}
	m.rl.wait.WithLabelValues(pipeline, step).Observe(d.Seconds())
}

// RateLimited counts a 429 answered by the model endpoint.
func (m *Metrics) RateLimited(pipeline, step string) {
	if m == nil {
		return
	}
	m.rl.limited.WithLabelValues(pipeline, step).Inc()
}
