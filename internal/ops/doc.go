// Package ops exposes Oncegate to its operators: Prometheus metrics on a
// registry of their own, and an HTTP server for /metrics, /healthz and
// /readyz.
//
// # Usage
//
//	m := ops.NewMetrics(ops.MetricsOptions{LLMStats: cache.Stats, WindowStats: windows})
//	m.AddPipeline("billing")           // its series exist at 0 from now on
//	m.AddSink("billing", "http")
//	...
//	m.Trigger("billing")
//	m.Duplicate("billing", outcome.GuardLedger)
//	m.Effect("billing", "http", ops.OutcomeDone, took)
//
//	srv := ops.NewServer(cfg.Metrics.Listen, m, consumer.Ready, logger)
//	addr, err := srv.Start()
//	...
//	defer srv.Shutdown(ctx)
//
// Callers never spell a label value: guards, claim statuses, outcomes,
// dead-letter reasons and ack kinds are typed constants ([outcome.Guard],
// [ClaimStatus], [Outcome], [outcome.Reason], [Ack]). A value outside the constants
// is recorded as "other", so a bug costs one series, not an unbounded
// number. The pipeline, sink and step labels come from the configuration
// (names and the sink's kind, never a URL or subject).
//
// # Metrics
//
// Counted by the consumer through the methods of [Metrics]:
//
//   - oncegate_triggers_total{pipeline}: triggers received, redeliveries included.
//   - oncegate_duplicates_total{pipeline,guard}: duplicates dropped by the
//     window, the ledger, or the stream (a PubAck marked duplicate).
//   - oncegate_ledger_claims_total{pipeline,status}: new, committed, held,
//     taken_over, failed.
//   - oncegate_effects_total{pipeline,sink,outcome}: done, duplicate, retry, dead.
//   - oncegate_effect_seconds{pipeline,sink}: effect attempts, 1ms to 30s buckets.
//   - oncegate_step_seconds{pipeline,step}: model steps, 5ms to 2m buckets.
//   - oncegate_dead_letters_total{pipeline,reason}: invalid_json, too_large,
//     missing_field, poison, exhausted, permanent_effect, budget.
//   - oncegate_acks_total{pipeline,kind}: ack, nak, term, in_progress.
//   - oncegate_pending_leases{pipeline} and oncegate_inflight{pipeline}: gauges.
//   - oncegate_redriven_total{pipeline,reason}: dead letters a person
//     redrove (package admin), by the reason they were dead-lettered for.
//
// Read at scrape time from [MetricsOptions.LLMStats], per pipeline (the cache namespace) and step, at 0 for every step AddStep named:
// oncegate_llm_requests_total{result} (hit, shared, miss, bypass,
// budget_denied, invalid), oncegate_llm_tokens_spent_total{kind} and
// oncegate_llm_tokens_saved_total{kind} (prompt, completion),
// oncegate_llm_tokens_estimated_total, oncegate_llm_cost_spent_usd_total,
// oncegate_llm_cost_saved_usd_total, oncegate_llm_answers_stored_total,
// oncegate_llm_answers_not_stored_total and oncegate_llm_upstream_errors_total.
//
// Read at scrape time from [MetricsOptions.WindowStats], per pipeline:
// oncegate_window_live_keys, oncegate_window_capacity_keys,
// oncegate_window_bytes, oncegate_window_hits_total,
// oncegate_window_evictions_total and oncegate_window_expired_total.
//
// Registered on the same registry (Metrics.Registry) by package ingress
// when the webhook ingress runs, per source: oncegate_ingress_requests_total
// {source,outcome}, oncegate_ingress_request_duration_seconds{source},
// oncegate_ingress_triggers_total{source,result} and
// oncegate_ingress_in_flight{source}.
//
// The scrape-time figures are cumulative snapshots exposed as they are,
// so a scrape never adds anything twice. The registry also carries the
// go_* and process_* collectors.
//
// # Security
//
// The endpoints have no authentication; the configured default address is
// loopback. Metric labels hold only configured names, and /readyz shows the
// ready func's error text, which must therefore hold no secrets.
//
// # Concurrency
//
// [Metrics] and [Server] are safe for concurrent use by multiple
// goroutines. [Server.Start] serves in one goroutine, which
// [Server.Shutdown] stops and waits for.
package ops
