// Command proxy measures what Oncegate's OpenAI-compatible proxy adds to a
// model call, and what a cache hit through it costs next to the call it
// saves. Every call is made by the real go-openai client over loopback
// HTTP to the offline stand-in model, answering after -latency:
//
//   - direct: the client calls the stand-in, no proxy;
//   - proxy, miss: the client calls the proxy (client key check, intent
//     header, the LLM cache's lookup, single flight and store, relay), which
//     calls the stand-in; each call a new prompt;
//   - proxy, hit: the same prompt again, answered from the cache.
//
// Direct and proxied calls alternate in blocks (-rounds), so that a machine
// that slows down mid-run slows both. Each row gives the latency's p50 and
// p99 over one worker's calls and the process's CPU per call (client, proxy
// and stand-in together, all in this process); "added by the proxy" is the
// proxy's row less the direct row. Plain and streamed calls are measured
// apart, streams twice: with the answer's events written at once (the
// worst case for the proxy, which relays, judges and stores them in one
// burst on the same cores as the model and the client) and with them -pace
// apart, as a model streams the tokens it makes (the proxy judges each as
// it comes, and adds only its last step after the model's [DONE]). The
// targets: the proxy adds at most 1 ms at p50, and a hit takes at most 10%
// of a direct call to a 20 ms model.
//
//	go run -C bench ./proxy                       # 20 ms model, 400 calls per row
//	go run -C bench ./proxy -n 100 -rounds 2      # the short form
//	go run -C bench ./proxy -store kv             # the cache on JetStream KV (an embedded server)
//
// It exits non-zero when a target is missed and -check is set.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/procstat"
	"github.com/oncegate/oncegate/internal/proxy"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/badgerstore"
	"github.com/oncegate/oncegate/pkg/llmcache/jsstore"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "proxy:", err)
		os.Exit(1)
	}
}

const clientKey = "sk-bench-0123456789abcdefghijklmnop"

func run() error {
	var (
		latency = flag.Duration("latency", 20*time.Millisecond, "the stand-in model's answer latency")
		n       = flag.Int("n", 400, "calls per row")
		rounds  = flag.Int("rounds", 4, "blocks the direct and proxied calls alternate in")
		store   = flag.String("store", "badger", "the cache's store: badger (a temporary directory) or kv (JetStream KV on an embedded server)")
		pace    = flag.Duration("pace", time.Millisecond, "the wait between a paced stream's events")
		check   = flag.Bool("check", false, "exit non-zero when a target is missed")
		profile = flag.String("cpuprofile", "", "write a CPU profile of the run to `file`")
	)
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *rounds < 1 || *n < *rounds {
		return errors.New("-n must be at least -rounds, and -rounds at least 1")
	}

	dir, err := os.MkdirTemp("", "bench-proxy")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cache, stopStore, err := openCache(dir, *store)
	if err != nil {
		return err
	}
	defer stopStore()
	defer cache.Close()

	keysPath := filepath.Join(dir, "keys")
	if err := os.WriteFile(keysPath, []byte("bench "+clientKey+"\n"), 0o600); err != nil {
		return err
	}
	keys, err := proxy.LoadKeys(keysPath)
	if err != nil {
		return err
	}
	// One stand-in writes a stream's events at once, the way a cached
	// answer replays; the other a -pace apart, the way a model streams
	// the tokens it makes. Each has its own proxy, over the one cache.
	var paths [2]path
	for i, pace := range []time.Duration{0, *pace} {
		p, stop, err := startPath(cache, keys, standin.Options{Latency: *latency, TokenInterval: pace})
		if err != nil {
			return err
		}
		defer stop()
		paths[i] = p
	}
	calls := func() int64 { return paths[0].model.Stats().Completions + paths[1].model.Stats().Completions }

	fmt.Printf("bench/proxy: stand-in model answering in %v; %d calls per row in %d alternating blocks, one worker; go-openai client; cache on %s\n\n",
		*latency, *n, *rounds, *store)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "call\tp50\tp99\tCPU per call\t")
	missed := false
	for _, k := range []struct {
		kind   string
		stream bool
		p      path
	}{
		{"plain", false, paths[0]},
		{"streamed", true, paths[0]},
		{fmt.Sprintf("streamed, paced %v", *pace), true, paths[1]},
	} {
		kind, stream, direct, proxied := k.kind, k.stream, k.p.direct, k.p.proxied
		var d, p []time.Duration
		var dCPU, pCPU time.Duration
		per := *n / *rounds
		for r := range *rounds {
			lat, cpu, err := block(direct, stream, fmt.Sprintf("%s-direct-%d", kind, r), per, false)
			if err != nil {
				return fmt.Errorf("direct: %w", err)
			}
			d, dCPU = append(d, lat...), dCPU+cpu
			lat, cpu, err = block(proxied, stream, fmt.Sprintf("%s-proxy-%d", kind, r), per, false)
			if err != nil {
				return fmt.Errorf("proxy: %w", err)
			}
			p, pCPU = append(p, lat...), pCPU+cpu
		}
		hits, hCPU, err := block(proxied, stream, kind+"-proxy-0", per*(*rounds), true)
		if err != nil {
			return fmt.Errorf("proxy, hit: %w", err)
		}
		dp50, dp99, pp50, pp99 := pct(d, 50), pct(d, 99), pct(p, 50), pct(p, 99)
		hp50, hp99 := pct(hits, 50), pct(hits, 99)
		calls := time.Duration(len(d))
		fmt.Fprintf(tw, "%s, direct\t%v\t%v\t%v\t\n", kind, ms(dp50), ms(dp99), us(dCPU/calls))
		fmt.Fprintf(tw, "%s, proxy, miss\t%v\t%v\t%v\t\n", kind, ms(pp50), ms(pp99), us(pCPU/calls))
		fmt.Fprintf(tw, "%s, added by the proxy\t%v\t%v\t%v\t\n", kind, ms(pp50-dp50), ms(pp99-dp99), us((pCPU-dCPU)/calls))
		fmt.Fprintf(tw, "%s, proxy, hit\t%v\t%v\t%v\t\n", kind, ms(hp50), ms(hp99), us(hCPU/time.Duration(len(hits))))
		ratio := float64(hp50) / float64(dp50)
		fmt.Fprintf(tw, "%s, hit / direct (p50)\t%.1f%%\t\t\t\n", kind, 100*ratio)
		if pp50-dp50 > time.Millisecond || ratio > 0.10 {
			missed = true
		}
	}
	tw.Flush()
	fmt.Printf("\ntargets: added p50 <= 1 ms; a hit's p50 <= 10%% of a direct call's. The model answered %d calls.\n", calls())
	if missed {
		fmt.Println("a target was missed")
		if *check {
			return errors.New("a target was missed")
		}
	}
	return nil
}

// openCache opens the cache on the store named, and returns a function
// that stops what the store needed.
func openCache(dir, store string) (*llmcache.Cache, func(), error) {
	switch store {
	case "badger":
		c, err := badgerstore.Open(filepath.Join(dir, "cache"), llmcache.Options{})
		return c, func() {}, err
	case "kv":
		s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: filepath.Join(dir, "nats"), NoSigs: true})
		if err != nil {
			return nil, nil, err
		}
		s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			return nil, nil, errors.New("nats server not ready")
		}
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			return nil, nil, err
		}
		stop := func() { nc.Close(); s.Shutdown(); s.WaitForShutdown() }
		js, err := jetstream.New(nc)
		if err != nil {
			stop()
			return nil, nil, err
		}
		st, err := jsstore.New(context.Background(), js, jsstore.Options{})
		if err != nil {
			stop()
			return nil, nil, err
		}
		c, err := llmcache.NewStore(st, llmcache.Options{})
		if err != nil {
			stop()
		}
		return c, stop, err
	}
	return nil, nil, fmt.Errorf("unknown -store %q: badger or kv", store)
}

// path is a stand-in model and a proxy to it, and a client of each.
type path struct {
	model           *standin.Server
	direct, proxied *openai.Client
}

// startPath starts a stand-in with opts and a proxy to it over cache.
func startPath(cache *llmcache.Cache, keys *proxy.Keys, opts standin.Options) (path, func(), error) {
	model, err := standin.New(opts)
	if err != nil {
		return path{}, nil, err
	}
	modelURL, stopModel, err := model.Start("127.0.0.1:0")
	if err != nil {
		return path{}, nil, err
	}
	upstream := &http.Transport{MaxIdleConnsPerHost: 16}
	srv, err := proxy.New(proxy.Options{
		Config: &config.Proxy{Listen: "127.0.0.1:0", MaxBodyBytes: config.DefaultProxyMaxBody},
		Keys:   keys, Cache: cache, Upstream: upstream, BaseURL: modelURL, APIKey: "sk-provider",
	})
	if err != nil {
		stopModel()
		return path{}, nil, err
	}
	addr, err := srv.Start()
	if err != nil {
		stopModel()
		return path{}, nil, err
	}
	stop := func() {
		srv.Shutdown(context.Background())
		upstream.CloseIdleConnections()
		stopModel()
	}
	return path{model: model, direct: newClient(modelURL, "sk-provider"), proxied: newClient("http://"+addr+"/v1", clientKey)}, stop, nil
}

func newClient(url, key string) *openai.Client {
	cfg := openai.DefaultConfig(key)
	cfg.BaseURL = url
	cfg.HTTPClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	return openai.NewClientWithConfig(cfg)
}

// block makes n calls one after another and returns their latencies and
// the process's CPU time over them. Each call asks a prompt of its own
// (prefix and index), or, with same, the prompt of index 0 every time.
func block(c *openai.Client, stream bool, prefix string, n int, same bool) ([]time.Duration, time.Duration, error) {
	ctx := context.Background()
	lat := make([]time.Duration, 0, n)
	cpu0 := procstat.CPU()
	for i := range n {
		q := fmt.Sprintf("%s: call %d", prefix, i)
		if same {
			q = prefix + ": call 0"
		}
		req := openai.ChatCompletionRequest{
			Model:    "gpt-4o-mini",
			Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: q}},
			Stream:   stream,
		}
		if stream && os.Getenv("BENCH_USAGE") != "" {
			req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
		}
		t0 := time.Now()
		if stream {
			st, err := c.CreateChatCompletionStream(ctx, req)
			if err != nil {
				return nil, 0, err
			}
			for {
				_, err := st.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					st.Close()
					return nil, 0, err
				}
			}
			st.Close()
		} else if _, err := c.CreateChatCompletion(ctx, req); err != nil {
			return nil, 0, err
		}
		lat = append(lat, time.Since(t0))
	}
	return lat, procstat.CPU() - cpu0, nil
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/1e3) }
