// Command ingress measures the webhook ingress against the receiver a user
// would write instead, in the same run, on the same embedded NATS server
// and the same JetStream stream:
//
//   - raw: a bare net/http handler that reads the body, publishes it with
//     Nats-Msg-Id set to X-GitHub-Delivery, waits for the PubAck and
//     answers 200. It checks no signature, no content type, no JSON, no
//     limits. It is the bar.
//   - ingress: Oncegate's ingress (internal/ingress) with one github
//     source: it reads the body under its limit, checks X-Hub-Signature-256
//     in constant time, checks the JSON, publishes with the same id and
//     headers of its own, and answers 200 after the PubAck.
//
// Concurrent clients (-clients, each with its own keep-alive connection)
// send signed GitHub push deliveries (about 1.7 KB, signed before the clock
// starts: signing is the provider's work) over loopback. The two cells
// take turns for -reps rounds, after a warm-up: each round, each cell sends
// -n requests in -slices slices, the cells alternating slice by slice so
// that other load on the machine weighs on both alike. The
// table gives each cell's median requests/s over the rounds and the
// p50/p99 latency of all its requests, and the ratio of the ingress to raw
// (median of the per-round ratios). After each cell the stream is asked
// how many messages the cell's subject holds: it must equal the number of
// 2xx answers, or the program fails.
//
//	go run ./bench/ingress                       # 20,000 requests per cell, 5 rounds, 16 clients: about a minute
//	go run ./bench/ingress -n 2000 -reps 1       # quick (CI)
//
// It exits non-zero when a 2xx is missing from the stream, or when the
// ingress's ratio to raw is under -min-ratio (0.8 by default).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ingress"
	"github.com/oncegate/oncegate/internal/natsrun"
)

const secret = "bench-webhook-secret"

func main() {
	n := flag.Int("n", 20000, "requests per cell and round")
	nslices := flag.Int("slices", 10, "slices each round is cut into, the cells taking turns")
	reps := flag.Int("reps", 5, "rounds")
	clients := flag.Int("clients", 16, "concurrent clients, one keep-alive connection each")
	minRatio := flag.Float64("min-ratio", 0.8, "fail when the ingress's requests/s are under this share of raw's")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to `file`")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/ingress:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	if err := run(*n, *nslices, *reps, *clients, *minRatio); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench/ingress:", err)
		os.Exit(1)
	}
}

type cell struct {
	name    string
	url     string
	subject string
	rates   []float64
	lat     []time.Duration
	ok      int64
	stored  uint64
}

func run(n, nslices, reps, clients int, minRatio float64) error {
	tmp, err := os.MkdirTemp("", "oncegate-bench-ingress-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	log := slog.New(slog.DiscardHandler)
	srv, err := natsrun.StartEmbedded(config.Embedded{
		Listen: "127.0.0.1:0", StoreDir: filepath.Join(tmp, "nats"), SyncInterval: config.DefaultSyncInterval,
	}, tmp, log)
	if err != nil {
		return err
	}
	defer srv.Shutdown(context.Background())
	connect := func(name string) (*nats.Conn, jetstream.JetStream, error) {
		nc, err := nats.Connect(srv.ClientURL(), nats.Name(name))
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		return nc, js, err
	}
	ctx := context.Background()
	nc, js, err := connect("bench-admin")
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "BENCH", Subjects: []string{"bench.>"}, Duplicates: 2 * time.Minute, Storage: jetstream.FileStorage,
	}); err != nil {
		return err
	}

	// raw: the receiver a user would write.
	rawNC, rawJS, err := connect("bench-raw")
	if err != nil {
		return err
	}
	defer rawNC.Close()
	rawURL, stopRaw, err := serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		_, err = rawJS.PublishMsg(ctx, &nats.Msg{Subject: "bench.raw", Data: body, Header: nats.Header{
			nats.MsgIdHdr: {r.Header.Get(ingress.HeaderGitHubDelivery)},
		}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	if err != nil {
		return err
	}
	defer stopRaw()

	// ingress: Oncegate's.
	inNC, inJS, err := connect("bench-ingress")
	if err != nil {
		return err
	}
	defer inNC.Close()
	src := config.Source{Name: "github", Kind: config.KindGitHub, Subject: "bench.ingress", SecretEnv: "BENCH_SECRET"}
	c := config.Default()
	c.Ingress.Listen = "127.0.0.1:0"
	c.Ingress.Sources = []config.Source{src}
	c.Ingress.MaxInFlight = 4 * clients
	in, err := ingress.New(ingress.Options{Config: &c.Ingress, JetStream: inJS, Logger: log,
		Getenv: func(string) string { return secret }})
	if err != nil {
		return err
	}
	addr, err := in.Start()
	if err != nil {
		return err
	}
	defer in.Shutdown(context.Background())

	cells := []*cell{
		{name: "raw net/http + PubAck", url: rawURL + "/", subject: "bench.raw"},
		{name: "Oncegate ingress", url: "http://" + addr + "/hooks/github", subject: "bench.ingress"},
	}
	fmt.Printf("bench/ingress: %d clients, %d requests per cell per round, %d rounds; NATS embedded on loopback, sync_interval %s\n",
		clients, n, reps, config.DefaultSyncInterval)
	seq := 0
	// A warm-up for each cell (connections, the stream's first blocks),
	// counted in the stream check but not in the figures.
	for _, cl := range cells {
		reqs, err := signed(src, min(n, 2000), &seq)
		if err != nil {
			return err
		}
		_, _, ok, err := load(cl.url, reqs, clients)
		if err != nil {
			return fmt.Errorf("%s: warm-up: %w", cl.name, err)
		}
		cl.ok += ok
	}
	var ratios []float64
	for round := range reps {
		// Each round interleaves the cells in slices of n/nslices requests,
		// taking turns going first, so that whatever else the machine is
		// doing weighs on both alike.
		var rate [2]float64
		var took [2]time.Duration
		var sent [2]int
		per := max(1, n/nslices)
		for k := range nslices {
			order := []int{0, 1}
			if k%2 == 1 {
				order = []int{1, 0}
			}
			for _, i := range order {
				cl := cells[i]
				reqs, err := signed(src, per, &seq)
				if err != nil {
					return err
				}
				d, lat, ok, err := load(cl.url, reqs, clients)
				if err != nil {
					return fmt.Errorf("%s: %w", cl.name, err)
				}
				took[i] += d
				sent[i] += len(reqs)
				cl.lat = append(cl.lat, lat...)
				cl.ok += ok
			}
		}
		for i, cl := range cells {
			rate[i] = float64(sent[i]) / took[i].Seconds()
			cl.rates = append(cl.rates, rate[i])
			stored, err := count(ctx, js, cl.subject)
			if err != nil {
				return err
			}
			cl.stored = stored
			if stored != uint64(cl.ok) {
				return fmt.Errorf("%s: %d requests answered 2xx, the stream holds %d of its triggers", cl.name, cl.ok, stored)
			}
		}
		ratios = append(ratios, rate[1]/rate[0])
		fmt.Printf("  round %d: raw %.0f req/s, ingress %.0f req/s, ratio %.2f\n", round+1, rate[0], rate[1], rate[1]/rate[0])
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cell\treq/s (median)\tp50\tp99\t2xx\tin stream\t")
	for _, cl := range cells {
		slices.Sort(cl.lat)
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%d\t%d\t\n", cl.name, median(cl.rates), pct(cl.lat, 0.50), pct(cl.lat, 0.99), cl.ok, cl.stored)
	}
	tw.Flush()
	ratio := median(ratios)
	fmt.Printf("ingress / raw: %.2f (median of %d rounds; want ≥ %.2f); every 2xx is in the stream. The machine may be shared: compare ratios, not absolute figures.\n",
		ratio, reps, minRatio)
	if ratio < minRatio {
		return fmt.Errorf("the ingress ran at %.2f of raw, under %.2f", ratio, minRatio)
	}
	return nil
}

// serve runs h on a loopback port.
func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	return "http://" + ln.Addr().String(), func() { hs.Close() }, nil
}

type request struct {
	h    http.Header
	body []byte
}

// signed makes n GitHub push deliveries, each with its own delivery id and
// commit, signed as GitHub signs them.
func signed(src config.Source, n int, seq *int) ([]request, error) {
	out := make([]request, n)
	for i := range out {
		*seq++
		id := fmt.Sprintf("bench-%08d", *seq)
		body, _ := json.Marshal(map[string]any{
			"ref": "refs/heads/main", "before": fmt.Sprintf("%040x", *seq-1), "after": fmt.Sprintf("%040x", *seq),
			"repository": map[string]any{"id": 1296269, "full_name": "octo-org/octo-repo", "private": false,
				"owner": map[string]any{"login": "octo-org", "id": 6811672}},
			"pusher": map[string]any{"name": "octocat", "email": "mona@github.com"},
			"sender": map[string]any{"login": "octocat", "id": 583231},
			"commits": []any{map[string]any{
				"id": fmt.Sprintf("%040x", *seq), "message": "Update README.md", "timestamp": "2026-11-29T07:21:03-08:00",
				"author":   map[string]any{"name": "Mona Octocat", "email": "mona@github.com", "username": "octocat"},
				"modified": []string{"README.md"}, "added": []string{}, "removed": []string{},
				"url": "https://github.com/octo-org/octo-repo/commit/" + fmt.Sprintf("%040x", *seq),
			}},
			"head_commit": map[string]any{"id": fmt.Sprintf("%040x", *seq), "message": "Update README.md"},
			"compare":     "https://github.com/octo-org/octo-repo/compare/a...b",
		})
		h, err := ingress.Sign(src, []byte(secret), body, time.Now(), id, "push")
		if err != nil {
			return nil, err
		}
		out[i] = request{h, body}
	}
	return out, nil
}

// load sends reqs from clients goroutines, each with its own keep-alive
// connection, and returns the time they took, each request's latency and the 2xx
// count. Anything but a 2xx is an error: nothing here should be refused.
func load(url string, reqs []request, clients int) (time.Duration, []time.Duration, int64, error) {
	var next atomic.Int64
	var ok atomic.Int64
	lat := make([]time.Duration, len(reqs))
	var wg sync.WaitGroup
	var errOnce sync.Once
	var firstErr error
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableCompression: true}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			for {
				i := int(next.Add(1)) - 1
				if i >= len(reqs) {
					return
				}
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(reqs[i].body))
				req.Header = reqs[i].h
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode/100 != 2 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				lat[i] = time.Since(t0)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if firstErr != nil {
		return 0, nil, 0, errors.Join(errors.New("a request failed"), firstErr)
	}
	return took, lat, ok.Load(), nil
}

func count(ctx context.Context, js jetstream.JetStream, subject string) (uint64, error) {
	st, err := js.Stream(ctx, "BENCH")
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, err
	}
	return info.State.Subjects[subject], nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))].Round(time.Microsecond)
}
