// Command report runs Oncegate's benchmark programs in their short forms and
// writes one Markdown file with their tables and PNG plots, so that a reader
// sees the figures without reading code:
//
//	go run -C bench ./report                     # writes bench/out/report/report.md and its PNGs (~8 minutes)
//	go run -C bench ./report -out /tmp/report    # somewhere else
//	go run -C bench ./report -skip peers,window  # leave benches out
//
// Each bench runs as its own process (go run), one after the other, and its
// output goes into the report verbatim; the plots are drawn from the tables
// in that output. A bench that fails is reported as failed, with its error
// output, and the others still run. bench/peers is a module of its own; it
// runs from its directory, and is reported as skipped where its modules
// cannot be had. The output directory is under bench/out, which git ignores:
// commit a report only as this command regenerates it.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image/color"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/oncegate/oncegate/bench/internal/plotkit"
)

// A bench is one program the report runs.
type bench struct {
	name  string
	title string
	dir   string // working directory, relative to the repository root
	args  []string
	about string
}

var benches = []bench{
	{"ledger", "Ledger: claim + commit pairs per second", "bench", []string{"run", "./ledger", "-dur", "1s"},
		"Begin + Commit of fresh keys on Oncegate's ledgers, against a raw synchronous JetStream publish (bench/ledger)."},
	{"peers-ledger", "The ledger beside Redis and PostgreSQL", "bench/peers", []string{"run", ".", "-part", "ledger", "-dur", "1s", "-reps", "1"},
		"Claim + commit on Oncegate's ledgers, a Redis SET NX + SET (appendfsync always and everysec) and a PostgreSQL idempotency table (bench/peers)."},
	{"peers-gate", "The gate beside Watermill's deduplicator", "bench/peers", []string{"run", ".", "-part", "gate", "-n", "5000"},
		"End-to-end gate on one JetStream stream: Oncegate's gate-ledger pipeline and a Watermill router with its Deduplicator, before and after a restart (bench/peers)."},
	{"e2e", "End to end: triggers per second against the raw loop", "bench", []string{"run", "./e2e", "-n", "2000", "-full-n", "500", "-reps", "1"},
		"Oncegate's pipelines against the consume-publish-ack loop a user would write (bench/e2e)."},
	{"window", "The window against the sets a user would write, long-running", "bench", []string{"run", "./window", "-long", "-reps", "3", "-dur", "300ms"},
		"window.Window at a steady state with expiry, beside a two-generation xsync set (bench/window -long)."},
	{"llmcache", "The LLM cache", "bench", []string{"run", "./llmcache", "-dur", "400ms", "-workers", "4"},
		"The LLM response cache (bench/llmcache)."},
	{"storm", "A storm of alerts against a rate-limited model", "bench", []string{"run", "./storm", "-triggers", "1000", "-window", "5s", "-limit-ratio", "0.9"},
		"Distinct alerts published at once to a pipeline whose model allows fewer calls a minute than the storm needs: Oncegate paced by its limiter, and without it (bench/storm)."},
	{"restart", "A restart after a crash, and readiness", "bench", []string{"run", "./restart", "-triggers", "200", "-records", "20000"},
		"A consumer SIGKILLed with effects in flight, started again: its readiness, first effect and settling; then the time to /readyz with an empty and a filled ledger (bench/restart)."},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// result is one bench's run.
type result struct {
	bench
	out  string
	err  error
	took time.Duration
}

func run(ctx context.Context) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	out := flag.String("out", filepath.Join(root, "bench", "out", "report"), "directory to write report.md and its PNGs into")
	skip := flag.String("skip", "", "comma-separated benches to leave out: "+names())
	flag.Parse()
	skipped := map[string]bool{}
	for _, s := range strings.Split(*skip, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if !slices.ContainsFunc(benches, func(b bench) bool { return b.name == s }) {
				return fmt.Errorf("-skip: unknown bench %q (want %s)", s, names())
			}
			skipped[s] = true
		}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	var results []result
	for _, b := range benches {
		if skipped[b.name] {
			continue
		}
		fmt.Fprintf(os.Stderr, "report: %s: go %s (in %s)\n", b.name, strings.Join(b.args, " "), b.dir)
		t := time.Now()
		cmd := exec.CommandContext(ctx, "go", b.args...)
		cmd.Dir = filepath.Join(root, b.dir)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		r := result{bench: b, out: stdout.String(), took: time.Since(t)}
		if err != nil {
			r.err = fmt.Errorf("%w: %s", err, lastLines(stderr.String(), 15))
		}
		results = append(results, r)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return write(*out, results)
}

func names() string {
	var ns []string
	for _, b := range benches {
		ns = append(ns, b.name)
	}
	return strings.Join(ns, ", ")
}

// repoRoot returns the repository's root: the directory of the oncegate
// module, which bench's go.mod replaces it with.
func repoRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/oncegate/oncegate").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m github.com/oncegate/oncegate: %w (run it inside the Oncegate repository: go run -C bench ./report)", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func write(dir string, results []result) error {
	var md bytes.Buffer
	host, _ := os.Hostname()
	fmt.Fprintf(&md, "# Oncegate benchmarks, short forms\n\n")
	fmt.Fprintf(&md, "Generated by `go run -C bench ./report` on %s, %s %s/%s, %d CPUs (host %s). The machine may have been shared with other work: "+
		"compare the ratios within one table, not rates across runs. Each section is one program's output, verbatim; the plots are drawn from those tables.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), host)
	fmt.Fprintln(&md, "| bench | command | took | status |")
	fmt.Fprintln(&md, "|---|---|---|---|")
	for _, r := range results {
		status := "ok"
		if r.err != nil {
			status = "FAILED"
		}
		fmt.Fprintf(&md, "| %s | `cd %s && go %s` | %v | %s |\n", r.name, r.dir, strings.Join(r.args, " "), r.took.Round(time.Second), status)
	}
	fmt.Fprintln(&md)
	for _, r := range results {
		fmt.Fprintf(&md, "## %s\n\n%s\n\n", r.title, r.about)
		if r.err != nil {
			fmt.Fprintf(&md, "**Failed**: \n\n```\n%s\n```\n\n", r.err)
		}
		for _, png := range plots(dir, r) {
			fmt.Fprintf(&md, "![%s](%s)\n\n", png, png)
		}
		if r.out != "" {
			fmt.Fprintf(&md, "```\n%s\n```\n\n", strings.TrimRight(r.out, "\n"))
		}
	}
	path := filepath.Join(dir, "report.md")
	if err := os.WriteFile(path, md.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}

// --- tables ------------------------------------------------------------------

var cellSep = regexp.MustCompile(`\s{2,}`)

// table returns the rows of the first table in out whose header's first
// cell is first: the header's cells, then each row's, up to the first line
// that is blank or has a different number of cells.
func table(out, first string) (header []string, rows [][]string) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		cells := cellSep.Split(strings.TrimSpace(l), -1)
		if len(cells) < 2 || cells[0] != first {
			continue
		}
		header = cells
		for _, l := range lines[i+1:] {
			c := cellSep.Split(strings.TrimSpace(l), -1)
			if strings.TrimSpace(l) == "" || len(c) != len(header) {
				break
			}
			rows = append(rows, c)
		}
		return header, rows
	}
	return nil, nil
}

func col(header []string, name string) int { return slices.Index(header, name) }

func num(s string) (float64, bool) {
	s = strings.Fields(s + " ")[0]
	for _, unit := range []string{"x", "×", "s"} {
		s = strings.TrimSuffix(s, unit)
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}

// --- plots -------------------------------------------------------------------

// plots draws the plots of r's output into dir and returns their file names.
func plots(dir string, r result) []string {
	var files []string
	verdict := goalVerdict(r.out)
	save := func(p *plot.Plot, name string, legend bool) {
		if p == nil {
			return
		}
		if verdict != "" {
			p.Title.Text += " — " + verdict
		}
		p.Y.Tick.Marker = plotkit.Ticks{}
		legendW := vg.Length(0)
		if legend {
			legendW = 2 * vg.Inch
		}
		if err := plotkit.SaveBeside(p, 8*vg.Inch+legendW, 4*vg.Inch, legendW, filepath.Join(dir, name)); err != nil {
			fmt.Fprintf(os.Stderr, "report: %s: %v\n", name, err)
			return
		}
		files = append(files, name)
	}
	switch r.name {
	case "ledger":
		save(linesByWorkers(r.out, "impl", "pairs/s", "Ledger: pairs per second vs workers"), "ledger.png", true)
	case "peers-ledger":
		save(linesByWorkers(r.out, "peer", "pairs/s", "Claim + commit vs workers, Oncegate and its peers"), "peers-ledger.png", true)
	case "peers-gate":
		save(bars(r.out, "system", "triggers/s", "Gate end to end: triggers per second"), "peers-gate.png", false)
		save(bars(r.out, "system", "memory per key", "Gate: bytes in memory per remembered key"), "peers-memory.png", false)
	case "e2e":
		save(e2ePlot(r.out), "e2e.png", true)
	case "storm":
		save(bars(r.out, "run", "elapsed", "Storm: seconds until every alert is settled"), "storm.png", false)
		save(bars(r.out, "run", "429s", "Storm: 429s the model answered"), "storm-429.png", false)
	case "restart":
		save(restartPlot(r.out), "restart.png", false)
	case "window":
		save(bars(r.out, "set", "Mops/s", "Window vs xsync, long-running mode, equal clock: Mops/s"), "window.png", false)
		save(bars(r.out, "set", "bytes/key", "Window vs xsync: bytes per live key"), "window-memory.png", false)
	}
	return files
}

// goalVerdict returns the verdict of a bench's goal line ("goal: ...: MET"
// or "NOT MET"), as "goal MET", or "" if its output has none.
func goalVerdict(out string) string {
	for line := range strings.Lines(out) {
		if !strings.HasPrefix(line, "goal:") {
			continue
		}
		if strings.Contains(line, "NOT MET") {
			return "goal NOT MET"
		}
		if strings.Contains(line, "MET") {
			return "goal MET"
		}
	}
	return ""
}

// linesByWorkers draws one line per name (column first) of value against
// the workers column, on a log scale.
func linesByWorkers(out, first, value, title string) *plot.Plot {
	h, rows := table(out, first)
	wc, vc := col(h, "workers"), col(h, value)
	if wc < 0 || vc < 0 || len(rows) == 0 {
		return nil
	}
	series := map[string]plotter.XYs{}
	var order []string
	for _, row := range rows {
		w, ok1 := num(row[wc])
		v, ok2 := num(row[vc])
		if !ok1 || !ok2 {
			continue
		}
		if _, ok := series[row[0]]; !ok {
			order = append(order, row[0])
		}
		series[row[0]] = append(series[row[0]], plotter.XY{X: w, Y: v})
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "workers (claims in flight), log scale"
	p.Y.Label.Text = value
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	var args []any
	for _, n := range order {
		args = append(args, n, series[n])
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return nil
	}
	return p
}

// bars draws one bar per row of the first table headed first, from the
// leading number of column value.
func bars(out, first, value, title string) *plot.Plot {
	h, rows := table(out, first)
	vc := col(h, value)
	if vc < 0 || len(rows) == 0 {
		return nil
	}
	var vals plotter.Values
	var labels []string
	for _, row := range rows {
		v, ok := num(row[vc])
		if !ok {
			continue
		}
		vals = append(vals, v)
		labels = append(labels, row[0])
	}
	if len(vals) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = value
	b, err := plotter.NewBarChart(vals, vg.Points(40))
	if err != nil {
		return nil
	}
	b.Color = color.NRGBA{R: 70, G: 130, B: 180, A: 255}
	p.Add(b)
	p.NominalX(labels...)
	return p
}

// e2ePlot draws triggers/s against the duplicate share, one line per mode.
func e2ePlot(out string) *plot.Plot {
	h, rows := table(out, "mode")
	dc, vc := col(h, "dup%"), col(h, "triggers/s")
	if dc < 0 || vc < 0 || len(rows) == 0 {
		return nil
	}
	series := map[string]plotter.XYs{}
	var order []string
	for _, row := range rows {
		d, ok1 := num(row[dc])
		v, ok2 := num(row[vc])
		if !ok1 || !ok2 {
			continue
		}
		if _, ok := series[row[0]]; !ok {
			order = append(order, row[0])
		}
		series[row[0]] = append(series[row[0]], plotter.XY{X: d, Y: v})
	}
	p := plot.New()
	p.Title.Text = "End to end: triggers per second vs duplicate share"
	p.X.Label.Text = "duplicates, % of triggers"
	p.Y.Label.Text = "triggers/s"
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	var args []any
	for _, n := range order {
		args = append(args, n, series[n])
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return nil
	}
	return p
}

// restartLine is a timing line of bench/restart: "  ready    352ms after …"
// or, for the readiness cells, "      20000 records    352ms".
var restartLine = regexp.MustCompile(`^\s+(ready|first effect|all settled|\d+ records)\s+(\S+)`)

// restartPlot draws bench/restart's timings, in seconds, as bars.
func restartPlot(out string) *plot.Plot {
	var vals plotter.Values
	var labels []string
	for _, l := range strings.Split(out, "\n") {
		m := restartLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		d, err := time.ParseDuration(m[2])
		if err != nil {
			continue
		}
		label := m[1]
		if strings.HasSuffix(label, "records") {
			label = "ready, " + label
		} else if label != "ready" {
			label += " after ready"
		} else {
			label = "ready after the crash"
		}
		vals = append(vals, d.Seconds())
		labels = append(labels, label)
	}
	if len(vals) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "Restart after a crash, and readiness: seconds"
	p.Y.Label.Text = "seconds"
	b, err := plotter.NewBarChart(vals, vg.Points(40))
	if err != nil {
		return nil
	}
	b.Color = color.NRGBA{R: 70, G: 130, B: 180, A: 255}
	p.Add(b)
	p.NominalX(labels...)
	return p
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
