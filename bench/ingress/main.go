// Command ingress measures the webhook ingress against the receiver a user
// would write instead, in the same run, on the same embedded NATS server
// and the same JetStream stream, in two pairs of cells:
//
//   - raw: a bare net/http handler that reads the body, publishes it with
//     Nats-Msg-Id set to X-GitHub-Delivery, waits for the PubAck and
//     answers 200. It checks no signature, no content type, no JSON, no
//     limits. It is the bar.
//   - ingress: Oncegate's ingress (internal/ingress) with one github
//     source: it reads the body under its limit, checks X-Hub-Signature-256
//     in constant time, checks the JSON, publishes with the same id and
//     headers of its own, and answers 200 after the PubAck.
//   - raw group: a bare handler that decodes an Alertmanager notification
//     of -group alerts and publishes each alert, with Nats-Msg-Id from its
//     fingerprint, startsAt and status, all at once (PublishMsgAsync),
//     answering 200 once every PubAck is in. The bar for groups.
//   - ingress group: Oncegate's ingress with one alertmanager source (bearer
//     token): it splits the notification into one trigger per alert (the
//     notification with that alert), publishes them all at once and
//     answers 200 once every PubAck is in.
//
// Concurrent clients (-clients, each with its own keep-alive connection)
// send signed GitHub push deliveries (about 1.7 KB, signed before the clock
// starts: signing is the provider's work), and notifications of -group
// alerts, over loopback. The cells take turns for -reps rounds, after a
// warm-up: each round, each cell sends -n requests in -slices slices, the
// cells alternating slice by slice so that other load on the machine
// weighs on all alike. The table gives each cell's median requests/s over
// the rounds and the p50/p99 latency of all its requests, and the ratio of
// each ingress cell to its raw cell (median of the per-round ratios). After
// each round the stream is asked how many messages each cell's subject
// holds: it must equal the number of 2xx answers times the triggers each
// carries, or the program fails.
//
//	go run -C bench ./ingress                       # 20,000 requests per cell, 5 rounds, 16 clients: a few minutes
//	go run -C bench ./ingress -n 2000 -reps 1       # quick (CI)
//
// It exits non-zero when a 2xx is missing from the stream, or when a ratio
// to raw is under -min-ratio (0.8 by default).
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
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/app"
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
	group := flag.Int("group", 10, "alerts per Alertmanager notification in the group cells (0: no group cells)")
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
	if err := run(*n, *nslices, *reps, *clients, *group, *minRatio); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench/ingress:", err)
		os.Exit(1)
	}
}

type cell struct {
	name    string
	url     string
	subject string
	per     int // triggers per request
	make    func(n int, seq *int) ([]request, error)
	rates   []float64
	lat     []time.Duration
	ok      int64
	stored  uint64
}

func run(n, nslices, reps, clients, group int, minRatio float64) error {
	tmp, err := os.MkdirTemp("", "oncegate-bench-ingress-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	log := slog.New(slog.DiscardHandler)
	srv, err := natsrun.StartEmbedded(tmp, natsrun.Options{
		Listen: "127.0.0.1:0", StoreDir: filepath.Join(tmp, "nats"), SyncInterval: natsrun.DefaultSyncInterval, Logger: log,
	})
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

	// raw group: the receiver a user would write for Alertmanager.
	rawGroupURL, stopRawGroup, err := serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n struct {
			Alerts []json.RawMessage `json:"alerts"`
		}
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		futures := make([]jetstream.PubAckFuture, 0, len(n.Alerts))
		for _, a := range n.Alerts {
			var id struct{ Fingerprint, StartsAt, Status string }
			if err := json.Unmarshal(a, &id); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			f, err := rawJS.PublishMsgAsync(&nats.Msg{Subject: "bench.raw-group", Data: a, Header: nats.Header{
				nats.MsgIdHdr: {id.Fingerprint + "/" + id.StartsAt + "/" + id.Status},
			}})
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			futures = append(futures, f)
		}
		timeout := time.After(5 * time.Second)
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			case <-timeout:
				http.Error(w, "no PubAck", http.StatusServiceUnavailable)
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	if err != nil {
		return err
	}
	defer stopRawGroup()

	// ingress: Oncegate's.
	inNC, inJS, err := connect("bench-ingress")
	if err != nil {
		return err
	}
	defer inNC.Close()
	src := config.Source{Name: "github", Kind: config.KindGitHub, Subject: "bench.ingress", SecretEnv: "BENCH_SECRET"}
	am := config.Source{Name: "alertmanager", Kind: config.KindAlertmanager, Auth: config.AuthBearer, Subject: "bench.ingress-group", SecretEnv: "BENCH_SECRET"}
	c := config.Default()
	c.Ingress.Listen = "127.0.0.1:0"
	c.Ingress.Sources = []config.Source{src, am}
	c.Ingress.MaxInFlight = 4 * clients
	io := app.IngressOptions(&c.Ingress)
	io.JetStream, io.Logger = inJS, log
	io.Getenv = func(string) string { return secret }
	in, err := ingress.New(io)
	if err != nil {
		return err
	}
	addr, err := in.Start()
	if err != nil {
		return err
	}
	defer in.Shutdown(context.Background())

	pushes := func(k int, seq *int) ([]request, error) { return signed(src, k, seq) }
	groups := func(k int, seq *int) ([]request, error) { return notifications(am, group, k, seq) }
	cells := []*cell{
		{name: "raw net/http + PubAck", url: rawURL + "/", subject: "bench.raw", per: 1, make: pushes},
		{name: "Oncegate ingress", url: "http://" + addr + "/hooks/github", subject: "bench.ingress", per: 1, make: pushes},
	}
	if group > 0 {
		cells = append(cells,
			&cell{name: fmt.Sprintf("raw group of %d + PubAcks", group), url: rawGroupURL + "/", subject: "bench.raw-group", per: group, make: groups},
			&cell{name: fmt.Sprintf("Oncegate ingress, group of %d", group), url: "http://" + addr + "/hooks/alertmanager", subject: "bench.ingress-group", per: group, make: groups})
	}
	fmt.Printf("bench/ingress: %d clients, %d requests per cell per round, %d rounds, groups of %d alerts; NATS embedded on loopback, sync_interval %s\n",
		clients, n, reps, group, config.DefaultSyncInterval)
	seq := 0
	// A warm-up for each cell (connections, the stream's first blocks),
	// counted in the stream check but not in the figures.
	for _, cl := range cells {
		reqs, err := cl.make(min(n, 2000), &seq)
		if err != nil {
			return err
		}
		_, _, ok, err := load(cl.url, reqs, clients)
		if err != nil {
			return fmt.Errorf("%s: warm-up: %w", cl.name, err)
		}
		cl.ok += ok
	}
	pairs := len(cells) / 2
	ratios := make([][]float64, pairs)
	for round := range reps {
		// Each round interleaves the cells in slices of n/nslices requests,
		// taking turns going first, so that whatever else the machine is
		// doing weighs on all alike.
		rate := make([]float64, len(cells))
		took := make([]time.Duration, len(cells))
		sent := make([]int, len(cells))
		per := max(1, n/nslices)
		for k := range nslices {
			for j := range cells {
				i := (j + k) % len(cells)
				if k%2 == 1 {
					i = len(cells) - 1 - i
				}
				cl := cells[i]
				reqs, err := cl.make(per, &seq)
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
			if stored != uint64(cl.ok)*uint64(cl.per) {
				return fmt.Errorf("%s: %d requests answered 2xx, %d triggers each; the stream holds %d of its triggers", cl.name, cl.ok, cl.per, stored)
			}
		}
		fmt.Printf("  round %d:", round+1)
		for p := range pairs {
			r := rate[2*p+1] / rate[2*p]
			ratios[p] = append(ratios[p], r)
			fmt.Printf(" %s %.0f req/s, %s %.0f req/s, ratio %.2f;", cells[2*p].name, rate[2*p], cells[2*p+1].name, rate[2*p+1], r)
		}
		fmt.Println()
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cell\treq/s (median)\ttriggers/s\tp50\tp99\t2xx\tin stream\t")
	for _, cl := range cells {
		slices.Sort(cl.lat)
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%s\t%d\t%d\t\n", cl.name, median(cl.rates), median(cl.rates)*float64(cl.per), pct(cl.lat, 0.50), pct(cl.lat, 0.99), cl.ok, cl.stored)
	}
	tw.Flush()
	var low []string
	for p := range pairs {
		ratio := median(ratios[p])
		fmt.Printf("%s / %s: %.2f (median of %d rounds, %.2f to %.2f; want ≥ %.2f)\n",
			cells[2*p+1].name, cells[2*p].name, ratio, reps, slices.Min(ratios[p]), slices.Max(ratios[p]), minRatio)
		if ratio < minRatio {
			low = append(low, fmt.Sprintf("%s ran at %.2f of %s, under %.2f", cells[2*p+1].name, ratio, cells[2*p].name, minRatio))
		}
	}
	fmt.Println("Every 2xx is in the stream. The machine may be shared: compare ratios, not absolute figures.")
	if len(low) > 0 {
		return errors.New(strings.Join(low, "; "))
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

// notifications makes n Alertmanager notifications of size alerts each,
// every alert with its own fingerprint, with the bearer token of src.
func notifications(src config.Source, size, n int, seq *int) ([]request, error) {
	out := make([]request, n)
	for i := range out {
		*seq++
		alerts := make([]map[string]any, size)
		for j := range alerts {
			alerts[j] = map[string]any{
				"status":      "firing",
				"labels":      map[string]string{"alertname": "DiskAlmostFull", "instance": fmt.Sprintf("db-%d:9100", j), "job": "node", "severity": "page"},
				"annotations": map[string]string{"summary": "Disk /var/lib/postgresql is 93% full", "runbook": "https://runbooks.example/disk"},
				"startsAt":    "2026-11-29T07:09:03.118Z", "endsAt": "0001-01-01T00:00:00Z",
				"generatorURL": "http://prometheus.example:9090/graph?g0.expr=node_filesystem_avail_bytes",
				"fingerprint":  fmt.Sprintf("%08x%08x", *seq, j),
			}
		}
		body, _ := json.Marshal(map[string]any{
			"version": "4", "status": "firing", "receiver": "oncegate", "truncatedAlerts": 0,
			"groupKey":    `{}/{severity="page"}:{alertname="DiskAlmostFull"}`,
			"groupLabels": map[string]string{"alertname": "DiskAlmostFull"}, "commonLabels": map[string]string{"alertname": "DiskAlmostFull", "job": "node", "severity": "page"},
			"commonAnnotations": map[string]string{"runbook": "https://runbooks.example/disk"},
			"externalURL":       "http://alertmanager.example:9093", "alerts": alerts,
		})
		h, err := ingress.Sign(src, []byte(secret), body, time.Now(), "", "")
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
