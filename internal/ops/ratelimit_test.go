package ops_test

import (
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ops"
)

func TestRateLimitMetrics(t *testing.T) {
	m := ops.NewMetrics(ops.MetricsOptions{})
	base := startServer(t, m, nil, discardLogger())
	if f := scrape(t, base); len(f["oncegate_llm_rate_limit_wait_seconds"].GetMetric()) != 0 {
		t.Fatal("rate limit series exposed before AddRateLimit")
	}
	m.AddRateLimit("alerts", "triage")
	f := scrape(t, base)
	l := labels{"pipeline": "alerts", "step": "triage"}
	if s, ok := f.series("oncegate_llm_rate_limit_wait_seconds", l); !ok || s.GetHistogram().GetSampleCount() != 0 {
		t.Fatalf("wait histogram after AddRateLimit: %v, %v; want an empty series", s, ok)
	}
	if v := f.value(t, "oncegate_llm_rate_limited_total", l); v != 0 {
		t.Fatalf("rate limited = %v; want 0", v)
	}

	m.RateLimitWaited("alerts", "triage", 0)
	m.RateLimitWaited("alerts", "triage", 1500*time.Millisecond)
	m.RateLimited("alerts", "triage")
	f = scrape(t, base)
	s, _ := f.series("oncegate_llm_rate_limit_wait_seconds", l)
	if h := s.GetHistogram(); h.GetSampleCount() != 2 || h.GetSampleSum() != 1.5 {
		t.Errorf("wait histogram: count %d, sum %v; want 2, 1.5", h.GetSampleCount(), h.GetSampleSum())
	}
	if v := f.value(t, "oncegate_llm_rate_limited_total", l); v != 1 {
		t.Errorf("rate limited = %v; want 1", v)
	}

	var nilM *ops.Metrics // records nothing, and does not panic
	nilM.AddRateLimit("a", "b")
	nilM.RateLimitWaited("a", "b", time.Second)
	nilM.RateLimited("a", "b")
}
