// Command peers measures Oncegate beside what its users would otherwise
// build, in the same run, as ratios:
//
//   - ledger: claim+commit of fresh keys at 1, 16 and 256 workers for
//     Oncegate's Badger ledger (durable: fsynced, group-committed) and its
//     JetStream KV ledger, against a Redis idempotency key (SET NX, then
//     SET; redis-server with the append-only file, appendfsync always and
//     everysec) and a PostgreSQL idempotency-key table (INSERT ... ON
//     CONFLICT DO NOTHING, then UPDATE; synchronous_commit on). Redis and
//     PostgreSQL come from the system's packages and are started by the
//     bench in a temporary directory; a server that cannot be started is
//     skipped with a message.
//   - gate: the end-to-end gate on one JetStream stream and the same
//     triggers, Oncegate's gate-ledger pipeline against a Watermill router
//     with its Deduplicator middleware (watermill-nats JetStream
//     subscriber and publisher): throughput, memory per remembered key,
//     and how many duplicates each lets through after a restart.
//
// It is its own Go module (bench/peers/go.mod, with a replace of the main
// module), so that Oncegate itself does not depend on Redis, PostgreSQL or
// Watermill clients. Run it from this directory:
//
//	cd bench/peers && go run .                 # both parts, ~5 minutes
//	cd bench/peers && go run . -part ledger -dur 1s -reps 1
//	cd bench/peers && go run . -part gate -n 20000
//
// See README.md for what each figure means.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/ledger/jskvstore"
	"github.com/oncegate/oncegate/internal/natsrun"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

type options struct {
	parts   map[string]bool
	dur     time.Duration
	workers []int
	reps    int
	only    map[string]bool
	batch   int
	n       int
	dup     int
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	var (
		o                    options
		parts, workers, only string
	)
	fs.StringVar(&parts, "part", "ledger,gate", "parts to run, comma-separated: ledger, gate")
	fs.DurationVar(&o.dur, "dur", 2*time.Second, "ledger: measured time per cell (after a warm-up of a fifth of it)")
	fs.StringVar(&workers, "workers", "1,16,256", "ledger: concurrent claims in flight, comma-separated")
	fs.IntVar(&o.reps, "reps", 3, "ledger: rounds; every cell is measured once per round, the table gives the median")
	fs.StringVar(&only, "only", "", "ledger: subset of the peers, comma-separated (names as in the table)")
	fs.IntVar(&o.batch, "batch", 16, "ledger: keys per BeginAll/CommitAll in the batched Oncegate row")
	fs.IntVar(&o.n, "n", 20000, "gate: triggers per run")
	fs.IntVar(&o.dup, "dup", 30, "gate: percent of triggers that repeat an earlier intent")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.parts = map[string]bool{}
	for _, p := range strings.Split(parts, ",") {
		switch p = strings.TrimSpace(p); p {
		case "ledger", "gate":
			o.parts[p] = true
		case "":
		default:
			return fmt.Errorf("-part: unknown part %q (want ledger, gate)", p)
		}
	}
	for _, s := range strings.Split(workers, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || w <= 0 {
			return fmt.Errorf("-workers: %q is not a positive number", s)
		}
		o.workers = append(o.workers, w)
	}
	o.only = map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.only[s] = true
		}
	}
	if o.reps < 1 || o.dur <= 0 || o.batch < 1 || o.n < 100 || o.dup < 0 || o.dup > 90 {
		return errors.New("-reps and -batch must be at least 1, -dur positive, -n at least 100, -dup from 0 to 90")
	}

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	tmp, err := os.MkdirTemp("", "oncegate-bench-peers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	fmt.Fprintf(stdout, "Oncegate beside its peers, %s %s/%s, %d CPUs (GOMAXPROCS %d); the machine may be shared: compare ratios, not rates\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	if o.parts["ledger"] {
		if err := runLedger(ctx, o, filepath.Join(tmp, "ledger"), stdout); err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
	}
	if o.parts["gate"] {
		if err := runGate(ctx, o, filepath.Join(tmp, "gate"), stdout); err != nil {
			return fmt.Errorf("gate: %w", err)
		}
	}
	return nil
}

// Peer names, as the ledger table and -only spell them.
const (
	peerBadger        = "oncegate-badger"
	peerBadgerBatch   = "oncegate-badger-batch"
	peerJSKV          = "oncegate-jskv"
	peerJSKVAlways    = "oncegate-jskv-always"
	peerRedisAlways   = "redis-always"
	peerRedisEverysec = "redis-everysec"
	peerPostgres      = "postgres"
)

type ledgerPeer struct {
	name  string
	what  string
	batch bool
	open  func(ctx context.Context, cell string, workers int) (pairer, error)
}

func runLedger(ctx context.Context, o options, dir string, w io.Writer) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	selected := func(name string) bool { return len(o.only) == 0 || o.only[name] }
	maxWorkers := slices.Max(o.workers)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var skipped []string
	var peers []ledgerPeer

	if selected(peerBadger) || selected(peerBadgerBatch) {
		open := func(_ context.Context, cell string, _ int) (pairer, error) {
			return openBadgerPairer(filepath.Join(dir, "badger-"+cell))
		}
		if selected(peerBadger) {
			peers = append(peers, ledgerPeer{peerBadger, "Badger ledger, Begin + Commit per key, fsynced (group commit)", false, open})
		}
		if selected(peerBadgerBatch) {
			peers = append(peers, ledgerPeer{peerBadgerBatch, fmt.Sprintf("Badger ledger, BeginAll + CommitAll of %d keys (as the consumer claims a fetched batch), fsynced", o.batch), true, open})
		}
	}
	for _, js := range []struct {
		name string
		sync time.Duration
		what string
	}{
		{peerJSKV, 0, "JetStream KV ledger, R1 file storage, embedded server fsyncing every 100ms (Oncegate's default)"},
		{peerJSKVAlways, natsrun.SyncAlways, "JetStream KV ledger, R1 file storage, embedded server with sync_interval always"},
	} {
		if !selected(js.name) {
			continue
		}
		srv, err := natsrun.StartEmbedded(filepath.Join(dir, js.name), natsrun.Options{Listen: "127.0.0.1:0", SyncInterval: js.sync, Logger: log})
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		nc, err := natsrun.Connect(ctx, srv.ClientURL(), natsrun.Options{Name: "bench-peers", Logger: log})
		if err != nil {
			return err
		}
		defer nc.Close()
		jsc, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		peers = append(peers, ledgerPeer{js.name, js.what, false, func(ctx context.Context, cell string, _ int) (pairer, error) {
			l, err := jskvstore.New(ctx, jsc, jskvstore.Options{Bucket: "bench-" + cell})
			if err != nil {
				return nil, err
			}
			return &ledgerPairer{l: l, closeFn: func() {
				l.Close()
				_ = jsc.DeleteKeyValue(context.Background(), "bench-"+cell)
			}}, nil
		}})
	}
	if selected(peerRedisAlways) || selected(peerRedisEverysec) {
		rs, err := newRedisServer(ctx, filepath.Join(dir, "redis"))
		switch {
		case errors.Is(err, errSkip):
			skipped = append(skipped, "redis: "+strings.TrimPrefix(err.Error(), errSkip.Error()+": "))
		case err != nil:
			return err
		default:
			defer rs.stop()
			for _, r := range []struct{ name, fsync string }{{peerRedisAlways, "always"}, {peerRedisEverysec, "everysec"}} {
				if selected(r.name) {
					peers = append(peers, ledgerPeer{r.name, "redis-server, SET key NX PX 60000, then SET key result PX 1 day; appendonly yes, appendfsync " + r.fsync, false,
						func(ctx context.Context, _ string, workers int) (pairer, error) {
							return rs.open(ctx, r.fsync, workers)
						}})
				}
			}
		}
	}
	if selected(peerPostgres) {
		ps, err := newPGServer(ctx, filepath.Join(dir, "pg"), maxWorkers)
		switch {
		case errors.Is(err, errSkip):
			skipped = append(skipped, "postgres: "+strings.TrimPrefix(err.Error(), errSkip.Error()+": "))
		case err != nil:
			return err
		default:
			defer ps.stop()
			peers = append(peers, ledgerPeer{peerPostgres, "PostgreSQL table, INSERT ... ON CONFLICT DO NOTHING, then UPDATE, each its own transaction; fsync on, synchronous_commit on", false,
				func(ctx context.Context, _ string, workers int) (pairer, error) { return ps.open(ctx, workers) }})
		}
	}
	if len(peers) == 0 {
		fmt.Fprintln(w, "\nledger: no peer to measure")
		for _, s := range skipped {
			fmt.Fprintln(w, "  "+s)
		}
		return nil
	}

	rates := map[string]map[int][]float64{}
	cpus := map[string]map[int][]float64{}
	keys := newKeySource()
	cell := 0
	for rep := range o.reps {
		for _, workers := range o.workers {
			for i := range peers {
				p := peers[(i+rep)%len(peers)]
				if err := ctx.Err(); err != nil {
					return err
				}
				cell++
				pr, err := p.open(ctx, strconv.Itoa(cell), workers)
				if err != nil {
					return fmt.Errorf("%s: %w", p.name, err)
				}
				goroutines, batch := workers, 1
				if p.batch {
					batch = min(o.batch, workers)
					goroutines = max(workers/batch, 1)
				}
				r, err := measure(ctx, pr, keys, goroutines, batch, o.dur)
				pr.close()
				if err != nil {
					return fmt.Errorf("%s at %d workers: %w", p.name, workers, err)
				}
				if rates[p.name] == nil {
					rates[p.name] = map[int][]float64{}
				}
				if cpus[p.name] == nil {
					cpus[p.name] = map[int][]float64{}
				}
				rates[p.name][workers] = append(rates[p.name][workers], r.rate)
				cpus[p.name][workers] = append(cpus[p.name][workers], float64(r.cpu)/1e3)
				fmt.Fprintf(os.Stderr, "round %d/%d  %-22s %4d workers  %8.0f pairs/s  %6.1f µs CPU/pair\n", rep+1, o.reps, p.name, workers, r.rate, float64(r.cpu)/1e3)
			}
		}
	}
	printLedger(w, o, peers, rates, cpus, skipped)
	return nil
}

func printLedger(w io.Writer, o options, peers []ledgerPeer, rates, cpus map[string]map[int][]float64, skipped []string) {
	med := func(name string, workers int) (float64, bool) {
		xs := rates[name][workers]
		if len(xs) == 0 {
			return 0, false
		}
		return median(slices.Clone(xs)), true
	}
	refs := []string{peerRedisAlways, peerPostgres}
	fmt.Fprintf(w, "\nLedger: claim + commit of a fresh key (one unit of new work), pairs per second; median of %d round(s) of %v per cell, the peers alternating\n", o.reps, o.dur)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "peer\tworkers\tpairs/s\trange\tvs redis-always\tvs postgres\tCPU µs/pair\t\n")
	for _, p := range peers {
		for _, workers := range o.workers {
			m, ok := med(p.name, workers)
			if !ok {
				continue
			}
			xs := rates[p.name][workers]
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f-%.0f\t", p.name, workers, m, slices.Min(xs), slices.Max(xs))
			for _, ref := range refs {
				if r, ok := med(ref, workers); ok && r > 0 {
					fmt.Fprintf(tw, "%.2fx\t", m/r)
				} else {
					fmt.Fprint(tw, "-\t")
				}
			}
			fmt.Fprintf(tw, "%.1f\t\n", median(slices.Clone(cpus[p.name][workers])))
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "\nwhat each peer does (every write that a claim or a commit makes is durable before it returns, unless said otherwise):")
	for _, p := range peers {
		fmt.Fprintf(w, "  %-22s %s\n", p.name, p.what)
	}
	fmt.Fprintf(w, "  workers = claims in flight: goroutines each running one pair at a time (%s: workers/%d goroutines of %d keys)\n", peerBadgerBatch, o.batch, o.batch)
	fmt.Fprintln(w, "  CPU µs/pair = CPU time (user + system) of this process and of the peer's server processes over the measured time, per pair: all on the same cores")
	for _, s := range skipped {
		fmt.Fprintln(w, "  SKIPPED "+s)
	}
	top := slices.Max(o.workers)
	var verdict []string
	for _, name := range []string{peerBadger, peerBadgerBatch} {
		m, ok := med(name, top)
		if !ok {
			continue
		}
		for _, ref := range refs {
			if r, ok := med(ref, top); ok && r > 0 {
				v := "ok"
				if m/r < 1 {
					v = "BELOW"
				}
				verdict = append(verdict, fmt.Sprintf("%s/%s %.2fx %s", name, ref, m/r, v))
			}
		}
	}
	if len(verdict) > 0 {
		fmt.Fprintf(w, "goal at %d workers, Oncegate's durable ledger >= 1x Redis (always) and PostgreSQL: %s\n", top, strings.Join(verdict, "; "))
	}
}

// median returns the median of xs, which it sorts; 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	if n := len(xs); n%2 == 1 {
		return xs[n/2]
	}
	n := len(xs)
	return (xs[n/2-1] + xs[n/2]) / 2
}
