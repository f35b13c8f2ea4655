// Command ledger10m measures the Badger ledger at a size (issue 39, item
// 4): with -records committed records (10⁷ by default), against an empty
// ledger in the same run,
//
//   - disk bytes per record: the data directory's allocated blocks (and its
//     apparent size) after the runs below, the ledger closed, over every
//     record they and the fill committed;
//   - RSS per record: a fresh process opens the ledger as Oncegate does
//     (app.OpenLedger), answers a claim and runs the latency cell; its RSS
//     less the same process's on the empty ledger, over the records;
//   - claim+commit latency, p50 and p99, from -workers goroutines (16)
//     each running Begin and Commit of a fresh key for -dur (the durable
//     claim, as a one-shot pipeline makes it, and the group-committed
//     fsyncs OpenLedger's ledger makes), and a duplicate's Begin (a key
//     already committed: a read) for as long;
//   - readiness after a restart: in that fresh process, from the start of
//     app.OpenLedger to the first Begin answered (the page cache warm, as
//     after a process crash; a host reboot's cold cache is not measured).
//     The fill runs in a process of its own, killed (SIGKILL) when it is
//     done, so the first open at size is a restart after a crash: the
//     claims journal and Badger's write-ahead log as the killed process
//     left them. That process closes the ledger cleanly, and one more
//     process times a restart after a clean close;
//   - retention's sweep: Badger drops an expired record when a compaction
//     rewrites its table (the ledger writes each record with a TTL of
//     Retention + 1h on Badger's wall clock, which a benchmark cannot move),
//     and Oncegate runs Badger's value-log GC every ten minutes. Measured:
//     one value-log GC pass as app.OpenLedger's collector runs it, and a
//     full compaction (DB.Flatten), the upper bound of the work that drops
//     the records: every table read and rewritten once.
//
// Targets: ≤ 200 B disk and ≤ 64 B RSS per record, p99 at size ≤ 2× the
// empty ledger's, readiness ≤ 2 s.
//
// The fill writes through the store's own batch API (BeginBatch and
// CommitBatch of 2,000 keys, -fill-workers at once, without fsyncs) the
// records a gate pipeline leaves: a volatile claim (kept in memory and the
// claims journal, not in Badger) and a committed record with a 96-byte
// response. Keys are 16 random-looking bytes, as the keyer's hashes are.
//
//	go run -C bench ./ledger10m                     # 10⁷ records
//	go run -C bench ./ledger10m -short              # 10⁵ records, 500ms cells: a few seconds
//	go run -C bench ./ledger10m -records 1000000 -dur 5s
//
// Everything lives in a temporary directory removed at exit (-keep keeps
// it).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/procstat"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Issue 39's targets.
const (
	targetDisk      = 200.0 // bytes per record
	targetRSS       = 64.0  // bytes per record
	targetP99Ratio  = 2.0   // p99 at size over the empty ledger's
	targetReadiness = 2 * time.Second
)

func main() {
	maybeChild()
	ok, err := run(os.Stdout, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledger10m:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(2)
	}
}

type options struct {
	firstKey    uint64 // a child's first claim
	records     int
	workers     int
	dur         time.Duration
	fillWorkers int
	sweep       bool
	keep        bool
	result      string
}

// run measures and reports; it returns false if a target was missed.
func run(out io.Writer, args []string) (bool, error) {
	fs := flag.NewFlagSet("ledger10m", flag.ContinueOnError)
	var o options
	short := fs.Bool("short", false, "the short form: 10⁵ records, 500ms cells")
	fs.IntVar(&o.records, "records", 10_000_000, "committed records in the ledger at size")
	fs.IntVar(&o.workers, "workers", 16, "concurrent workers of the latency cells")
	fs.DurationVar(&o.dur, "dur", 5*time.Second, "each latency cell's length")
	fs.IntVar(&o.fillWorkers, "fill-workers", runtime.GOMAXPROCS(0), "concurrent batches of the fill")
	fs.BoolVar(&o.sweep, "sweep", true, "measure the sweep (value-log GC and a full compaction)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory")
	fs.StringVar(&o.result, "result", "gate", "the committed result: gate (a JetStream effect's PubAck as JSON) or ticket96 (a short id and 96 zero bytes, bench/restart's fill)")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	if *short {
		o.records, o.dur = 100_000, 500*time.Millisecond
	}
	if o.result != "gate" && o.result != "ticket96" {
		return false, fmt.Errorf("-result: %q is not gate or ticket96", o.result)
	}
	if o.records <= 0 || o.workers <= 0 || o.fillWorkers <= 0 {
		return false, errors.New("-records, -workers and -fill-workers must be positive")
	}
	tmp, err := os.MkdirTemp("", "oncegate-bench-ledger10m-")
	if err != nil {
		return false, err
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "ledger10m: keeping", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	self, err := os.Executable()
	if err != nil {
		return false, err
	}
	load0 := loadavg()

	emptyDir, fullDir := filepath.Join(tmp, "empty"), filepath.Join(tmp, "full")
	empty, err := runChild(self, emptyDir, 0, o)
	if err != nil {
		return false, fmt.Errorf("the empty ledger: %w", err)
	}

	fillTook, fillCPU, err := runFill(self, filepath.Join(fullDir, "badger"), o)
	if err != nil {
		return false, fmt.Errorf("fill: %w", err)
	}
	fmt.Fprintf(os.Stderr, "ledger10m: %d records written in %v, the filling process killed\n", o.records, fillTook.Round(time.Millisecond))
	journal, err := journalBytes(filepath.Join(fullDir, "badger"))
	if err != nil {
		return false, err
	}
	// The first open at size is a restart after a crash (the claims
	// journal and Badger's write-ahead log as the killed fill left them);
	// it ends with a clean close, and the second open is a restart after
	// that.
	full, err := runChild(self, fullDir, o.records, o)
	if err != nil {
		return false, fmt.Errorf("the ledger at size: %w", err)
	}
	clean, err := runChild(self, fullDir, o.records, options{result: o.result, workers: o.workers, firstKey: 1 << 40})
	if err != nil {
		return false, fmt.Errorf("the ledger at size, after a clean close: %w", err)
	}
	// Disk after the clean close: every record the runs committed, the
	// fill's and the children's.
	written := int64(o.records) + int64(full.Pair.N) + 1 + int64(clean.Pair.N) + 1
	diskAlloc, diskApparent, err := du(filepath.Join(fullDir, "badger"))
	if err != nil {
		return false, err
	}
	emptyAlloc, emptyApparent, err := du(filepath.Join(emptyDir, "badger"))
	if err != nil {
		return false, err
	}

	var sw *sweepResult
	if o.sweep {
		if sw, err = sweep(filepath.Join(fullDir, "badger")); err != nil {
			return false, fmt.Errorf("sweep: %w", err)
		}
	}
	load1 := loadavg()

	n := float64(o.records)
	diskPer := float64(diskAlloc) / float64(written)
	rssPer := (float64(full.RSSAfter) - float64(empty.RSSAfter)) / n
	ratio := float64(full.Pair.P99) / float64(empty.Pair.P99)
	ok := true
	verdict := func(met bool) string {
		if met {
			return "met"
		}
		ok = false
		return "MISSED"
	}
	fmt.Fprintf(out, "Badger ledger (app.OpenLedger), %d committed records against an empty ledger; %d CPUs, load average %s at the start, %s at the end\n\n",
		o.records, runtime.NumCPU(), load0, load1)
	fmt.Fprintf(out, "fill                 %v (%.0f records/s, %.1f µs CPU per record; %d workers, batches of %d, no fsync; result %s)\n",
		fillTook.Round(time.Millisecond), n/fillTook.Seconds(), float64(fillCPU.Microseconds())/n, o.fillWorkers, fillBatch, o.result)
	fmt.Fprintf(out, "disk                 %s allocated (%s apparent); the empty ledger %s (%s)\n",
		mib(diskAlloc), mib(diskApparent), mib(emptyAlloc), mib(emptyApparent))
	fmt.Fprintf(out, "  per record         %.1f B allocated (%.1f B apparent; %d records, the fill's and the latency cells')   target ≤ %.0f B   %s\n",
		diskPer, float64(diskApparent)/float64(written), written, targetDisk, verdict(diskPer <= targetDisk))
	fmt.Fprintf(out, "RSS                  %s at size, %s empty (after open, a claim and the latency cells); after open and the first claim: %s and %s\n",
		mib(full.RSSAfter), mib(empty.RSSAfter), mib(full.RSSReady), mib(empty.RSSReady))
	fmt.Fprintf(out, "  per record         %.1f B (after open and the first claim: %.1f B)    target ≤ %.0f B   %s\n",
		rssPer, (float64(full.RSSReady)-float64(empty.RSSReady))/n, targetRSS, verdict(rssPer <= targetRSS))
	fmt.Fprintf(out, "  of which anonymous %s at size, %s empty (after open and the first claim: %s and %s)\n", mib(full.AnonAfter), mib(empty.AnonAfter), mib(full.AnonReady), mib(empty.AnonReady))
	fmt.Fprintf(out, "    per record       %.1f B (after open and the first claim: %.1f B): the process's own memory\n",
		(float64(full.AnonAfter)-float64(empty.AnonAfter))/n, (float64(full.AnonReady)-float64(empty.AnonReady))/n)
	fmt.Fprintf(out, "  and mapped files   %s at size, %s empty (after open and the first claim: %s and %s): the pages of Badger's tables the reads touched, in the page cache\n", mib(full.FileAfter), mib(empty.FileAfter), mib(full.FileReady), mib(empty.FileReady))
	fmt.Fprintf(out, "    per record       %.1f B (after open and the first claim: %.1f B)\n",
		(float64(full.FileAfter)-float64(empty.FileAfter))/n, (float64(full.FileReady)-float64(empty.FileReady))/n)
	fmt.Fprintf(out, "  Go heap in use     %s at size, %s empty; after open and the first claim %s and %s\n", mib(full.HeapInuse), mib(empty.HeapInuse), mib(full.HeapReady), mib(empty.HeapReady))
	fmt.Fprintf(out, "claim+commit, %d workers, %v each (fresh keys, durable claim, fsynced)\n", o.workers, o.dur)
	fmt.Fprintf(out, "  empty              p50 %8v  p99 %8v  (%d pairs, %.0f/s)\n", empty.Pair.P50, empty.Pair.P99, empty.Pair.N, float64(empty.Pair.N)/o.dur.Seconds())
	fmt.Fprintf(out, "  at size            p50 %8v  p99 %8v  (%d pairs, %.0f/s)\n", full.Pair.P50, full.Pair.P99, full.Pair.N, float64(full.Pair.N)/o.dur.Seconds())
	fmt.Fprintf(out, "  p99 ratio          %.2f×                                    target ≤ %.0f×   %s\n", ratio, targetP99Ratio, verdict(ratio <= targetP99Ratio))
	fmt.Fprintf(out, "duplicate's Begin (a committed key, a read), %d workers\n", o.workers)
	fmt.Fprintf(out, "  empty              p50 %8v  p99 %8v  (%d, of keys it committed in its own cell)\n", empty.Dup.P50, empty.Dup.P99, empty.Dup.N)
	fmt.Fprintf(out, "  at size            p50 %8v  p99 %8v  (%d, of the filled keys)\n", full.Dup.P50, full.Dup.P99, full.Dup.N)
	fmt.Fprintf(out, "readiness after a restart (a new process: app.OpenLedger to the first Begin answered, page cache warm)\n")
	fmt.Fprintf(out, "  empty              %v (open %v)\n", empty.Ready, empty.Open)
	fmt.Fprintf(out, "  at size, a crash   %v (open %v)                       target ≤ %v   %s\n", full.Ready, full.Open, targetReadiness, verdict(full.Ready <= targetReadiness))
	fmt.Fprintf(out, "    the claims journal the killed fill left: %s (%d entries of %d B, its volatile claims as a gate leaves them), and Badger's write-ahead log\n", mib(journal), journal/journalEntry, journalEntry)
	fmt.Fprintf(out, "  at size, clean     %v (open %v)                       target ≤ %v   %s\n", clean.Ready, clean.Open, targetReadiness, verdict(clean.Ready <= targetReadiness))
	if sw != nil {
		fmt.Fprintf(out, "retention's sweep (Badger drops expired records at compaction; Oncegate runs the value-log GC every 10 minutes)\n")
		fmt.Fprintf(out, "  value-log GC pass  %v wall, %v CPU (%s)\n", sw.GC.Round(time.Millisecond), sw.GCCPU.Round(time.Millisecond), sw.GCResult)
		fmt.Fprintf(out, "  full compaction    %v wall, %v CPU, %s of tables above the last level moved down (%.2f µs CPU per record); disk %s → %s (%.1f B per record after)\n",
			sw.Flatten.Round(time.Millisecond), sw.FlattenCPU.Round(time.Millisecond), mib(sw.Moved), float64(sw.FlattenCPU.Microseconds())/n,
			mib(sw.Before), mib(sw.After), float64(sw.After)/n)
		fmt.Fprintf(out, "  levels before      %s\n", sw.Levels)
	}
	return ok, nil
}

// --- the child: open, first claim, latency cells ---------------------------

// maybeChild runs the child and exits, if this process is one (the
// program re-runs its own executable; the test binary's TestMain calls it
// too).
func maybeChild() {
	if len(os.Args) > 1 && os.Args[1] == "-fill" {
		err := fillChild(os.Args[2:]) // it returns only on a failure: filled, it waits to be killed
		fmt.Fprintln(os.Stderr, "ledger10m fill:", err)
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[1] == "-child" {
		if err := child(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "ledger10m child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// childResult is what a child process reports, as JSON on its stdout.
type childResult struct {
	Open                 time.Duration // app.OpenLedger
	Ready                time.Duration // app.OpenLedger to the first Begin answered
	RSSReady             uint64        // after the first claim
	HeapReady            uint64        // the Go heap in use after the first claim
	RSSAfter             uint64        // after the latency cells
	AnonReady, FileReady uint64        // RssAnon and RssFile (mapped files: Badger's tables) after the first claim
	AnonAfter, FileAfter uint64        // and after the latency cells
	HeapInuse            uint64        // after the latency cells
	Pair                 percentiles   // Begin+Commit of fresh keys
	Dup                  percentiles   // Begin of committed keys
}

type percentiles struct {
	N        int
	P50, P99 time.Duration
}

func runChild(self, dir string, records int, o options) (*childResult, error) {
	cmd := exec.Command(self, "-child", "-dir", dir, "-records", fmt.Sprint(records), "-result", o.result,
		"-workers", fmt.Sprint(o.workers), "-dur", o.dur.String(), "-first", fmt.Sprint(o.firstKey))
	if o.dur == 0 {
		// The open alone: the profiles are the other children's.
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
			return strings.HasPrefix(kv, "LEDGER10M_OPEN_PROFILE=") || strings.HasPrefix(kv, "LEDGER10M_HEAP_PROFILE=")
		})
	}
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, err
	}
	var r childResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("the child's report %q: %w", stdout.String(), err)
	}
	return &r, nil
}

// ledgerConfig is the configuration of a ledger in dir: a gate pipeline on
// the Badger ledger, every other setting its default.
func ledgerConfig(dir string) (*config.Config, error) {
	cfg, err := config.Parse(fmt.Appendf(nil, `data_dir: %s
metrics: {listen: ""}
pipelines:
  - name: hooks
    subject: triggers.hooks
    mode: gate-ledger
    key: {fields: [/id]}
    effect: {sink: jetstream, subject: effects.hooks}
`, dir), "bench-ledger10m")
	if err != nil {
		return nil, err
	}
	return cfg, cfg.Validate()
}

func child(args []string) error {
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	dir := fs.String("dir", "", "data directory")
	records := fs.Int("records", 0, "records the fill wrote (keys 0 to records-1)")
	workers := fs.Int("workers", 16, "")
	dur := fs.Duration("dur", time.Second, "")
	shape := fs.String("result", "gate", "")
	first := fs.Uint64("first", 0, "the fresh key of the first claim (the pair cell claims the keys after 0)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := ledgerConfig(*dir)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if path := os.Getenv("LEDGER10M_OPEN_PROFILE"); path != "" {
		// A CPU profile of the open and the first claim, for finding what
		// readiness is bound by.
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer f.Close()
	}
	var r childResult
	t0 := time.Now()
	l, closeLedger, err := app.OpenLedger(ctx, cfg, nil, app.OpenLedgerOptions{})
	if err != nil {
		return err
	}
	r.Open = time.Since(t0)
	c, err := l.Begin(ctx, freshKey(*first), ledger.BeginOptions{Owner: "bench", Lease: time.Minute})
	if err != nil {
		return err
	}
	r.Ready = time.Since(t0)
	pprof.StopCPUProfile()
	if c.Status != ledger.StatusNew {
		return fmt.Errorf("the first claim, of fresh key %d: %v", *first, c.Status)
	}
	if err := l.Commit(ctx, freshKey(*first), c.Lease.Token, resultOf(*shape, 1<<40)); err != nil {
		return err
	}
	r.RSSReady = procstat.RSS()
	r.AnonReady, r.FileReady = rssSplit()
	if path := os.Getenv("LEDGER10M_HEAP_PROFILE"); path != "" {
		// The Go heap after the open and the first claim, for finding
		// what the RSS is bound by.
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		runtime.GC()
		if err := pprof.WriteHeapProfile(f); err != nil {
			return err
		}
		f.Close()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapReady = ms.HeapInuse

	if *dur == 0 { // the open alone
		if err := closeLedger(); err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(&r)
	}
	var next atomic.Uint64 // freshKey(0) is committed; the cell commits 1 to next
	pairs, err := cell(*workers, *dur, func() error {
		i := next.Add(1)
		k := freshKey(i)
		c, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: "bench", Lease: time.Minute})
		if err != nil {
			return err
		}
		if c.Status != ledger.StatusNew {
			return fmt.Errorf("fresh key %v: %v", k, c.Status)
		}
		return l.Commit(ctx, k, c.Lease.Token, resultOf(*shape, i))
	})
	if err != nil {
		return err
	}
	r.Pair = pairs
	// The duplicates: the filled keys, or (empty) the keys this process
	// committed in its pair cell.
	pool, keyOf := uint64(*records), fillKey
	if pool == 0 {
		pool, keyOf = next.Load()+1, freshKey
	}
	var rng atomic.Uint64
	rng.Store(0x9E3779B97F4A7C15)
	dups, err := cell(*workers, *dur, func() error {
		i := mix(rng.Add(1)) % pool
		k := keyOf(i)
		c, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: "bench", Lease: time.Minute})
		if err != nil {
			return err
		}
		if c.Status != ledger.StatusCommitted {
			return fmt.Errorf("committed key %d: %v", i, c.Status)
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.Dup = dups
	r.RSSAfter = procstat.RSS()
	r.AnonAfter, r.FileAfter = rssSplit()
	runtime.ReadMemStats(&ms)
	r.HeapInuse = ms.HeapInuse
	if err := closeLedger(); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(&r)
}

// resultOf is the result committed with the i-th record: by default what
// a gate pipeline's JetStream effect commits, the PubAck as JSON
// (DownstreamID); with -result ticket96, bench/restart's shape, a short
// id and 96 zero bytes of response.
func resultOf(shape string, i uint64) ledger.Result {
	if shape == "ticket96" {
		return ledger.Result{DownstreamID: "ticket", Response: make([]byte, 96)}
	}
	return ledger.Result{DownstreamID: fmt.Sprintf(`{"stream":"ONCEGATE_EFFECTS","seq":%d}`, i+1)}
}

// cell runs op from workers goroutines for d and returns the latencies'
// percentiles.
func cell(workers int, d time.Duration, op func() error) (percentiles, error) {
	var (
		mu      sync.Mutex
		all     []time.Duration
		stop    atomic.Bool
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 4096)
			for !stop.Load() {
				t := time.Now()
				if err := op(); err != nil {
					errOnce.Do(func() { first = err })
					stop.Store(true)
					break
				}
				lat = append(lat, time.Since(t))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	if first != nil {
		return percentiles{}, first
	}
	if len(all) == 0 {
		return percentiles{}, errors.New("no operation finished")
	}
	slices.Sort(all)
	at := func(q float64) time.Duration {
		return all[min(len(all)-1, int(q*float64(len(all))))].Round(time.Microsecond)
	}
	return percentiles{N: len(all), P50: at(0.50), P99: at(0.99)}, nil
}

// --- keys ----------------------------------------------------------------------

// mix is splitmix64's finalizer: 16 random-looking bytes from an index, as
// the keyer's hashes spread keys over the LSM tree.
func mix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

func keyFrom(i, domain uint64) dedupe.Key {
	var k dedupe.Key
	binary.LittleEndian.PutUint64(k[:8], mix(i^domain))
	binary.LittleEndian.PutUint64(k[8:], mix(i+domain))
	return k
}

// fillKey is the fill's i-th key; freshKey a key the fill never wrote.
func fillKey(i uint64) dedupe.Key  { return keyFrom(i, 0x51ED27A3C4B1F00D) }
func freshKey(i uint64) dedupe.Key { return keyFrom(i, 0x0DDBA11CAFEF00D5) }

// --- the fill --------------------------------------------------------------

// runFill fills dir in a child process and kills it (SIGKILL) once it says
// it is done, leaving the directory as a crash does; it returns the fill's
// time and the child's CPU time.
func runFill(self, dir string, o options) (time.Duration, time.Duration, error) {
	cmd := exec.Command(self, "-fill", "-dir", dir, "-records", fmt.Sprint(o.records),
		"-fill-workers", fmt.Sprint(o.fillWorkers), "-result", o.result)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	took := time.Since(t0)
	cmd.Process.Kill()
	cmd.Wait()
	if err != nil || line != "filled\n" {
		return 0, 0, fmt.Errorf("the filling process ended without filling (%q, %w)", line, err)
	}
	u := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(syscall.TimevalToNsec(u.Utime) + syscall.TimevalToNsec(u.Stime))
	return took, cpu, nil
}

// fillChild fills a directory, says so on its stdout, and waits to be
// killed.
func fillChild(args []string) error {
	fs := flag.NewFlagSet("fill", flag.ContinueOnError)
	dir := fs.String("dir", "", "Badger directory")
	records := fs.Int("records", 0, "records to write")
	workers := fs.Int("fill-workers", 2, "")
	shape := fs.String("result", "gate", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := fill(*dir, *records, *workers, *shape); err != nil {
		return err
	}
	fmt.Println("filled")
	select {} // until killed
}

const fillBatch = 2000

// fill writes n committed records into a Badger ledger in dir through the
// store's batch API, workers batches at once, without fsyncs.
//
// It leaves the ledger open: its process is killed next.
func fill(dir string, n, workers int, shape string) error {
	db, err := badgerstore.Open(dir, badgerstore.OpenOptions{})
	if err != nil {
		return err
	}
	l, err := badgerstore.New(db, badgerstore.Options{NoSync: true})
	if err != nil {
		return err
	}
	ctx := context.Background()
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
		done    atomic.Int64
	)
	progress := time.NewTicker(30 * time.Second)
	defer progress.Stop()
	go func() {
		for range progress.C {
			fmt.Fprintf(os.Stderr, "ledger10m: fill %d of %d\n", done.Load(), n)
		}
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			begins := make([]ledger.BeginRequest, fillBatch)
			commits := make([]ledger.CommitRequest, fillBatch)
			for {
				i := int(next.Add(fillBatch)) - fillBatch
				if i >= n {
					return
				}
				m := min(fillBatch, n-i)
				for j := range m {
					begins[j] = ledger.BeginRequest{Key: fillKey(uint64(i + j)), Options: ledger.BeginOptions{Owner: "fill", Lease: time.Minute, Volatile: true}}
				}
				for j, r := range l.BeginBatch(ctx, begins[:m]) {
					if r.Err == nil && r.Claim.Status != ledger.StatusNew {
						r.Err = fmt.Errorf("fill key %d: %v", i+j, r.Claim.Status)
					}
					if r.Err != nil {
						errOnce.Do(func() { first = r.Err })
						return
					}
					commits[j] = ledger.CommitRequest{Key: begins[j].Key, Token: r.Claim.Lease.Token, Result: resultOf(shape, uint64(i+j))}
				}
				for _, err := range l.CommitBatch(ctx, commits[:m]) {
					if err != nil {
						errOnce.Do(func() { first = err })
						return
					}
				}
				done.Add(int64(m))
			}
		}()
	}
	wg.Wait()
	return first
}

// --- the sweep -------------------------------------------------------------

type sweepResult struct {
	GC, GCCPU           time.Duration
	GCResult            string
	Flatten, FlattenCPU time.Duration
	Before, After       int64
	Moved               int64  // bytes of tables in levels above the last that held any, before the compaction
	Levels              string // tables and bytes per level, before the compaction
}

// sweep opens the ledger's database as app.OpenLedger does and runs one
// value-log GC pass (as its collector: until Badger has nothing to
// rewrite) and a full compaction.
func sweep(dir string) (*sweepResult, error) {
	db, err := badgerstore.Open(dir, badgerstore.OpenOptions{})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var r sweepResult
	t, c := time.Now(), procstat.CPU()
	rewrites := 0
	for {
		err := db.RunValueLogGC(0.5)
		if err != nil {
			r.GCResult = fmt.Sprintf("%d files rewritten, then %v", rewrites, err)
			break
		}
		rewrites++
	}
	r.GC, r.GCCPU = time.Since(t), procstat.CPU()-c
	if r.Before, _, err = du(dir); err != nil {
		return nil, err
	}
	levels := db.Levels()
	last := 0
	for _, li := range levels {
		if li.NumTables > 0 {
			last = li.Level
		}
	}
	for _, li := range levels {
		if li.NumTables > 0 {
			r.Levels += fmt.Sprintf("L%d %d tables %s; ", li.Level, li.NumTables, mib(li.Size))
			if li.Level < last {
				r.Moved += li.Size
			}
		}
	}
	t, c = time.Now(), procstat.CPU()
	if err := db.Flatten(2); err != nil {
		return nil, err
	}
	r.Flatten, r.FlattenCPU = time.Since(t), procstat.CPU()-c
	if r.After, _, err = du(dir); err != nil {
		return nil, err
	}
	return &r, nil
}

// --- helpers -----------------------------------------------------------------

// rssSplit returns this process's anonymous and file-backed resident
// memory, from /proc/self/status (RssAnon, RssFile); zeros where that is
// not available.
func rssSplit() (anon, file uint64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "RssAnon":
			anon = kb << 10
		case "RssFile":
			file = kb << 10
		}
	}
	return anon, file
}

// journalEntry is the size of an entry of badgerstore's claims journal.
const journalEntry = 56

// journalBytes is the size of the claims journal files in dir.
func journalBytes(dir string) (int64, error) {
	names, err := filepath.Glob(filepath.Join(dir, "oncegate-claims-*.journal"))
	var n int64
	for _, name := range names {
		if fi, err := os.Stat(name); err == nil {
			n += fi.Size()
		}
	}
	return n, err
}

// du returns the bytes allocated to the files under dir and their apparent
// size.
func du(dir string) (alloc, apparent int64, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		apparent += fi.Size()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			alloc += st.Blocks * 512
		} else {
			alloc += fi.Size()
		}
		return nil
	})
	return alloc, apparent, err
}

func mib[T int64 | uint64](b T) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := bytes.Fields(b)
	if len(f) < 3 {
		return "unknown"
	}
	return string(bytes.Join(f[:3], []byte(" ")))
}
