// Command window compares window.Window with the sets a user would write
// instead (package altset): SeenOrAdd throughput at a steady state of live
// keys, one key at a time and (window-batch) 16 keys at a time through
// SeenOrAddBatch, at each GOMAXPROCS, as a ratio to xsync measured in the
// same run, with allocations per operation and memory per live key.
//
// With -long it measures instead one long-lived set of each kind at a
// steady state with keys expiring, the garbage collector at its own rate,
// on one clock and on each set's own (long.go).
//
// See README.md for how to run it and how to read the table.
package main

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/oncegate/oncegate/bench/window/altset"
	"github.com/oncegate/oncegate/pkg/dedupe/window"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := run
	if isLong(os.Args[1:]) {
		r = runLong
	}
	if err := r(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "window:", err)
		os.Exit(1)
	}
}

const seed = 0x5eed_0f_0ace9a7e

type config struct {
	lives  []int
	dups   []int // percent
	procs  []int
	impls  []altset.Impl
	dur    time.Duration
	warmup time.Duration
	reps   int
	csv    string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("window", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg                      config
		lives, dups, procs, impl string
	)
	fs.StringVar(&lives, "live", "1M", "live set sizes, comma-separated (K = 1,000, M = 1,000,000), e.g. 1M,10M")
	fs.StringVar(&dups, "dup", "0,10,90", "shares of operations that repeat a live key, in percent, comma-separated")
	fs.StringVar(&procs, "procs", "1,2", "GOMAXPROCS values, comma-separated; each runs that many goroutines")
	fs.StringVar(&impl, "impl", "window,window-batch,xsync,syncmap,mutexmap,otter", "sets to compare, comma-separated (window-batch: the window through SeenOrAddBatch, 16 keys at a time)")
	fs.DurationVar(&cfg.dur, "dur", 400*time.Millisecond, "measured time per cell and run")
	fs.DurationVar(&cfg.warmup, "warmup", 100*time.Millisecond, "unmeasured time before each measurement")
	fs.IntVar(&cfg.reps, "reps", 3, "runs per cell; the table shows the median")
	fs.StringVar(&cfg.csv, "csv", "", "also write the results to this CSV file")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.lives, err = altset.ParseCounts(lives); err != nil {
		return cfg, fmt.Errorf("-live: %w", err)
	}
	if cfg.dups, err = parseInts(dups, 0, 100); err != nil {
		return cfg, fmt.Errorf("-dup: %w", err)
	}
	if cfg.procs, err = parseInts(procs, 1, 1024); err != nil {
		return cfg, fmt.Errorf("-procs: %w", err)
	}
	all := append([]altset.Impl{windowImpl(), windowBatchImpl()}, altset.Alternatives()...)
	for name := range strings.SplitSeq(impl, ",") {
		i := slices.IndexFunc(all, func(im altset.Impl) bool { return im.Name == strings.TrimSpace(name) })
		if i < 0 {
			return cfg, fmt.Errorf("-impl: unknown set %q", name)
		}
		cfg.impls = append(cfg.impls, all[i])
	}
	if cfg.dur <= 0 || cfg.warmup < 0 || cfg.reps < 1 {
		return cfg, errors.New("-dur must be positive, -warmup not negative, -reps at least 1")
	}
	return cfg, nil
}

func parseInts(s string, lo, hi int) ([]int, error) {
	var ns []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%q: want whole numbers from %d to %d", f, lo, hi)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

func windowImpl() altset.Impl {
	return altset.Impl{Name: "window", New: func(capacity int, ttl time.Duration) (altset.Set, error) {
		w, err := window.New(window.Options{Capacity: capacity, TTL: ttl})
		if err != nil {
			return nil, err
		}
		return w, nil
	}}
}

// batched is a Window driven through SeenOrAddBatch in batches of
// batchKeys, as a pull consumer that fetched that many messages would.
type batched struct{ *window.Window }

const batchKeys = 16

// batch runs SeenOrAddBatch over keys in batches, setting seen[i] for
// keys[i], and returns how many were seen.
func (b batched) batch(keys []uint64, seen []bool) int {
	n := 0
	for len(keys) > 0 {
		c := min(len(keys), batchKeys)
		n += b.SeenOrAddBatch(keys[:c], seen[:c])
		keys, seen = keys[c:], seen[c:]
	}
	return n
}

func windowBatchImpl() altset.Impl {
	return altset.Impl{Name: "window-batch", New: func(capacity int, ttl time.Duration) (altset.Set, error) {
		w, err := window.New(window.Options{Capacity: capacity, TTL: ttl})
		if err != nil {
			return nil, err
		}
		return batched{w}, nil
	}}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	res := newResults()
	start := time.Now()
	clockCost := timeNowCost()
	// Interleave: every run of a live set size measures each set in turn,
	// starting from a different one each run, so noise on the machine hits
	// them all alike. Only one set exists at a time, so the garbage
	// collector never scans another set's heap on a set's time.
	err = func() error {
		for _, live := range cfg.lives {
			for rep := range cfg.reps {
				for k := range cfg.impls {
					impl := cfg.impls[(k+rep)%len(cfg.impls)]
					t := time.Now()
					if rep == 0 {
						if err := measureMemory(impl, live, res); err != nil {
							return err
						}
					}
					if err := runBlock(ctx, cfg, impl, live, res); err != nil {
						return err
					}
					fmt.Fprintf(stderr, "live=%s run %d/%d %-8s %5.1fs (total %.0fs)\n",
						altset.FormatCount(live), rep+1, cfg.reps, impl.Name, time.Since(t).Seconds(), time.Since(start).Seconds())
				}
			}
		}
		return nil
	}()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	interrupted := err != nil
	if err := res.print(stdout, cfg, clockCost, interrupted); err != nil {
		return err
	}
	if cfg.csv != "" {
		return res.writeCSV(cfg)
	}
	return nil
}

// windowClock says which sets read time.Since: all but the window, if a
// window of the benchmark's TTL reads the counter.
func windowClock() string {
	if windowReadsCounter(altset.TTL) {
		return "every set but the window, which reads the CPU's time-stamp counter (" + noCounterHow + " to keep it on time.Since)"
	}
	return "every set, the window too"
}

// timeNowCost returns what one time.Since costs, which every set pays once
// per operation.
func timeNowCost() time.Duration {
	const n = 1 << 20
	base := time.Now()
	var sink time.Duration
	t := time.Now()
	for range n {
		sink += time.Since(base)
	}
	el := time.Since(t)
	_ = sink
	return el / n
}

// measureMemory builds a set of impl made for exactly live keys, holding
// them, and records its memory per live key.
func measureMemory(impl altset.Impl, live int, res *results) error {
	runtime.GOMAXPROCS(runtime.NumCPU())
	heap, table, err := altset.MemoryPerKey(impl, live, seed)
	if err != nil {
		return err
	}
	m := memCost{heap: heap, table: table}
	res.mem[memKey{live, impl.Name}] = m
	freeMemory()
	return nil
}

func freeMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// runBlock builds a set of impl at live keys and measures every (dup, procs)
// cell on it, replacing it with a new one whenever it has taken its budget of
// fresh keys.
func runBlock(ctx context.Context, cfg config, impl altset.Impl, live int, res *results) error {
	wl := altset.NewWorkload(live, 0, seed)
	var (
		s         altset.Set
		evictions uint64
	)
	drop := func() {
		if w, ok := s.(*window.Window); ok {
			evictions += w.Stats().Evictions
		}
		altset.Close(s)
		s = nil
		runtime.GC() // collect it now, not during a measurement
	}
	build := func() error {
		if s != nil {
			drop()
		}
		var err error
		if s, err = impl.New(wl.MaxKeys(), altset.TTL); err != nil {
			return fmt.Errorf("%s: %w", impl.Name, err)
		}
		if seen := wl.Prefill(s); seen != 0 {
			return fmt.Errorf("%s: %d of %d new keys reported seen while prefilling", impl.Name, seen, live)
		}
		return nil
	}
	runtime.GOMAXPROCS(runtime.NumCPU())
	if err := build(); err != nil {
		return err
	}
	defer func() {
		drop()
		freeMemory()
		res.evictions[memKey{live, impl.Name}] += evictions
	}()

	for _, dup := range cfg.dups {
		wl.Dup = float64(dup) / 100
		for _, procs := range cfg.procs {
			runtime.GOMAXPROCS(procs)
			lanes := altset.NewLanes(procs, wl.RoundSize(procs))
			hits := make([]int, procs)
			seenBuf := make([][]bool, procs)
			for g := range seenBuf {
				seenBuf[g] = make([]bool, batchKeys)
			}
			// measure runs rounds until d of them have been timed.
			measure := func(d time.Duration) (sample, error) {
				var acc sample
				var m0, m1 runtime.MemStats
				for acc.elapsed < d {
					if err := ctx.Err(); err != nil {
						return acc, err
					}
					if !wl.Next(lanes) {
						if err := build(); err != nil {
							return acc, err
						}
						if !wl.Next(lanes) {
							return acc, fmt.Errorf("a round of %d×%d operations does not fit a new set", procs, len(lanes[0].Keys))
						}
					}
					for g := range lanes {
						if len(seenBuf[g]) < len(lanes[g].Keys) {
							seenBuf[g] = make([]bool, len(lanes[g].Keys)) // batch sets seen[i] for every key
						}
					}
					runtime.ReadMemStats(&m0)
					t := time.Now()
					var wg sync.WaitGroup
					for g := range lanes {
						wg.Go(func() {
							if b, ok := s.(batched); ok {
								hits[g] = b.batch(lanes[g].Keys, seenBuf[g])
								return
							}
							h := 0
							for _, k := range lanes[g].Keys {
								if s.SeenOrAdd(k) {
									h++
								}
							}
							hits[g] = h
						})
					}
					wg.Wait()
					acc.elapsed += time.Since(t)
					runtime.ReadMemStats(&m1)
					acc.allocs += m1.Mallocs - m0.Mallocs
					for g := range lanes {
						acc.ops += len(lanes[g].Keys)
						acc.dups += lanes[g].Dups
						acc.hits += hits[g]
					}
				}
				return acc, nil
			}
			if _, err := measure(cfg.warmup); err != nil {
				return err
			}
			sm, err := measure(cfg.dur)
			if err != nil {
				return err
			}
			c := cell{live, dup, procs}
			res.add(c, impl.Name, sm)
		}
	}
	return nil
}

type cell struct{ live, dup, procs int }

type memKey struct {
	live int
	impl string
}

type memCost struct{ heap, table float64 }

// A sample is one measurement of one cell.
type sample struct {
	ops, dups, hits int
	allocs          uint64
	elapsed         time.Duration
}

func (s sample) mops() float64          { return float64(s.ops) / s.elapsed.Seconds() / 1e6 }
func (s sample) allocsPerOp() float64   { return float64(s.allocs) / float64(s.ops) }
func (s sample) missedDups() (int, int) { return s.dups - s.hits, s.dups }

type results struct {
	cells     []cell
	samples   map[cell]map[string][]sample
	mem       map[memKey]memCost
	evictions map[memKey]uint64
}

func newResults() *results {
	return &results{
		samples:   make(map[cell]map[string][]sample),
		mem:       make(map[memKey]memCost),
		evictions: make(map[memKey]uint64),
	}
}

func (r *results) add(c cell, impl string, s sample) {
	if r.samples[c] == nil {
		r.samples[c] = make(map[string][]sample)
		r.cells = append(r.cells, c)
	}
	r.samples[c][impl] = append(r.samples[c][impl], s)
}

// median returns the median of f over the samples of impl in c, and whether
// there are any.
func (r *results) median(c cell, impl string, f func(sample) float64) (float64, bool) {
	ss := r.samples[c][impl]
	if len(ss) == 0 {
		return 0, false
	}
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], true
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, true
}

// ratio returns impl's median throughput in c over the reference's.
func (r *results) ratio(c cell, impl string) (float64, bool) {
	m, ok := r.median(c, impl, sample.mops)
	ref, okRef := r.median(c, altset.Reference, sample.mops)
	if !ok || !okRef || ref == 0 {
		return 0, false
	}
	return m / ref, true
}

func (r *results) sortedCells() []cell {
	cells := slices.Clone(r.cells)
	slices.SortStableFunc(cells, func(a, b cell) int {
		if a.live != b.live {
			return a.live - b.live
		}
		if a.dup != b.dup {
			return a.dup - b.dup
		}
		return a.procs - b.procs
	})
	return cells
}

func (r *results) print(w io.Writer, cfg config, clockCost time.Duration, interrupted bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	names := make([]string, len(cfg.impls))
	for i, im := range cfg.impls {
		names[i] = im.Name
	}
	cells := r.sortedCells()
	fmt.Fprintf(w, "SeenOrAdd at a steady state of live keys: median of %d runs of %v per cell (after %v warm-up)\n",
		cfg.reps, cfg.dur, cfg.warmup)
	fmt.Fprintf(w, "%s %s/%s, %d CPUs; time.Since costs %v, once per operation in %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), clockCost, windowClock())
	if interrupted {
		fmt.Fprintln(w, "INTERRUPTED: partial results")
	}

	fmt.Fprintf(w, "\nMops/s (ratio to %s in the same run; above 1 is faster)\n", altset.Reference)
	fmt.Fprintf(tw, "live\tdup\tprocs\t%s\t\n", strings.Join(names, "\t"))
	for _, c := range cells {
		fmt.Fprintf(tw, "%s\t%d%%\t%d\t", altset.FormatCount(c.live), c.dup, c.procs)
		for _, name := range names {
			m, ok := r.median(c, name, sample.mops)
			if !ok {
				fmt.Fprint(tw, "-\t")
				continue
			}
			if q, ok := r.ratio(c, name); ok {
				fmt.Fprintf(tw, "%.2f (%.2fx)\t", m, q)
			} else {
				fmt.Fprintf(tw, "%.2f\t", m)
			}
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nallocs/op")
	fmt.Fprintf(tw, "live\tdup\tprocs\t%s\t\n", strings.Join(names, "\t"))
	for _, c := range cells {
		fmt.Fprintf(tw, "%s\t%d%%\t%d\t", altset.FormatCount(c.live), c.dup, c.procs)
		for _, name := range names {
			if a, ok := r.median(c, name, sample.allocsPerOp); ok {
				fmt.Fprintf(tw, "%.2f\t", a)
			} else {
				fmt.Fprint(tw, "-\t")
			}
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nbytes per live key (heap growth of a set made for exactly the live keys, holding them, after GC;")
	fmt.Fprintln(w, "window: heap growth, and in parentheses its table's bytes / live keys, the table being off the Go heap on Linux;")
	fmt.Fprintln(w, "two-generation sets hold up to twice this at a steady state)")
	fmt.Fprintf(tw, "live\t%s\t\n", strings.Join(names, "\t"))
	for _, live := range cfg.lives {
		fmt.Fprintf(tw, "%s\t", altset.FormatCount(live))
		for _, name := range names {
			m, ok := r.mem[memKey{live, name}]
			switch {
			case !ok:
				fmt.Fprint(tw, "-\t")
			case m.table > 0:
				fmt.Fprintf(tw, "%.1f (table %.1f)\t", m.heap, m.table)
			default:
				fmt.Fprintf(tw, "%.1f\t", m.heap)
			}
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	var notes []string
	for _, c := range cells {
		for _, name := range names {
			missed, dups := 0, 0
			for _, s := range r.samples[c][name] {
				m, d := s.missedDups()
				missed += m
				dups += d
			}
			if missed != 0 {
				notes = append(notes, fmt.Sprintf("live=%s dup=%d%% procs=%d %s: %d of %d duplicates reported new (%.3f%%)",
					altset.FormatCount(c.live), c.dup, c.procs, name, missed, dups, 100*float64(missed)/float64(dups)))
			}
		}
	}
	for _, live := range cfg.lives {
		if ev := r.evictions[memKey{live, "window"}]; ev > 0 {
			notes = append(notes, fmt.Sprintf("live=%s window: %d live keys evicted (it was made for every key the run adds: this is a bug)",
				altset.FormatCount(live), ev))
		}
	}
	if len(notes) == 0 {
		notes = append(notes, "every duplicate was reported seen; no set lost a live key")
	}
	if cfg.reps > 1 {
		notes = append(notes, r.spread(cells, names))
	}
	fmt.Fprintln(w, "\nchecks")
	for _, n := range notes {
		fmt.Fprintln(w, "  "+n)
	}
	return nil
}

// spread describes how far apart the runs of a cell were: (max-min)/median
// of Mops/s, its median over the cells and its worst.
func (r *results) spread(cells []cell, names []string) string {
	var all []float64
	worst, where := 0.0, ""
	for _, c := range cells {
		for _, name := range names {
			ss := r.samples[c][name]
			m, ok := r.median(c, name, sample.mops)
			if !ok || m == 0 || len(ss) < 2 {
				continue
			}
			lo, hi := ss[0].mops(), ss[0].mops()
			for _, s := range ss[1:] {
				lo, hi = min(lo, s.mops()), max(hi, s.mops())
			}
			sp := (hi - lo) / m
			all = append(all, sp)
			if sp > worst {
				worst = sp
				where = fmt.Sprintf("live=%s dup=%d%% procs=%d %s", altset.FormatCount(c.live), c.dup, c.procs, name)
			}
		}
	}
	if len(all) == 0 {
		return "run-to-run spread: no cell has two runs"
	}
	slices.Sort(all)
	msg := fmt.Sprintf("run-to-run spread, (max-min)/median of Mops/s: %.0f%% for the median cell, %.0f%% at worst (%s)",
		100*all[len(all)/2], 100*worst, where)
	if all[len(all)/2] > 0.2 {
		msg += "; the machine was noisy: rerun with more -reps, or when it is idle"
	}
	return msg
}

func (r *results) writeCSV(cfg config) (err error) {
	f, err := os.Create(cfg.csv)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	cw := csv.NewWriter(f)
	cw.Write([]string{"live", "dup_pct", "procs", "impl", "mops_median", "ratio_" + altset.Reference,
		"mops_runs", "allocs_per_op", "heap_bytes_per_key", "table_bytes_per_key", "dups", "dups_missed"})
	for _, c := range r.sortedCells() {
		for _, im := range cfg.impls {
			ss := r.samples[c][im.Name]
			if len(ss) == 0 {
				continue
			}
			m, _ := r.median(c, im.Name, sample.mops)
			a, _ := r.median(c, im.Name, sample.allocsPerOp)
			q, _ := r.ratio(c, im.Name)
			runs := make([]string, len(ss))
			missed, dups := 0, 0
			for i, s := range ss {
				runs[i] = strconv.FormatFloat(s.mops(), 'f', 3, 64)
				mi, d := s.missedDups()
				missed += mi
				dups += d
			}
			mem := r.mem[memKey{c.live, im.Name}]
			cw.Write([]string{
				strconv.Itoa(c.live), strconv.Itoa(c.dup), strconv.Itoa(c.procs), im.Name,
				strconv.FormatFloat(m, 'f', 3, 64), strconv.FormatFloat(q, 'f', 3, 64),
				strings.Join(runs, ";"), strconv.FormatFloat(a, 'f', 3, 64),
				strconv.FormatFloat(mem.heap, 'f', 1, 64), strconv.FormatFloat(mem.table, 'f', 1, 64),
				strconv.Itoa(dups), strconv.Itoa(missed),
			})
		}
	}
	cw.Flush()
	return cw.Error()
}
