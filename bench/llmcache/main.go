// Command llmcache measures what a cache hit costs next to the model call
// it saves. Every call goes through the real go-openai client to the
// offline stand-in model over loopback HTTP, answering after -latency:
//
//   - direct: the client with no cache, the stand-in answering each call;
//   - miss:   through the cache, each call a new prompt (key, call, store);
//   - hit:    through the cache, the same prompt, answered from Badger.
//
// Each row reports p50 and p99 latency from one worker, then calls per
// second with -workers concurrent workers, and the hit's p50 as a share
// of the direct call's (the target: under 5% at 1 ms).
//
//	go run -C bench ./llmcache                    # 1 ms model, 3s per cell
//	go run -C bench ./llmcache -latency 50ms -dur 5s
//
// The cache lives in a temporary directory removed at exit.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/badgerstore"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "llmcache:", err)
		os.Exit(1)
	}
}

type result struct {
	name     string
	p50, p99 time.Duration
	perSec   float64
}

func run() error {
	var (
		latency = flag.Duration("latency", time.Millisecond, "the stand-in model's answer latency")
		dur     = flag.Duration("dur", 3*time.Second, "measured time per cell")
		workers = flag.Int("workers", 16, "concurrent workers for the throughput column")
	)
	flag.Parse()

	model, err := standin.New(standin.Options{Latency: *latency})
	if err != nil {
		return err
	}
	url, stop, err := model.Start("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer stop()
	dir, err := os.MkdirTemp("", "oncegate-bench-llmcache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cache, err := badgerstore.Open(dir, llmcache.Options{})
	if err != nil {
		return err
	}
	defer cache.Close()

	tr := &http.Transport{MaxIdleConnsPerHost: 2 * *workers}
	defer tr.CloseIdleConnections()
	newClient := func(hc *http.Client) *openai.Client {
		cfg := openai.DefaultConfig("sk-bench")
		cfg.BaseURL = url
		cfg.HTTPClient = hc
		return openai.NewClientWithConfig(cfg)
	}
	direct := newClient(&http.Client{Transport: tr})
	cached := newClient(cache.HTTPClient(&http.Client{Transport: tr}))

	var seq atomic.Int64
	same := request("Disk /var is 93% full on db-2; inodes at 71%.")
	fresh := func() openai.ChatCompletionRequest {
		return request(fmt.Sprintf("Disk /var is 93%% full on db-%d.", seq.Add(1)))
	}
	ctx := context.Background()
	if _, err := cached.CreateChatCompletion(ctx, same); err != nil {
		return err
	}

	cells := []struct {
		name string
		call func() error
	}{
		{"direct", func() error { _, err := direct.CreateChatCompletion(ctx, same); return err }},
		{"miss", func() error { _, err := cached.CreateChatCompletion(ctx, fresh()); return err }},
		{"hit", func() error { _, err := cached.CreateChatCompletion(ctx, same); return err }},
	}
	var results []result
	for _, c := range cells {
		r := result{name: c.name}
		lat, err := latencies(c.call, *dur/2)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
		if r.perSec, err = throughput(c.call, *workers, *dur/2); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		results = append(results, r)
	}

	fmt.Printf("go-openai → stand-in model answering in %v, loopback HTTP; %d workers for calls/s\n\n", *latency, *workers)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "path\tp50\tp99\tcalls/s\tp50 / direct p50\t")
	for _, r := range results {
		fmt.Fprintf(w, "%s\t%v\t%v\t%.0f\t%.1f%%\t\n", r.name, r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond),
			r.perSec, 100*float64(r.p50)/float64(results[0].p50))
	}
	w.Flush()
	s := llmhook.Stats(cache)[0]
	fmt.Printf("\ncache: %d hits, %d misses, %d stored; the stand-in answered %d calls (direct and misses)\n", s.Hits, s.Misses, s.Stored, model.Stats().Completions)
	return nil
}

func request(prompt string) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: "You triage alerts. Answer with a severity and one line."},
			{Role: openai.ChatMessageRoleUser, Content: prompt},
		},
		Temperature: 0.2,
	}
}

// latencies calls call from one goroutine for d and returns the sorted
// latencies.
func latencies(call func() error, d time.Duration) ([]time.Duration, error) {
	var lat []time.Duration
	for end := time.Now().Add(d); time.Now().Before(end) || len(lat) < 100; {
		t0 := time.Now()
		if err := call(); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return lat, nil
}

// throughput calls call from n goroutines for d and returns calls per
// second.
func throughput(call func() error, n int, d time.Duration) (float64, error) {
	var calls atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for range n {
		wg.Go(func() {
			for time.Now().Before(end) {
				if err := call(); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				calls.Add(1)
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return float64(calls.Load()) / time.Since(start).Seconds(), nil
}
