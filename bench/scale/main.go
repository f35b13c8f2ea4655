// Command scale measures how Oncegate's throughput grows with consumer
// replicas on a NATS cluster when the model step bounds it: triggers per
// second of 1, 2 and 3 replicas in one run, each replica with the same
// pipeline concurrency, against the stand-in model answering after a
// realistic latency.
//
// Everything runs in this process, on loopback: a three-node NATS cluster
// (nats-server embedded, routes between the nodes), the stand-in model
// served over HTTP with -latency per answer, and each replica a full
// app.Start joined to all three nodes: the JetStream KV ledger and the
// shared LLM cache in buckets with three replicas, and the trigger, effect
// and dead-letter streams with three replicas too.
//
// Each cell starts its replicas, waits until all consume, then publishes
// its triggers (distinct intents: every one pays the model once, 16
// publishes in flight) and times from the first publish until the durable
// consumer has nothing pending and nothing unacknowledged and every effect
// is in the effect stream. A cell has -n triggers per replica, so that each
// lasts about as long. The ratio is each cell's triggers/s to the
// one-replica cell's.
//
//	go run -C bench ./scale                        # 200ms model, concurrency 16, 400 triggers per replica
//	go run -C bench ./scale -latency 500ms -concurrency 32
//
// The machine may be shared: the figures are for comparing cells of one
// run, not for quoting alone.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/standin"
)

type options struct {
	n           int
	concurrency int
	latency     time.Duration
	replicas    []int
	nodes       int
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 400, "triggers per replica in a cell (distinct intents)")
	flag.IntVar(&o.concurrency, "concurrency", 16, "pipeline concurrency of each replica")
	flag.DurationVar(&o.latency, "latency", 200*time.Millisecond, "the stand-in model's latency per answer")
	reps := flag.String("replicas", "1,2,3", "replica counts, one cell each")
	flag.IntVar(&o.nodes, "nodes", 3, "nodes of the NATS cluster (and replicas of its streams and buckets)")
	flag.Parse()
	for _, s := range strings.Split(*reps, ",") {
		var r int
		if _, err := fmt.Sscan(s, &r); err != nil || r < 1 {
			fmt.Fprintln(os.Stderr, "scale: -replicas: want positive counts, got", s)
			os.Exit(2)
		}
		o.replicas = append(o.replicas, r)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

// cell is one measured configuration.
type cell struct {
	replicas int
	triggers int
	took     time.Duration
	calls    int64
	writes   map[string]uint64 // messages written per bucket's stream
}

// buckets are the KV buckets whose writes a cell counts.
var buckets = []string{"KV_scale-ledger", "KV_scale-llm-cache", "KV_scale-llm-cache-budgets"}

// lastSeqs returns the last sequence of each bucket's stream (0 if none).
func lastSeqs(ctx context.Context, js jetstream.JetStream) map[string]uint64 {
	out := map[string]uint64{}
	for _, b := range buckets {
		if st, err := js.Stream(ctx, b); err == nil {
			out[b] = st.CachedInfo().State.LastSeq
		}
	}
	return out
}

func (c cell) rate() float64 { return float64(c.triggers) / c.took.Seconds() }

func run(o options) error {
	dir, err := os.MkdirTemp("", "oncegate-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	servers, err := startCluster(dir, o.nodes)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range servers {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}()
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	natsURL := strings.Join(urls, ",")
	nc, err := nats.Connect(natsURL, nats.Name("oncegate-scale"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// The consumer's stream updates name no replica count (a server reads
	// 1): they are answered with the stream's info instead, as in the soak,
	// so that the streams keep the replicas made here.
	sub, err := nc.Subscribe(updateSubject+".*", func(m *nats.Msg) {
		resp, err := nc.Request("$JS.API.STREAM.INFO."+m.Subject[len(updateSubject)+1:], nil, 5*time.Second)
		if err == nil {
			m.Respond(resp.Data)
		}
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := awaitInterest(servers, updateSubject+".probe"); err != nil {
		return err
	}

	model, err := standin.New(standin.Options{Latency: o.latency})
	if err != nil {
		return err
	}
	modelURL, stopModel, err := model.Start("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer stopModel()

	fmt.Printf("scale: %d-node NATS cluster (streams and buckets R%d), stand-in model at %v per answer, pipeline concurrency %d per replica, %d triggers per replica\n",
		o.nodes, o.nodes, o.latency, o.concurrency, o.n)
	var cells []cell
	for i, r := range o.replicas {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		before, seqs := model.Stats().Completions, lastSeqs(ctx, js)
		c, err := runCell(ctx, js, servers, natsURL, modelURL, filepath.Join(dir, fmt.Sprint(i)), fmt.Sprintf("s%d", i), r, o)
		cancel()
		if err != nil {
			return fmt.Errorf("%d replicas: %w", r, err)
		}
		c.calls = model.Stats().Completions - before
		c.writes = map[string]uint64{}
		for b, n := range lastSeqs(context.Background(), js) {
			c.writes[b] = n - seqs[b]
		}
		cells = append(cells, c)
		fmt.Printf("  %d replicas: %d triggers in %.2fs\n", r, c.triggers, c.took.Seconds())
	}
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "replicas\tconcurrency each\ttriggers\tseconds\ttriggers/s\tvs 1 replica\tmodel calls\tbound (replicas × concurrency / latency)\t")
	for _, c := range cells {
		bound := float64(c.replicas*o.concurrency) / o.latency.Seconds()
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.2f\t%.1f\t%.2f×\t%d\t%.0f/s\t\n", c.replicas, o.concurrency, c.triggers, c.took.Seconds(), c.rate(),
			c.rate()/cells[0].rate(), c.calls, bound)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Println()
	last := cells[len(cells)-1]
	fmt.Printf("replicated writes per trigger (%d-replica cell):", last.replicas)
	for _, b := range buckets {
		fmt.Printf(" %s %.2f;", b, float64(last.writes[b])/float64(last.triggers))
	}
	fmt.Println(" plus the trigger's ack and the effect's publish")
	rate, err := kvCeiling(js, len(servers))
	if err != nil {
		return err
	}
	fmt.Printf("one R%d KV bucket's write ceiling here: %.0f compare-and-set writes/s (64 writers, 3s)\n", len(servers), rate)
	return nil
}

// kvCeiling measures how many compare-and-set creates per second one
// replicated bucket takes from 64 concurrent writers, for 3 seconds.
func kvCeiling(js jetstream.JetStream, replicas int) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "scale-ceiling", History: 1, Replicas: replicas})
	if err != nil {
		return 0, err
	}
	var n atomic.Int64
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				if _, err := kv.Create(ctx, fmt.Sprintf("k%d-%d", w, i), make([]byte, 200)); err == nil {
					n.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return float64(n.Load()) / 3, nil
}

const updateSubject = "scale.stream-update"

// startCluster starts n clustered servers with JetStream on loopback. The
// route ports are picked by listening on port 0 and closing the listener.
func startCluster(dir string, n int) ([]*server.Server, error) {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	routes := make([]*url.URL, n)
	for i, p := range ports {
		routes[i] = &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)}
	}
	return startServers(nil, dir, ports, routes)
}

func startServers(servers []*server.Server, dir string, ports []int, routes []*url.URL) ([]*server.Server, error) {
	for i, p := range ports {
		o := &server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprintf("n%d", i)), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "scale", Host: "127.0.0.1", Port: p},
			Routes:  routes,
		}
		s, err := server.NewServer(o)
		if err != nil {
			return nil, err
		}
		// The consumer's updates of the trigger stream go to the harness.
		if err := s.GlobalAccount().AddMapping("$JS.API.STREAM.UPDATE.*", updateSubject+".$1"); err != nil {
			return nil, err
		}
		go s.Start()
		servers = append(servers, s)
	}
	for _, s := range servers {
		if !s.ReadyForConnections(30 * time.Second) {
			return nil, errors.New("a server is not ready after 30s")
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var leader *server.Server
		current := true
		for _, s := range servers {
			current = current && s.JetStreamIsCurrent()
			if s.JetStreamIsLeader() {
				leader = s
			}
		}
		if current && leader != nil && len(leader.JetStreamClusterPeers()) == len(servers) {
			return servers, nil
		}
		if time.Now().After(deadline) {
			return nil, errors.New("no JetStream meta leader with every server after 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitInterest waits until every server knows of a subscriber to subject:
// a stream update a replica sends to a server the harness's subscription
// has not yet reached by route is answered "no responders".
func awaitInterest(servers []*server.Server, subject string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := 0
		for _, s := range servers {
			if s.GlobalAccount().SubscriptionInterest(subject) {
				n++
			}
		}
		if n == len(servers) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the harness's subscription to %s reached %d of %d servers in 30s", subject, n, len(servers))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// createStream creates the stream sc, trying again for up to 30s while
// the meta leader finds no peers to place its replicas on: a cluster whose
// every peer it just counted online can still answer so for a moment (CI
// saw "no suitable peers for placement, peer offline" on the first cell).
func createStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	const noPeers = 10005 // JSClusterNoPeersErrF
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := js.CreateStream(ctx, sc)
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != noPeers || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// runCell measures r replicas on fresh streams named after id.
func runCell(ctx context.Context, js jetstream.JetStream, servers []*server.Server, natsURL, modelURL, dir, id string, r int, o options) (cell, error) {
	c := cell{replicas: r, triggers: o.n * r}
	name := strings.ToUpper("SCALE_" + id)
	prefix := "scale." + id
	for _, sc := range []jetstream.StreamConfig{
		{Name: name, Subjects: []string{prefix + ".triggers.>"}, Duplicates: 5 * time.Minute},
		{Name: name + "_EFFECTS", Subjects: []string{prefix + ".effects.>"}, Duplicates: 5 * time.Minute}, // covers the default redelivery horizon (5 x 30s)
		{Name: name + "_DEAD", Subjects: []string{prefix + ".dead.>"}},
	} {
		sc.Replicas, sc.Storage = len(servers), jetstream.FileStorage
		if err := createStream(ctx, js, sc); err != nil {
			return c, fmt.Errorf("stream %s: %w", sc.Name, err)
		}
	}
	// Warnings and errors only: a replica that cannot start says why.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var apps []*app.App
	defer func() {
		for _, a := range apps {
			a.Close()
		}
	}()
	for i := range r {
		cfg, err := cellConfig(natsURL, modelURL, filepath.Join(dir, fmt.Sprint(i)), name, prefix, len(servers), o)
		if err != nil {
			return c, err
		}
		a, err := app.Start(ctx, cfg, app.Options{Logger: log, NoOps: true})
		if err != nil {
			return c, err
		}
		apps = append(apps, a)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, r)
	durable := consumer.Durable("alerts")
	// The first replica sets the durable consumer up alone, as the soak's
	// does: replicas setting up one durable at once on a cluster can wait
	// forever for an answer (Setup's requests have no deadline).
	go func() { done <- apps[0].Run(runCtx) }()
	for apps[0].Consumer.Ready() != nil {
		if ctx.Err() != nil {
			stop()
			return c, ctx.Err()
		}
		select {
		case err := <-done:
			stop()
			return c, fmt.Errorf("the first replica stopped before it was ready: %w", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	for _, a := range apps[1:] {
		go func() { done <- a.Run(runCtx) }()
	}
	for _, a := range apps {
		if err := a.WaitReady(ctx); err != nil {
			stop()
			return c, err
		}
	}
	// A pull request sent before its reply subject's interest has reached
	// the consumer's leader is answered into the void, and the puller waits
	// for its heartbeat to ask again: let the interest spread first.
	time.Sleep(2 * time.Second)

	// The clock runs from the first trigger published to the last effect.
	start := time.Now()
	if err := publish(ctx, js, prefix, id, c.triggers); err != nil {
		stop()
		return c, err
	}
	lastPrint := time.Now()
	for {
		if time.Since(lastPrint) > 3*time.Second {
			lastPrint = time.Now()
			var parts []string
			for i, a := range apps {
				for _, s := range a.Consumer.Stats() {
					parts = append(parts, fmt.Sprintf("replica %d: %+v", i, s))
				}
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if cons, err := js.Consumer(cctx, name, durable); err == nil {
				ci := cons.CachedInfo()
				parts = append(parts, fmt.Sprintf("durable: %d pending, %d unacknowledged, %d pull requests waiting", ci.NumPending, ci.NumAckPending, ci.NumWaiting))
			}
			cancel()
			fmt.Printf("  waiting: %s\n", strings.Join(parts, "; "))
		}
		if d, err := settled(ctx, js, name, durable, c.triggers); err != nil {
			stop()
			return c, err
		} else if d {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.took = time.Since(start)
	stop()
	for range r {
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			return c, err
		}
	}
	return c, nil
}

// settled reports whether every trigger is acked and every effect stored.
// A request the cluster leaves unanswered (a consumer electing its leader)
// is a "not yet".
func settled(ctx context.Context, js jetstream.JetStream, stream, durable string, want int) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, stream, durable)
	if errors.Is(err, context.DeadlineExceeded) {
		return false, nil
	}
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	info, err := cons.Info(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if info.NumPending != 0 || info.NumAckPending != 0 {
		return false, nil
	}
	st, err := js.Stream(ctx, stream+"_EFFECTS")
	if errors.Is(err, context.DeadlineExceeded) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	si, err := st.Info(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if n := int(si.State.Msgs); n > want {
		return false, fmt.Errorf("%d effects for %d triggers", n, want)
	}
	return int(si.State.Msgs) == want, nil
}

// cellConfig is the default configuration's "alerts" pipeline (its key and
// model step) on the cell's streams, with the ledger and the LLM cache in
// KV buckets of the cluster.
func cellConfig(natsURL, modelURL, dir, stream, prefix string, replicas int, o options) (*config.Config, error) {
	cfg := config.Default()
	cfg.DataDir = dir
	cfg.NATS.URL = natsURL
	cfg.Metrics.Listen = ""
	cfg.Stream.Name = stream
	cfg.Stream.Subjects = []string{prefix + ".triggers.>"}
	cfg.Stream.DeadLetterSubject = prefix + ".dead.{pipeline}"
	cfg.Ledger.Store = config.StoreKV
	cfg.Ledger.KV.Bucket = "scale-ledger"
	cfg.Ledger.KV.Replicas = replicas
	cfg.LLM.BaseURL = modelURL
	cfg.LLM.Cache.Store = config.StoreKV
	cfg.LLM.Cache.Endpoint = "standin"
	cfg.LLM.Cache.KV.Bucket = "scale-llm-cache"
	cfg.LLM.Cache.KV.Replicas = replicas
	p := cfg.Pipelines[0]
	p.Subject = prefix + ".triggers.alerts"
	p.Effect.Subject = prefix + ".effects.alerts"
	p.Concurrency = o.concurrency
	p.MaxAckPending = max(p.MaxAckPending, 4*o.concurrency)
	cfg.Pipelines = []config.Pipeline{p}
	if err := cfg.LoadEnv(nil); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// publish publishes n triggers with distinct intents, 16 at a time, each
// retried: a new stream may still be electing its leader.
func publish(ctx context.Context, js jetstream.JetStream, prefix, id string, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			p := fmt.Appendf(nil, `{"status":"firing","alert":{"fingerprint":"%s-%08d","occurrence":1,`+
				`"labels":{"alertname":"DiskAlmostFull","instance":"db-%d:9100","severity":"page"},`+
				`"annotations":{"summary":"Disk /var/lib/pgsql 93%% full"}}}`, id, i, i%64)
			for attempt := 0; ; attempt++ {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := js.Publish(pctx, prefix+".triggers.alerts", p, jetstream.WithMsgID(fmt.Sprintf("%s-%d", id, i)))
				cancel()
				if err == nil {
					return
				}
				if attempt == 20 || ctx.Err() != nil {
					errs <- fmt.Errorf("publishing trigger %d: %w", i, err)
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}
