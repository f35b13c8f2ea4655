package main

// The long-running mode (-long): every set is one long-lived set, measured
// at the steady state of a process that has run for a while — keys expiring
// under their TTL during the measurement, so each set pays for reclaiming
// (the window's sweeps and reused slots, the two-generation sets' swaps and
// the garbage of the generations they drop), and the garbage collector at
// the rate that steady state sets, with no collection forced before a
// measurement. The sets under comparison live side by side in one process
// and are measured in turn, round after round; a round's ratio is the set's
// throughput over the reference's in that round, and the table gives the
// median over the rounds.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/oncegate/oncegate/bench/window/altset"
	"github.com/oncegate/oncegate/pkg/dedupe/window"
)

// Clock modes of -long.
const (
	clockEqual     = "equal"      // every set reads one clock the bench advances with the keys it adds
	clockNative    = "native"     // each set reads the clock its users get: the window its default, the others time.Since
	clockNoCounter = "native-off" // native, in a build with -tags oncegate_nocounter: the window on time.Since too
	clockBoth      = "both"       // equal, native, and native-off where the window would read the counter; each in a process of its own
)

type longConfig struct {
	live       int
	dup        int // percent
	procs      int
	impls      []altset.Impl
	dur        time.Duration
	warmup     time.Duration
	reps       int
	clock      string
	cpuprofile string
}

func parseLongFlags(args []string, stderr io.Writer) (longConfig, error) {
	fs := flag.NewFlagSet("window -long", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg        longConfig
		live, impl string
	)
	fs.Bool("long", true, "the long-running mode (this one)")
	fs.StringVar(&live, "live", "1M", "keys live at the steady state: each set's TTL is set so that this many keys arrive within it")
	fs.IntVar(&cfg.dup, "dup", 10, "share of operations that repeat a live key, in percent")
	fs.IntVar(&cfg.procs, "procs", 2, "GOMAXPROCS, and goroutines running SeenOrAdd")
	fs.StringVar(&impl, "impl", "window,window-batch,xsync", "sets to compare, comma-separated (window, window-batch, xsync, syncmap, mutexmap, otter); xsync is the reference")
	fs.DurationVar(&cfg.dur, "dur", time.Second, "measured time per set and rep (the sets take turns, a round of a few ms each)")
	fs.DurationVar(&cfg.warmup, "warmup", 300*time.Millisecond, "unmeasured time before the first measurement (native: at least 2 TTLs)")
	fs.IntVar(&cfg.reps, "reps", 11, "reps; the table gives the median of the reps' ratios")
	fs.StringVar(&cfg.clock, "clock", clockBoth, "clock mode: equal (every set on the bench's clock), native (each set on the clock its users read), native-off (native with the window's counter off), both (all that apply)")
	fs.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write a CPU profile of the measured rounds to this file (one clock mode only)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.live, err = altset.ParseCount(live); err != nil {
		return cfg, fmt.Errorf("-live: %w", err)
	}
	if cfg.dup < 0 || cfg.dup > 90 {
		return cfg, errors.New("-dup: want 0 to 90")
	}
	if cfg.procs < 1 || cfg.reps < 1 || cfg.dur <= 0 || cfg.warmup < 0 {
		return cfg, errors.New("-procs and -reps must be at least 1, -dur positive, -warmup not negative")
	}
	switch cfg.clock {
	case clockEqual, clockNative, clockNoCounter, clockBoth:
	default:
		return cfg, fmt.Errorf("-clock: %q, want equal, native, native-off or both", cfg.clock)
	}
	if cfg.clock == clockNoCounter && !noCounterBuild {
		return cfg, errors.New("-clock native-off: this build's window reads the counter where it can; run " + noCounterHow + " -long -clock native-off (-clock both builds it so)")
	}
	all := append([]altset.Impl{windowImpl(), windowBatchImpl()}, altset.Alternatives()...)
	for name := range strings.SplitSeq(impl, ",") {
		i := slices.IndexFunc(all, func(im altset.Impl) bool { return im.Name == strings.TrimSpace(name) })
		if i < 0 {
			return cfg, fmt.Errorf("-impl: unknown set %q", name)
		}
		cfg.impls = append(cfg.impls, all[i])
	}
	if !slices.ContainsFunc(cfg.impls, func(im altset.Impl) bool { return im.Name == altset.Reference }) {
		return cfg, fmt.Errorf("-impl: the reference, %s, must be among the sets", altset.Reference)
	}
	if cfg.clock == clockEqual || cfg.clock == clockBoth {
		for _, im := range cfg.impls {
			if _, ok := clocked[im.Name]; !ok {
				return cfg, fmt.Errorf("-impl: %s cannot read the bench's clock (-clock equal): only window, window-batch and xsync can", im.Name)
			}
		}
	}
	return cfg, nil
}

// isLong reports whether args ask for the long-running mode.
func isLong(args []string) bool {
	for _, a := range args {
		if a == "-long" || a == "--long" || a == "-long=true" || a == "--long=true" {
			return true
		}
	}
	return false
}

const longHeader = `Long-running mode: each set is one long-lived set at a steady state of %[1]s live keys, %[2]d%% of operations repeating one of them,
GOMAXPROCS %[3]d. Keys expire under their TTL all the time, so every set pays for reclaiming (the window its sweeps and reused slots;
the two-generation sets their swaps, the generation they allocate each TTL and the garbage of the one they drop). No garbage
collection is forced before a measurement: the collector runs at the rate the sets' steady state sets. The sets live side by side in
one process and take turns, one round of operations (live/64 keys, a few ms) at a time, so that noise from the rest of the machine
hits them alike: %[4]d reps of %[5]v of measured time per set (after %[6]v unmeasured); a rep's ratio is a set's throughput over xsync's
in that rep; the tables give the medians. A duplicate repeats one of the newest %[1]s keys that is younger than the TTL.
Clock modes, each in a process of its own (a window decides its clock once per process):
  equal       every set reads the same clock: one the bench advances between rounds of operations by TTL/%[1]s per new key, so
              exactly %[1]s keys are live at every moment whatever a set's speed, and the TTL is 10 minutes of that clock. Every
              set reads it the same way, the window's way (a call of a func value returning a time.Time, an atomic
              load inside, and its difference from the start): the sets' own work compared, the clock's cost equal and small.
  native      each set reads the clock its users get: the window its default (the CPU's time-stamp counter where Linux keeps
              time with it, see window.Options.Now; else time.Since), the others time.Since, as their users would write
              it. The TTL is real time: both sets are fed new keys at one fixed rate (the rate that keeps them busy half the
              time together, from their speeds measured first) and TTL = %[1]s / that rate, so %[1]s keys are live in each; time spent waiting for the next keys is
              not measured. Feeding them as fast as they go instead, the live keys would follow each set's speed, which drifts
              on a busy machine.
  native-off  native in a build with -tags oncegate_nocounter (the window on time.Since too); run only where the window would read the
              counter: native against native-off is what the counter clock is worth.
`

// runLong is the long-running mode. With -clock both it runs itself twice,
// once per clock mode, and summarizes.
func runLong(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseLongFlags(args, stderr)
	if err != nil {
		return err
	}
	if cfg.clock != clockBoth {
		return longMode(ctx, cfg, stdout, stderr)
	}
	fmt.Fprintf(stdout, longHeader, altset.FormatCount(cfg.live), cfg.dup, cfg.procs, cfg.reps, cfg.dur, cfg.warmup)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	modes := []string{clockEqual, clockNative}
	exes := map[string]string{clockEqual: exe, clockNative: exe}
	if windowReadsCounter(time.Minute) {
		dir, err := os.MkdirTemp("", "window-nocounter-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		bin, err := buildNoCounter(ctx, dir)
		if err != nil {
			return err
		}
		modes = append(modes, clockNoCounter)
		exes[clockNoCounter] = bin
	} else {
		fmt.Fprintln(stdout, "\n(no native-off: the window reads time.Since here already; the kernel does not keep time with the CPU's counter, or this is an oncegate_nocounter build)")
	}
	ratios := map[string]float64{}
	for _, mode := range modes {
		childArgs := append(slices.Clone(args), "-clock", mode)
		cmd := exec.CommandContext(ctx, exes[mode], childArgs...)
		cmd.Env = os.Environ()
		cmd.Stderr = stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if f := strings.Fields(line); len(f) == 3 && f[0] == "ratio:" {
				if x, err := strconv.ParseFloat(f[2], 64); err == nil {
					ratios[mode+"/"+f[1]] = x
				}
				continue
			}
			fmt.Fprintln(stdout, line)
		}
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("clock %s: %w", mode, err)
		}
	}
	fmt.Fprintln(stdout)
	if e, ok := ratios[clockEqual+"/window"]; ok {
		verdict := "MET"
		if e < 1.5 {
			verdict = "NOT MET"
		}
		fmt.Fprintf(stdout, "goal: window >= 1.5x xsync at equal clock with expiry (median of the reps' ratios): %.2fx, %s", e, verdict)
		if b, ok := ratios[clockEqual+"/window-batch"]; ok {
			fmt.Fprintf(stdout, " (window-batch %.2fx)", b)
		}
		fmt.Fprintln(stdout)
	}
	n, okN := ratios[clockNative+"/window"]
	off, okOff := ratios[clockNoCounter+"/window"]
	switch {
	case okN && okOff:
		fmt.Fprintf(stdout, "the counter clock: window/xsync %.2fx on the counter, %.2fx with the window on time.Since: worth %+.0f%% to the window here\n", n, off, 100*(n/off-1))
	case okN:
		fmt.Fprintf(stdout, "the counter clock: not measurable here (the window reads time.Since by default on this machine); native window/xsync %.2fx\n", n)
	}
	return nil
}

// equalTTL is the TTL of -clock equal, on the bench's clock.
const equalTTL = 10 * time.Minute

// vclock is the bench's clock for -clock equal: nanoseconds, advanced by
// the stream between rounds.
type vclock struct{ ns atomic.Int64 }

func (c *vclock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// clocked makes the sets that can read the bench's clock.
var clocked = map[string]func(capacity int, ttl time.Duration, c *vclock) (altset.Set, error){
	"window": func(capacity int, ttl time.Duration, c *vclock) (altset.Set, error) {
		w, err := window.New(window.Options{Capacity: capacity, TTL: ttl, Now: c.Now})
		if err != nil {
			return nil, err
		}
		return w, nil
	},
	"window-batch": func(capacity int, ttl time.Duration, c *vclock) (altset.Set, error) {
		w, err := window.New(window.Options{Capacity: capacity, TTL: ttl, Now: c.Now})
		if err != nil {
			return nil, err
		}
		return batched{w}, nil
	},
	"xsync": func(capacity int, ttl time.Duration, c *vclock) (altset.Set, error) {
		// The same read as the window's: a call of a func value, then the
		// time since the start.
		now := c.Now
		base := now()
		return altset.NewXsyncClock(capacity, ttl, func() int64 { return int64(now().Sub(base)) }), nil
	},
}

// longSet is one set under test with its workload.
type longSet struct {
	impl altset.Impl
	ttl  time.Duration
	vc   *vclock // the bench's clock, with -clock equal

	paceStart time.Time // on real clocks: when the set began to be fed at the fixed rate
	paced     uint64    // new keys since paceStart
	s         altset.Set
	wl        *stream
	lanes     []altset.Lane
	seen      [][]bool
	hits      []int
	fresh     []int      // fresh keys a lane's set reported seen (false positives)
	missedAt  [][]int    // per lane, the operations whose duplicate was reported new
	src       [][]uint64 // per lane, the history position each duplicate repeats
	rounds    []longSample
}

type longSample struct {
	ops, dups, missed, falsePos int
	late                        int // duplicates reported new that may have expired while a slow round ran (real clocks)
	elapsed, wall               time.Duration
	gcs                         uint32
	fresh                       int
}

func (s longSample) mops() float64 { return float64(s.ops) / s.elapsed.Seconds() / 1e6 }

func longMode(ctx context.Context, cfg longConfig, stdout, stderr io.Writer) error {
	runtime.GOMAXPROCS(cfg.procs)
	clockCost := timeNowCost()
	dup := float64(cfg.dup) / 100
	var heapBase runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heapBase)
	sets := make([]*longSet, len(cfg.impls))
	for i, im := range cfg.impls {
		sets[i] = &longSet{impl: im, ttl: equalTTL}
	}
	build := func() error {
		for i, ls := range sets {
			if ls.s != nil {
				altset.Close(ls.s)
			}
			if err := ls.build(cfg, dup, uint64(i)); err != nil {
				return err
			}
		}
		return nil
	}
	var rate float64 // new keys per second of each set, on real clocks
	if cfg.clock != clockEqual {
		// On real clocks the keys live at a time are the rate of new keys
		// times the TTL, and a set's speed drifts on a busy machine, so the
		// sets are fed at one fixed rate, half what the slower one managed
		// while the sets took turns unpaced, with TTL = live / rate; the
		// time a set waits for its next keys is not measured.
		for _, ls := range sets {
			ls.ttl = time.Duration(float64(cfg.live) / 1e6 * float64(time.Second))
		}
		if err := build(); err != nil {
			return err
		}
		if _, err := turns(ctx, sets, 500*time.Millisecond, 0, 0); err != nil {
			return err
		}
		sm, err := turns(ctx, sets, time.Second, 0, 0)
		if err != nil {
			return err
		}
		// Fed at rate, set i is busy rate/r_i of the time, r_i its new
		// keys per second of its own measured time: half the machine's
		// time for them all.
		var busy float64
		for i := range sets {
			busy += sm[i].elapsed.Seconds() / float64(sm[i].fresh)
			fmt.Fprintf(stderr, "%-12s unpaced: %.2f Mops/s, %.2fM new keys/s of its time (%d ops, %v)\n", sets[i].impl.Name, sm[i].mops(), float64(sm[i].fresh)/sm[i].elapsed.Seconds()/1e6, sm[i].ops, sm[i].elapsed)
		}
		rate = 0.5 / busy
		for _, ls := range sets {
			ls.ttl = time.Duration(float64(cfg.live) / rate * float64(time.Second))
		}
	}
	if err := build(); err != nil {
		return err
	}
	for _, ls := range sets {
		fmt.Fprintf(stderr, "%-12s TTL %v\n", ls.impl.Name, ls.ttl.Round(time.Millisecond))
		ls.paceStart = time.Now()
	}
	// Two TTLs of keys first, so that every set measures expiring keys
	// from the first round.
	warm := cfg.warmup
	if cfg.clock != clockEqual {
		warm = max(warm, 2*slices.MaxFunc(sets, func(a, b *longSet) int { return int(a.ttl - b.ttl) }).ttl)
	} else {
		for _, ls := range sets {
			if _, err := ls.runFresh(ctx, 2*cfg.live); err != nil {
				return err
			}
		}
	}
	if cfg.clock != clockEqual {
		warm = -warm // real time: two TTLs of it
	}
	if _, err := turns(ctx, sets, warm, 0, rate); err != nil {
		return err
	}
	if cfg.cpuprofile != "" {
		// The rounds only, not the calibration.
		f, err := os.Create(cfg.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	for rep := range cfg.reps {
		sm, err := turns(ctx, sets, cfg.dur, rep, rate)
		if err != nil {
			return err
		}
		for i, ls := range sets {
			ls.rounds = append(ls.rounds, sm[i])
			fmt.Fprintf(stderr, "rep %d/%d %-12s %6.2f Mops/s  %4.1f GC/s\n", rep+1, cfg.reps, ls.impl.Name, sm[i].mops(), float64(sm[i].gcs)/sm[i].wall.Seconds())
		}
	}
	if cfg.cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	// Memory: the heap the sets hold, after one collection (only now).
	var heapNow runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heapNow)
	printLong(stdout, cfg, sets, clockCost, int64(heapNow.HeapAlloc)-int64(heapBase.HeapAlloc))
	for _, ls := range sets {
		altset.Close(ls.s)
	}
	return nil
}

// turns runs the sets in turn, one round of operations each (a few
// milliseconds), starting with set first, until each has run d of measured
// time; it returns what each did. Taking turns round by round, the sets see
// the same noise from the rest of the machine. With a rate, a set whose new
// keys are ahead of rate per second since its paceStart skips its turn, and
// when all are ahead the loop sleeps.
//
// A negative d is wall time instead: the turns go on until -d has passed.
func turns(ctx context.Context, sets []*longSet, d time.Duration, first int, rate float64) ([]longSample, error) {
	acc := make([]longSample, len(sets))
	gc := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	start := time.Now()
	for {
		more, ran := false, false
		for k := range sets {
			i := (k + first) % len(sets)
			done := (d >= 0 && acc[i].elapsed >= d) || (d < 0 && time.Since(start) >= -d)
			if !done {
				more = true
			}
			if done && (rate == 0 || d < 0) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if ls := sets[i]; rate > 0 {
				// Fed at rate whether measured or not, so its live keys
				// stay steady while the others finish their turns; a set
				// that fell behind (a stall) is not fed a burst to catch
				// up, which would crowd the window past its capacity.
				allowed := rate * time.Since(ls.paceStart).Seconds()
				if float64(ls.paced) > allowed {
					continue
				}
				if lag := float64(2 * ls.roundKeys()); float64(ls.paced) < allowed-lag {
					ls.paced = uint64(allowed - lag)
				}
			}
			ran = true
			f0 := acc[i].fresh
			metrics.Read(gc)
			g0 := gc[0].Value.Uint64()
			sets[i].round(&acc[i])
			metrics.Read(gc)
			acc[i].gcs += uint32(gc[0].Value.Uint64() - g0)
			sets[i].paced += uint64(acc[i].fresh - f0)
		}
		if !more || (d < 0 && time.Since(start) >= -d) {
			break
		}
		if !ran {
			time.Sleep(200 * time.Microsecond)
		}
	}
	wall := time.Since(start)
	for i := range acc {
		acc[i].wall = wall
	}
	return acc, nil
}

func (ls *longSet) build(cfg longConfig, dup float64, seed uint64) error {
	var (
		s   altset.Set
		err error
	)
	if cfg.clock == clockEqual {
		ls.vc = new(vclock)
		s, err = clocked[ls.impl.Name](cfg.live, ls.ttl, ls.vc)
	} else {
		s, err = ls.impl.New(cfg.live, ls.ttl)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", ls.impl.Name, err)
	}
	ls.s = s
	ls.wl = newStream(cfg.live, dup, ls.ttl, 0x5eed+seed, ls.vc)
	size := max(cfg.live/64/cfg.procs, 256)
	ls.lanes = altset.NewLanes(cfg.procs, size)
	ls.seen = make([][]bool, cfg.procs)
	for i := range ls.seen {
		ls.seen[i] = make([]bool, size)
	}
	ls.hits = make([]int, cfg.procs)
	ls.missedAt = make([][]int, cfg.procs)
	ls.src = make([][]uint64, cfg.procs)
	for i := range ls.src {
		ls.src[i] = make([]uint64, size)
	}
	ls.fresh = make([]int, cfg.procs)
	return nil
}

// roundKeys returns the operations of one round.
func (ls *longSet) roundKeys() int { return len(ls.lanes) * len(ls.lanes[0].Keys) }

// runFresh runs rounds until n fresh keys were added.
func (ls *longSet) runFresh(ctx context.Context, n int) (longSample, error) {
	var acc longSample
	start := time.Now()
	for acc.fresh < n {
		if err := ctx.Err(); err != nil {
			return acc, err
		}
		ls.round(&acc)
	}
	acc.wall = time.Since(start)
	return acc, nil
}

// round runs one round of operations and adds what it did to acc.
func (ls *longSet) round(acc *longSample) {
	ls.wl.next(ls.lanes, ls.src, time.Now())
	t := time.Now()
	var wg sync.WaitGroup
	for g := range ls.lanes {
		wg.Go(func() {
			keys, dups := ls.lanes[g].Keys, ls.lanes[g].Dup
			h, fp := 0, 0
			if b, ok := ls.s.(batched); ok {
				seen := ls.seen[g]
				b.batch(keys, seen)
				for i, s := range seen[:len(keys)] {
					switch {
					case s && dups[i]:
						h++
					case s:
						fp++
					case dups[i]:
						ls.missedAt[g] = append(ls.missedAt[g], i)
					}
				}
			} else {
				for i, k := range keys {
					switch s := ls.s.SeenOrAdd(k); {
					case s && dups[i]:
						h++
					case s:
						fp++
					case dups[i]:
						ls.missedAt[g] = append(ls.missedAt[g], i)
					}
				}
			}
			ls.hits[g], ls.fresh[g] = h, fp
		})
	}
	wg.Wait()
	el := time.Since(t)
	ls.wl.roundTook(el)
	// A duplicate reported new is a miss if its key was certainly younger
	// than the TTL when it ran: added in a round that began less than the
	// TTL before this round ended. On real clocks, a round that stalled
	// (a busy machine) can outlast the margin the stream left, and a key
	// may then have expired before its duplicate ran: counted apart.
	end := time.Now()
	if ls.vc != nil {
		end = ls.vc.Now() // the bench's clock stands still during a round
	}
	young := ls.wl.youngFrom(end)
	for g := range ls.lanes {
		for _, i := range ls.missedAt[g] {
			if ls.src[g][i] >= young {
				acc.missed++
			} else {
				acc.late++
			}
		}
		ls.missedAt[g] = ls.missedAt[g][:0]
	}
	acc.elapsed += el
	for g := range ls.lanes {
		acc.ops += len(ls.lanes[g].Keys)
		acc.dups += ls.lanes[g].Dups
		acc.fresh += len(ls.lanes[g].Keys) - ls.lanes[g].Dups
		acc.falsePos += ls.fresh[g]
	}
}

// A stream generates rounds of operations for one long-lived set: a share
// dup of duplicates, each repeating a key added less than the TTL ago (with
// a margin for the round it lands in), and fresh keys otherwise. Fresh keys
// are the next positions of the history, as in altset.Workload; there is no
// budget, since keys expire.
type stream struct {
	live   uint64
	vc     *vclock // with -clock equal: advanced by TTL/live per fresh key after each round
	dup    float64
	ttl    time.Duration
	seed   uint64
	rng    uint64
	hist   uint64
	marks  []mark // the first position of each round and when it began, oldest first
	lastEl time.Duration
}

type mark struct {
	pos uint64
	at  time.Time
}

func newStream(live int, dup float64, ttl time.Duration, seed uint64, vc *vclock) *stream {
	return &stream{live: uint64(live), vc: vc, dup: dup, ttl: ttl, seed: seed, rng: seed}
}

func (s *stream) roundTook(d time.Duration) { s.lastEl = d }

// youngFrom returns the first history position of the keys certainly
// younger than the TTL at end: those of rounds that began after end - TTL.
func (s *stream) youngFrom(end time.Time) uint64 {
	for _, m := range s.marks {
		if m.at.After(end.Add(-s.ttl)) {
			return m.pos
		}
	}
	return s.hist
}

// next fills lanes with a round that begins at now (on the bench's clock,
// if the stream has one, whatever now says), and src[i][j] with the
// position a duplicate lanes[i].Keys[j] repeats.
func (s *stream) next(lanes []altset.Lane, src [][]uint64, now time.Time) {
	// A key is a safe duplicate if its round began after now - ttl + slack:
	// it is then younger than the TTL until the end of this round, which
	// lasts about as long as the last one. On the bench's clock, which
	// stands still during a round, no slack is needed but the clock's
	// resolution.
	slack := 3*s.lastEl + time.Millisecond
	if s.vc != nil {
		now, slack = s.vc.Now(), time.Nanosecond
	}
	cut := now.Add(-s.ttl + slack)
	i := 0
	for i < len(s.marks) && s.marks[i].at.Before(cut) {
		i++
	}
	s.marks = s.marks[i:]
	lo := s.hist
	if len(s.marks) > 0 {
		lo = s.marks[0].pos
	}
	if s.hist > s.live {
		lo = max(lo, s.hist-s.live) // and among the newest live keys
	}
	span := s.hist - lo
	s.marks = append(s.marks, mark{s.hist, now})
	var thresh uint64
	if s.dup > 0 && span > 0 {
		thresh = uint64(s.dup * (1 << 64))
	}
	pos := s.hist
	for i := range lanes {
		l := &lanes[i]
		l.Dups = 0
		for j := range l.Keys {
			if thresh > 0 && s.rand() < thresh {
				back, _ := bits.Mul64(s.rand(), span)
				src[i][j] = s.hist - 1 - back
				l.Keys[j], l.Dup[j] = altset.Key(s.seed, src[i][j]), true
				l.Dups++
			} else {
				l.Keys[j], l.Dup[j] = altset.Key(s.seed, pos), false
				pos++
			}
		}
	}
	if s.vc != nil {
		s.vc.ns.Add(int64(pos-s.hist) * int64(s.ttl) / int64(s.live))
	}
	s.hist = pos
}

func (s *stream) rand() uint64 {
	s.rng += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(s.rng, s.rng^0xe7037ed1a0b428db)
	return hi ^ lo
}

func printLong(w io.Writer, cfg longConfig, sets []*longSet, clockCost time.Duration, heapGrowth int64) {
	ref := sets[slices.IndexFunc(sets, func(ls *longSet) bool { return ls.impl.Name == altset.Reference })]
	clock := "every set reads time.Since, the window too"
	for _, ls := range sets {
		if wd := windowOf(ls.s); wd != nil && windowReadsCounter(ls.ttl) {
			clock = "the window reads the CPU's time-stamp counter, the others time.Since"
		}
	}
	if cfg.clock == clockEqual {
		clock = "every set reads the bench's clock, TTL " + equalTTL.String() + " of it"
	}
	fmt.Fprintf(w, "\nclock %s: %s (time.Since costs %v here)\n", cfg.clock, clock, clockCost)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "set\tTTL\tlive keys\tMops/s\tratio to xsync\tratio range\tratio of totals\tGC/s\tdups missed\tlate\tfresh seen\tbytes/key\t\n")
	total := func(ls *longSet) float64 {
		ops, el := 0, time.Duration(0)
		for _, r := range ls.rounds {
			ops += r.ops
			el += r.elapsed
		}
		return float64(ops) / el.Seconds()
	}
	for _, ls := range sets {
		var mops, ratios []float64
		var gcs, wall float64
		missed, dups, fp, fresh, late := 0, 0, 0, 0, 0
		for i, r := range ls.rounds {
			mops = append(mops, r.mops())
			if i < len(ref.rounds) {
				ratios = append(ratios, r.mops()/ref.rounds[i].mops())
			}
			gcs += float64(r.gcs)
			wall += r.wall.Seconds()
			missed += r.missed
			late += r.late
			dups += r.dups
			fp += r.falsePos
			fresh += r.fresh
		}
		// Keys live at the steady state: the rate of fresh keys (per
		// second of wall time, generation included) times the TTL.
		live := float64(fresh) / wall * ls.ttl.Seconds()
		if ls.vc != nil {
			live = float64(cfg.live)
		}
		bpk := "-"
		if wd := windowOf(ls.s); wd != nil {
			bpk = fmt.Sprintf("%.1f (table)", float64(16*wd.Stats().Capacity)/float64(cfg.live))
		} else if ls.impl.Name == altset.Reference && onlyWindowsBeside(sets) {
			bpk = fmt.Sprintf("%.1f (heap)", float64(heapGrowth)/float64(cfg.live))
		}
		rs, rr := "-", "-"
		if len(ratios) > 0 {
			rs = fmt.Sprintf("%.2fx", median(slices.Clone(ratios)))
			rr = fmt.Sprintf("%.2f-%.2f", slices.Min(ratios), slices.Max(ratios))
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%.2f\t%s\t%s\t%.2fx\t%.1f\t%d of %d\t%d\t%d\t%s\t\n", ls.impl.Name, ls.ttl.Round(time.Millisecond),
			altset.FormatCount(int(math.Round(live/1000))*1000), median(mops), rs, rr, total(ls)/total(ref), gcs/wall, missed, dups, late, fp, bpk)
	}
	tw.Flush()
	for _, ls := range sets {
		if wd := windowOf(ls.s); wd != nil {
			st := wd.Stats()
			fmt.Fprintf(w, "%s: %d live keys in the table at the end, %d expired slots reclaimed, %d evictions\n", ls.impl.Name, st.Live, st.Expired, st.Evictions)
		}
	}
	fmt.Fprintln(w, "ratio of totals = all of a set's operations over all its measured time, over xsync's; GC/s = collections per second of the sets' turns;")
	fmt.Fprintln(w, "live keys = each set's rate of new keys times its TTL; dups missed = duplicates of keys younger than the TTL reported new (must be 0);")
	fmt.Fprintln(w, "late = duplicates reported new whose key may have expired before they ran, a round having stalled longer than the margin (real clocks only);")
	fmt.Fprintln(w, "fresh seen = new keys reported seen (must be 0); bytes/key: the window's table over the live keys (off the Go heap),")
	fmt.Fprintln(w, "xsync's heap after one collection at the end over the live keys (shown when the other sets are windows)")
	for _, ls := range sets {
		var ratios []float64
		for i, r := range ls.rounds {
			if i < len(ref.rounds) {
				ratios = append(ratios, r.mops()/ref.rounds[i].mops())
			}
		}
		if ls != ref && len(ratios) > 0 {
			fmt.Fprintf(w, "ratio: %s %.4f\n", ls.impl.Name, median(ratios))
		}
	}
}

// onlyWindowsBeside reports whether every set but the reference is a
// window, whose table is off the Go heap: the heap the run holds is then the
// reference's.
func onlyWindowsBeside(sets []*longSet) bool {
	for _, ls := range sets {
		if ls.impl.Name != altset.Reference && windowOf(ls.s) == nil {
			return false
		}
	}
	return true
}

func windowOf(s altset.Set) *window.Window {
	switch v := s.(type) {
	case *window.Window:
		return v
	case batched:
		return v.Window
	}
	return nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
