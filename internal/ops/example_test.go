package ops_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/ops"
	"github.com/oncegate/oncegate/internal/outcome"
)

func ExampleMetrics() {
	m := ops.NewMetrics(ops.MetricsOptions{
		// Normally llmhook.Stats of the cache.
		LLMStats: func() []llmhook.StepStats {
			return []llmhook.StepStats{{Namespace: "billing", Step: "summarize", Requests: 3, Hits: 2, Misses: 1}}
		},
	})
	m.AddPipeline("billing") // every guard's series now exists at 0
	m.Trigger("billing")
	m.Trigger("billing")
	m.Duplicate("billing", outcome.GuardLedger)
	m.Effect("billing", "http", ops.OutcomeDone, 120*time.Millisecond)

	fams, err := m.Registry().Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "oncegate_duplicates_total" && f.GetName() != "oncegate_llm_requests_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			fmt.Print(f.GetName())
			for _, l := range s.GetLabel() {
				fmt.Printf(" %s=%s", l.GetName(), l.GetValue())
			}
			fmt.Println("", s.GetCounter().GetValue())
		}
	}
	// Output:
	// oncegate_duplicates_total guard=ledger pipeline=billing 1
	// oncegate_duplicates_total guard=stream pipeline=billing 0
	// oncegate_duplicates_total guard=window pipeline=billing 0
	// oncegate_llm_requests_total pipeline=billing result=budget_denied step=summarize 0
	// oncegate_llm_requests_total pipeline=billing result=bypass step=summarize 0
	// oncegate_llm_requests_total pipeline=billing result=hit step=summarize 2
	// oncegate_llm_requests_total pipeline=billing result=invalid step=summarize 0
	// oncegate_llm_requests_total pipeline=billing result=miss step=summarize 1
	// oncegate_llm_requests_total pipeline=billing result=shared step=summarize 0
}

func ExampleServer() {
	var connected atomic.Bool
	ready := func() error {
		if !connected.Load() {
			return errors.New("not connected to NATS")
		}
		return nil
	}
	s := ops.NewServer("127.0.0.1:0", ops.NewMetrics(ops.MetricsOptions{}), ready, slog.Default())
	addr, err := s.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown(context.Background())

	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	probe := func() {
		resp, err := c.Get("http://" + addr + "/readyz")
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d %s", resp.StatusCode, body)
	}
	probe()
	connected.Store(true)
	probe()
	// Output:
	// 503 not ready: not connected to NATS
	// 200 ok
}
