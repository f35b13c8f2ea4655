package ops_test

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/logbuf"
	"github.com/oncegate/oncegate/internal/ops"
	"github.com/oncegate/oncegate/internal/outcome"
)

func TestMetricsExposed(t *testing.T) {
	m := ops.NewMetrics(ops.MetricsOptions{})
	m.AddPipeline("billing")
	m.AddSink("billing", "http")
	m.AddStep("billing", "summarize")

	for range 3 {
		m.Trigger("billing")
	}
	m.Duplicate("billing", outcome.GuardWindow)
	m.Duplicate("billing", outcome.GuardWindow)
	m.Duplicate("billing", outcome.GuardLedger)
	m.Duplicate("billing", outcome.GuardStream)
	m.Claim("billing", ops.ClaimNew)
	m.Claim("billing", ops.ClaimNew)
	m.Claim("billing", ops.ClaimCommitted)
	m.Claim("billing", ops.ClaimHeld)
	m.Claim("billing", ops.ClaimTakenOver)
	m.Claim("billing", ops.ClaimFailed)
	m.Effect("billing", "http", ops.OutcomeDone, 3*time.Millisecond)
	m.Effect("billing", "http", ops.OutcomeRetry, 2*time.Second)
	m.Effect("billing", "http", ops.OutcomeDuplicate, 40*time.Millisecond)
	m.Effect("billing", "http", ops.OutcomeDead, 45*time.Second) // over the last bucket
	m.Step("billing", "summarize", 150*time.Millisecond)
	m.DeadLetter("billing", outcome.ReasonPoison)
	m.DeadLetter("billing", outcome.ReasonBudget)
	m.Ack("billing", ops.AckAck)
	m.Ack("billing", ops.AckAck)
	m.Ack("billing", ops.AckNak)
	m.Ack("billing", ops.AckTerm)
	m.Ack("billing", ops.AckInProgress)
	m.AddPendingLeases("billing", 5)
	m.AddPendingLeases("billing", -1)
	m.AddInflight("billing", 3)
	m.AddInflight("billing", -1)
	m.SetBacklog("billing", ops.Backlog{Pending: 12, AckPending: 3, Oldest: 90 * time.Second, MaxAge: 72 * time.Hour})
	m.Unrouted("triggers.typo", 2)
	m.Unrouted("triggers.typo", 1)
	m.Unrouted("triggers.typo", 0)

	f := scrape(t, startServer(t, m, nil, discardLogger()))

	p := "billing"
	tests := []struct {
		name   string
		labels labels
		typ    dto.MetricType
		want   float64
	}{
		{"oncegate_triggers_total", labels{"pipeline": p}, dto.MetricType_COUNTER, 3},
		{"oncegate_duplicates_total", labels{"pipeline": p, "guard": "window"}, dto.MetricType_COUNTER, 2},
		{"oncegate_duplicates_total", labels{"pipeline": p, "guard": "ledger"}, dto.MetricType_COUNTER, 1},
		{"oncegate_duplicates_total", labels{"pipeline": p, "guard": "stream"}, dto.MetricType_COUNTER, 1},
		{"oncegate_ledger_claims_total", labels{"pipeline": p, "status": "new"}, dto.MetricType_COUNTER, 2},
		{"oncegate_ledger_claims_total", labels{"pipeline": p, "status": "committed"}, dto.MetricType_COUNTER, 1},
		{"oncegate_ledger_claims_total", labels{"pipeline": p, "status": "held"}, dto.MetricType_COUNTER, 1},
		{"oncegate_ledger_claims_total", labels{"pipeline": p, "status": "taken_over"}, dto.MetricType_COUNTER, 1},
		{"oncegate_ledger_claims_total", labels{"pipeline": p, "status": "failed"}, dto.MetricType_COUNTER, 1},
		{"oncegate_effects_total", labels{"pipeline": p, "sink": "http", "outcome": "done"}, dto.MetricType_COUNTER, 1},
		{"oncegate_effects_total", labels{"pipeline": p, "sink": "http", "outcome": "duplicate"}, dto.MetricType_COUNTER, 1},
		{"oncegate_effects_total", labels{"pipeline": p, "sink": "http", "outcome": "retry"}, dto.MetricType_COUNTER, 1},
		{"oncegate_effects_total", labels{"pipeline": p, "sink": "http", "outcome": "dead"}, dto.MetricType_COUNTER, 1},
		{"oncegate_effect_seconds", labels{"pipeline": p, "sink": "http"}, dto.MetricType_HISTOGRAM, 4},
		{"oncegate_step_seconds", labels{"pipeline": p, "step": "summarize"}, dto.MetricType_HISTOGRAM, 1},
		{"oncegate_dead_letters_total", labels{"pipeline": p, "reason": "poison"}, dto.MetricType_COUNTER, 1},
		{"oncegate_dead_letters_total", labels{"pipeline": p, "reason": "budget"}, dto.MetricType_COUNTER, 1},
		{"oncegate_dead_letters_total", labels{"pipeline": p, "reason": "exhausted"}, dto.MetricType_COUNTER, 0},
		{"oncegate_acks_total", labels{"pipeline": p, "kind": "ack"}, dto.MetricType_COUNTER, 2},
		{"oncegate_acks_total", labels{"pipeline": p, "kind": "nak"}, dto.MetricType_COUNTER, 1},
		{"oncegate_acks_total", labels{"pipeline": p, "kind": "term"}, dto.MetricType_COUNTER, 1},
		{"oncegate_acks_total", labels{"pipeline": p, "kind": "in_progress"}, dto.MetricType_COUNTER, 1},
		{"oncegate_pending_leases", labels{"pipeline": p}, dto.MetricType_GAUGE, 4},
		{"oncegate_inflight", labels{"pipeline": p}, dto.MetricType_GAUGE, 2},
		{"oncegate_backlog_pending", labels{"pipeline": p}, dto.MetricType_GAUGE, 12},
		{"oncegate_backlog_ack_pending", labels{"pipeline": p}, dto.MetricType_GAUGE, 3},
		{"oncegate_backlog_oldest_age_seconds", labels{"pipeline": p}, dto.MetricType_GAUGE, 90},
		{"oncegate_backlog_max_age_seconds", labels{"pipeline": p}, dto.MetricType_GAUGE, 72 * 3600},
		{"oncegate_unrouted_total", labels{"subject": "triggers.typo"}, dto.MetricType_COUNTER, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name+"{"+tt.labels.String()+"}", func(t *testing.T) {
			if got := f[tt.name].GetType(); got != tt.typ {
				t.Errorf("type = %v; want %v", got, tt.typ)
			}
			if f[tt.name].GetHelp() == "" {
				t.Errorf("no HELP")
			}
			if got := f.value(t, tt.name, tt.labels); got != tt.want {
				t.Errorf("value = %v; want %v", got, tt.want)
			}
		})
	}

	// The effect histogram: 3ms lands in the 5ms bucket, 45s above 30s.
	h, _ := f.series("oncegate_effect_seconds", labels{"pipeline": p, "sink": "http"})
	buckets := map[float64]uint64{}
	for _, b := range h.GetHistogram().GetBucket() {
		buckets[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	for le, want := range map[float64]uint64{0.001: 0, 0.005: 1, 0.05: 2, 2.5: 3, 30: 3, math.Inf(1): 4} {
		if got := buckets[le]; got != want {
			t.Errorf("oncegate_effect_seconds bucket le=%v = %d; want %d", le, got, want)
		}
	}
	if got, want := h.GetHistogram().GetSampleSum(), 0.003+2+0.04+45; math.Abs(got-want) > 1e-9 {
		t.Errorf("oncegate_effect_seconds sum = %v; want %v", got, want)
	}
	s, _ := f.series("oncegate_step_seconds", labels{"pipeline": p, "step": "summarize"})
	if got := s.GetHistogram().GetSampleSum(); math.Abs(got-0.15) > 1e-9 {
		t.Errorf("oncegate_step_seconds sum = %v; want 0.15", got)
	}

	// The runtime and process collectors are there, and everything else
	// is Oncegate's.
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := f[name]; !ok {
			t.Errorf("no %s family", name)
		}
	}
	for name := range f {
		if !strings.HasPrefix(name, "oncegate_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("family %s is not prefixed oncegate_", name)
		}
	}
}

func TestAddPipelineSeriesAtZero(t *testing.T) {
	m := ops.NewMetrics(ops.MetricsOptions{})
	base := startServer(t, m, nil, discardLogger())
	if f := scrape(t, base); f["oncegate_triggers_total"] != nil {
		t.Fatalf("oncegate_triggers_total exposed before any pipeline: %v", f["oncegate_triggers_total"])
	}

	m.AddPipeline("alerts")
	m.AddPipeline("alerts") // again: harmless
	m.AddSink("alerts", "jetstream")
	m.AddStep("alerts", "triage")
	f := scrape(t, base)

	tests := []struct {
		name  string
		label string
		want  []string
	}{
		{"oncegate_triggers_total", "pipeline", []string{"alerts"}},
		{"oncegate_duplicates_total", "guard", []string{"window", "ledger", "stream"}},
		{"oncegate_ledger_claims_total", "status", []string{"new", "committed", "held", "taken_over", "failed"}},
		{"oncegate_effects_total", "outcome", []string{"done", "duplicate", "retry", "dead", "key_reused"}},
		{"oncegate_dead_letters_total", "reason",
			[]string{"invalid_json", "too_large", "missing_field", "poison", "exhausted", "permanent_effect", "budget", "mismatch", "template", "unknown_outcome", "panic", "bad_answer", "condition", "route", "not_approved", "over_budget"}},
		{"oncegate_replies_refused_total", "pipeline", []string{"alerts"}},
		{"oncegate_acks_total", "kind", []string{"ack", "nak", "term", "in_progress"}},
		{"oncegate_pending_leases", "pipeline", []string{"alerts"}},
		{"oncegate_inflight", "pipeline", []string{"alerts"}},
		{"oncegate_backlog_pending", "pipeline", []string{"alerts"}},
		{"oncegate_backlog_ack_pending", "pipeline", []string{"alerts"}},
		{"oncegate_backlog_oldest_age_seconds", "pipeline", []string{"alerts"}},
		{"oncegate_backlog_max_age_seconds", "pipeline", []string{"alerts"}},
		{"oncegate_effect_seconds", "sink", []string{"jetstream"}},
		{"oncegate_step_seconds", "step", []string{"triage"}},
	}
	for _, tt := range tests {
		if got := len(f[tt.name].GetMetric()); got != len(tt.want) {
			t.Errorf("%s has %d series; want %d", tt.name, got, len(tt.want))
		}
		for _, v := range tt.want {
			if n := f.count(tt.name, tt.label, v); n != 1 {
				t.Errorf("%s{%s=%q}: %d series; want 1", tt.name, tt.label, v, n)
				continue
			}
			for _, s := range f[tt.name].GetMetric() {
				if c := s.GetCounter(); c != nil && c.GetValue() != 0 {
					t.Errorf("%s = %v; want 0", tt.name, c.GetValue())
				}
				if h := s.GetHistogram(); h != nil && h.GetSampleCount() != 0 {
					t.Errorf("%s count = %v; want 0", tt.name, h.GetSampleCount())
				}
			}
		}
	}
}

func TestUnknownLabelValueIsOther(t *testing.T) {
	m := ops.NewMetrics(ops.MetricsOptions{})
	m.Duplicate("p", outcome.Guard("Window"))
	m.Claim("p", ops.ClaimStatus("expired"))
	m.Effect("p", "file", ops.Outcome("ok"), time.Millisecond)
	m.DeadLetter("p", outcome.Reason("the payload was bad: "+strings.Repeat("x", 100)))
	m.Ack("p", ops.Ack("double_ack"))

	f := scrape(t, startServer(t, m, nil, discardLogger()))
	for _, tt := range []struct {
		name   string
		labels labels
	}{
		{"oncegate_duplicates_total", labels{"pipeline": "p", "guard": "other"}},
		{"oncegate_ledger_claims_total", labels{"pipeline": "p", "status": "other"}},
		{"oncegate_effects_total", labels{"pipeline": "p", "sink": "file", "outcome": "other"}},
		{"oncegate_dead_letters_total", labels{"pipeline": "p", "reason": "other"}},
		{"oncegate_acks_total", labels{"pipeline": "p", "kind": "other"}},
	} {
		if got := f.value(t, tt.name, tt.labels); got != 1 {
			t.Errorf("%s{%s} = %v; want 1", tt.name, tt.labels, got)
		}
		if n := len(f[tt.name].GetMetric()); n != 1 {
			t.Errorf("%s has %d series; want 1", tt.name, n)
		}
	}
}

func TestNilMetricsRecordsNothing(t *testing.T) {
	var m *ops.Metrics
	m.AddPipeline("p")
	m.AddSink("p", "http")
	m.AddStep("p", "s")
	m.Trigger("p")
	m.Duplicate("p", outcome.GuardLedger)
	m.Claim("p", ops.ClaimNew)
	m.Effect("p", "http", ops.OutcomeDone, time.Second)
	m.Step("p", "s", time.Second)
	m.DeadLetter("p", outcome.ReasonPoison)
	m.Ack("p", ops.AckAck)
	m.AddPendingLeases("p", 1)
	m.AddInflight("p", 1)
	if r := m.Registry(); r != nil {
		t.Errorf("(*Metrics)(nil).Registry() = %v; want nil", r)
	}

	base := startServer(t, nil, nil, discardLogger())
	if code, _, _ := get(t, "GET", base+"/metrics"); code != 404 {
		t.Errorf("GET /metrics without metrics = %d; want 404", code)
	}
	if code, _, body := get(t, "GET", base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("GET /healthz = %d %q; want 200 \"ok\\n\"", code, body)
	}
}

// llmSource is a fake llmhook.Stats that a test updates between
// scrapes.
type llmSource struct {
	mu    sync.Mutex
	rows  []llmhook.StepStats
	calls int
}

func (s *llmSource) set(rows ...llmhook.StepStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = rows
}

func (s *llmSource) stats() []llmhook.StepStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return append([]llmhook.StepStats(nil), s.rows...)
}

func TestLLMCollector(t *testing.T) {
	src := &llmSource{}
	src.set(llmhook.StepStats{
		Namespace: "tenant-a", Step: "summarize",
		Requests: 12, Hits: 4, Shared: 1, Misses: 3, Bypassed: 2, BudgetDenied: 1, Invalid: 1,
		Stored: 2, NotStored: 1, Errors: 1,
		PromptTokens: 300, CompletionTokens: 120, EstimatedPromptTokens: 290,
		SavedPromptTokens: 400, SavedCompletionTokens: 160,
		CostSpent: 0.0021, CostSaved: 0.0028,
	})
	m := ops.NewMetrics(ops.MetricsOptions{LLMStats: src.stats})
	base := startServer(t, m, nil, discardLogger())

	a := labels{"pipeline": "tenant-a", "step": "summarize"}
	with := func(k, v string) labels {
		l := labels{k: v}
		for k, v := range a {
			l[k] = v
		}
		return l
	}
	check := func(t *testing.T, f families, want map[string]map[string]float64) {
		t.Helper()
		for name, series := range want {
			for key, v := range series {
				l := a
				if k, val, ok := strings.Cut(key, "="); ok {
					l = with(k, val)
				}
				if got := f.value(t, name, l); math.Abs(got-v) > 1e-12 {
					t.Errorf("%s{%s} = %v; want %v", name, l, got, v)
				}
			}
		}
	}
	first := map[string]map[string]float64{
		"oncegate_llm_requests_total": {"result=hit": 4, "result=shared": 1, "result=miss": 3,
			"result=bypass": 2, "result=budget_denied": 1, "result=invalid": 1},
		"oncegate_llm_tokens_spent_total":       {"kind=prompt": 300, "kind=completion": 120},
		"oncegate_llm_tokens_saved_total":       {"kind=prompt": 400, "kind=completion": 160},
		"oncegate_llm_tokens_estimated_total":   {"": 290},
		"oncegate_llm_cost_spent_usd_total":     {"": 0.0021},
		"oncegate_llm_cost_saved_usd_total":     {"": 0.0028},
		"oncegate_llm_answers_stored_total":     {"": 2},
		"oncegate_llm_answers_not_stored_total": {"": 1},
		"oncegate_llm_upstream_errors_total":    {"": 1},
	}

	// Two scrapes of the same snapshot report the same totals.
	for i := range 2 {
		f := scrape(t, base)
		check(t, f, first)
		for name := range first {
			if typ := f[name].GetType(); typ != dto.MetricType_COUNTER {
				t.Errorf("scrape %d: %s type = %v; want COUNTER", i, name, typ)
			}
		}
	}

	// The cache moves on: the next scrape shows the new totals, not their
	// sum with the old ones, and a new step appears.
	src.set(
		llmhook.StepStats{
			Namespace: "tenant-a", Step: "summarize",
			Requests: 20, Hits: 10, Shared: 1, Misses: 4, Bypassed: 2, BudgetDenied: 1, Invalid: 2,
			Stored: 3, NotStored: 1, Errors: 1,
			PromptTokens: 380, CompletionTokens: 150, EstimatedPromptTokens: 370,
			SavedPromptTokens: 1000, SavedCompletionTokens: 400,
			CostSpent: 0.0026, CostSaved: 0.007,
		},
		llmhook.StepStats{Namespace: "tenant-b", Step: "triage", Requests: 1, Misses: 1, PromptTokens: 7},
	)
	f := scrape(t, base)
	check(t, f, map[string]map[string]float64{
		"oncegate_llm_requests_total":       {"result=hit": 10, "result=miss": 4, "result=invalid": 2},
		"oncegate_llm_tokens_spent_total":   {"kind=prompt": 380, "kind=completion": 150},
		"oncegate_llm_tokens_saved_total":   {"kind=prompt": 1000, "kind=completion": 400},
		"oncegate_llm_cost_saved_usd_total": {"": 0.007},
	})
	b := labels{"pipeline": "tenant-b", "step": "triage"}
	if got := f.value(t, "oncegate_llm_requests_total", labels{"pipeline": "tenant-b", "step": "triage", "result": "miss"}); got != 1 {
		t.Errorf("tenant-b misses = %v; want 1", got)
	}
	if got := f.value(t, "oncegate_llm_cost_spent_usd_total", b); got != 0 {
		t.Errorf("tenant-b cost = %v; want 0", got)
	}
	if got := len(f["oncegate_llm_requests_total"].GetMetric()); got != 12 {
		t.Errorf("oncegate_llm_requests_total has %d series; want 12 (2 steps × 6 results)", got)
	}
	src.mu.Lock()
	calls := src.calls
	src.mu.Unlock()
	if calls != 3 {
		t.Errorf("LLMStats called %d times for 3 scrapes; want 3", calls)
	}
}

func TestLLMCollectorSumsRepeatedSteps(t *testing.T) {
	src := &llmSource{}
	src.set(
		llmhook.StepStats{Namespace: "n", Step: "s", Hits: 1, PromptTokens: 10, CostSpent: 0.5},
		llmhook.StepStats{Namespace: "n", Step: "t", Hits: 5},
		llmhook.StepStats{Namespace: "n", Step: "s", Hits: 2, PromptTokens: 30, CostSpent: 0.25},
	)
	m := ops.NewMetrics(ops.MetricsOptions{LLMStats: src.stats})
	f := scrape(t, startServer(t, m, nil, discardLogger()))
	s := labels{"pipeline": "n", "step": "s"}
	if got := f.value(t, "oncegate_llm_requests_total", labels{"pipeline": "n", "step": "s", "result": "hit"}); got != 3 {
		t.Errorf("hits = %v; want 3", got)
	}
	if got := f.value(t, "oncegate_llm_tokens_spent_total", labels{"pipeline": "n", "step": "s", "kind": "prompt"}); got != 40 {
		t.Errorf("prompt tokens = %v; want 40", got)
	}
	if got := f.value(t, "oncegate_llm_cost_spent_usd_total", s); got != 0.75 {
		t.Errorf("cost = %v; want 0.75", got)
	}
	if got := f.value(t, "oncegate_llm_requests_total", labels{"pipeline": "n", "step": "t", "result": "hit"}); got != 5 {
		t.Errorf("step t hits = %v; want 5", got)
	}
}

// A row the registry cannot expose (a label that is not UTF-8) is logged
// and left out; the rest of the scrape is served.
func TestLLMCollectorBadRowKeepsScrape(t *testing.T) {
	src := &llmSource{}
	src.set(
		llmhook.StepStats{Namespace: "ok", Step: "s", Hits: 1},
		llmhook.StepStats{Namespace: "bad\xff", Step: "s", Hits: 1},
	)
	var logs logbuf.Buffer
	m := ops.NewMetrics(ops.MetricsOptions{LLMStats: src.stats})
	m.AddPipeline("p")
	f := scrape(t, startServer(t, m, nil, slogTo(&logs)))
	if got := f.value(t, "oncegate_llm_requests_total", labels{"pipeline": "ok", "step": "s", "result": "hit"}); got != 1 {
		t.Errorf("hits = %v; want 1", got)
	}
	if _, ok := f["oncegate_triggers_total"]; !ok {
		t.Errorf("oncegate_triggers_total missing after a bad LLM row")
	}
	if !strings.Contains(logs.String(), "ops: metrics") {
		t.Errorf("log = %q; want the gathering error", logs.String())
	}
}

func TestWindowCollector(t *testing.T) {
	var mu sync.Mutex
	rows := []ops.WindowStats{
		{Pipeline: "alerts", Capacity: 1 << 20, Bytes: 8 << 20, Live: 1500, Hits: 42, Evictions: 3, Expired: 900},
		{Pipeline: "billing", Capacity: 1024, Bytes: 8192, Live: 2},
	}
	m := ops.NewMetrics(ops.MetricsOptions{WindowStats: func() []ops.WindowStats {
		mu.Lock()
		defer mu.Unlock()
		return append([]ops.WindowStats(nil), rows...)
	}})
	base := startServer(t, m, nil, discardLogger())

	alerts := labels{"pipeline": "alerts"}
	f := scrape(t, base)
	for name, want := range map[string]float64{
		"oncegate_window_live_keys":       1500,
		"oncegate_window_capacity_keys":   1 << 20,
		"oncegate_window_bytes":           8 << 20,
		"oncegate_window_hits_total":      42,
		"oncegate_window_evictions_total": 3,
		"oncegate_window_expired_total":   900,
	} {
		if got := f.value(t, name, alerts); got != want {
			t.Errorf("%s{pipeline=alerts} = %v; want %v", name, got, want)
		}
	}
	for name, typ := range map[string]dto.MetricType{
		"oncegate_window_live_keys":  dto.MetricType_GAUGE,
		"oncegate_window_hits_total": dto.MetricType_COUNTER,
	} {
		if got := f[name].GetType(); got != typ {
			t.Errorf("%s type = %v; want %v", name, got, typ)
		}
	}
	if got := f.value(t, "oncegate_window_live_keys", labels{"pipeline": "billing"}); got != 2 {
		t.Errorf("billing live = %v; want 2", got)
	}

	mu.Lock()
	rows[0].Live, rows[0].Hits = 1200, 50
	mu.Unlock()
	f = scrape(t, base)
	if got := f.value(t, "oncegate_window_live_keys", alerts); got != 1200 {
		t.Errorf("live after change = %v; want 1200", got)
	}
	if got := f.value(t, "oncegate_window_hits_total", alerts); got != 50 {
		t.Errorf("hits after change = %v; want 50 (the snapshot, not a sum)", got)
	}
}

// Recording from many goroutines while scraping loses nothing (and is
// clean under -race).
func TestConcurrentRecordAndScrape(t *testing.T) {
	const workers, each = 8, 500
	m := ops.NewMetrics(ops.MetricsOptions{})
	m.AddPipeline("p")
	base := startServer(t, m, nil, discardLogger())

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				m.AddInflight("p", 1)
				m.Trigger("p")
				m.Duplicate("p", outcome.GuardWindow)
				m.Effect("p", "file", ops.OutcomeDone, time.Millisecond)
				m.AddInflight("p", -1)
			}
		})
	}
	for range 3 {
		scrape(t, base)
	}
	wg.Wait()

	f := scrape(t, base)
	for _, tt := range []struct {
		name   string
		labels labels
		want   float64
	}{
		{"oncegate_triggers_total", labels{"pipeline": "p"}, workers * each},
		{"oncegate_duplicates_total", labels{"pipeline": "p", "guard": "window"}, workers * each},
		{"oncegate_effect_seconds", labels{"pipeline": "p", "sink": "file"}, workers * each},
		{"oncegate_inflight", labels{"pipeline": "p"}, 0},
	} {
		if got := f.value(t, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s{%s} = %v; want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}

// TestBuildInfo: the build is exposed as oncegate_build_info 1 with its
// version, commit and Go version.
func TestBuildInfo(t *testing.T) {
	m := ops.NewMetrics(ops.MetricsOptions{})
	f := scrape(t, startServer(t, m, nil, discardLogger()))
	mf := f["oncegate_build_info"]
	if mf == nil || len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("oncegate_build_info: %v", mf)
	}
	labels := map[string]string{}
	for _, l := range mf.GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["goversion"] != runtime.Version() || labels["version"] == "" || labels["commit"] == "" {
		t.Errorf("labels %v", labels)
	}
}

// TestLLMSeriesBeforeFirstCall: a step's LLM series exist at 0, labelled
// by pipeline as every other series, before its first model call.
func TestLLMSeriesBeforeFirstCall(t *testing.T) {
	m := ops.NewMetrics(ops.MetricsOptions{LLMStats: func() []llmhook.StepStats { return nil }})
	m.AddPipeline("alerts")
	m.AddStep("alerts", "triage")
	f := scrape(t, startServer(t, m, nil, discardLogger()))
	for _, name := range []string{"oncegate_llm_requests_total", "oncegate_llm_tokens_spent_total", "oncegate_llm_cost_spent_usd_total"} {
		if n := f.count(name, "pipeline", "alerts"); n == 0 {
			t.Errorf("%s{pipeline=\"alerts\"}: no series before the first call", name)
		}
	}
	if got := f.value(t, "oncegate_llm_requests_total", labels{"pipeline": "alerts", "step": "triage", "result": "miss"}); got != 0 {
		t.Errorf("misses = %v; want 0", got)
	}
}

// TestReadyGauge: oncegate_ready follows the readiness function on every
// scrape.
func TestReadyGauge(t *testing.T) {
	var notReady atomic.Bool
	m := ops.NewMetrics(ops.MetricsOptions{Ready: func() error {
		if notReady.Load() {
			return errors.New("not connected")
		}
		return nil
	}})
	base := startServer(t, m, nil, discardLogger())
	for _, tt := range []struct {
		notReady bool
		want     float64
	}{{false, 1}, {true, 0}, {false, 1}} {
		notReady.Store(tt.notReady)
		if got := scrape(t, base).value(t, "oncegate_ready", labels{}); got != tt.want {
			t.Errorf("oncegate_ready with not ready %v = %v; want %v", tt.notReady, got, tt.want)
		}
	}
	if _, ok := scrape(t, startServer(t, ops.NewMetrics(ops.MetricsOptions{}), nil, discardLogger()))["oncegate_ready"]; ok {
		t.Errorf("oncegate_ready exposed without a Ready function")
	}
}
