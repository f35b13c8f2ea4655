package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// childResultEnv names the file a run started by -compare writes its
// figures to.
const childResultEnv = "ONCEGATE_STORM_RESULT"

// childResult is what a run started by -compare tells its parent.
type childResult struct {
	Name    string  `json:"name"`
	Intents int     `json:"intents"`
	Seconds float64 `json:"seconds"`
	CPUPer  float64 `json:"cpu_us_per_trigger"`
	RSSPer  float64 `json:"rss_kib_per_in_flight"`
	Effects int     `json:"effects"`
	Keys    int     `json:"distinct_keys"`
	Dead    int64   `json:"dead_letters"`
}

func writeChildResult(path string, r result) error {
	b, err := json.Marshal(childResult{
		Name: r.name, Intents: r.intents, Seconds: r.elapsed.Seconds(), CPUPer: r.cpuPer, RSSPer: r.rssPer,
		Effects: r.effects, Keys: r.distinct, Dead: int64(r.pipe.DeadLetters),
	})
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// compareRuns runs the plain loop (calls) and Oncegate (before) n times
// each, alternating, each in a process of its own started with this
// command's other flags, and prints every run's figures, their medians and
// Oncegate's ratios to the loop, against the targets Oncegate sets itself
// (rate ≥ 0.95×, CPU and RSS per trigger ≤ 1.5×, issue 39). A process of its own per
// run keeps one run's heap and RSS out of the next one's memory figures.
func compareRuns(n int) error {
	dir, err := os.MkdirTemp("", "oncegate-storm-compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	got := map[string][]childResult{}
	for round := 1; round <= n; round++ {
		for _, run := range []string{"calls", "before"} {
			path := filepath.Join(dir, fmt.Sprintf("%s-%d.json", run, round))
			fmt.Printf("=== round %d of %d: %s, in a process of its own\n", round, n, run)
			cmd := exec.Command(os.Args[0], append(childArgs(os.Args[1:], run, round), "-runs", run)...)
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			cmd.Env = append(os.Environ(), childResultEnv+"="+path)
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("round %d, %s: %w", round, run, err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("round %d, %s: no result: %w", round, run, err)
			}
			var r childResult
			if err := json.Unmarshal(b, &r); err != nil {
				return err
			}
			got[run] = append(got[run], r)
		}
	}
	return printComparison(os.Stdout, got["calls"], got["before"])
}

// childArgs is args less -compare and -runs (and their values), which a
// run started by -compare gets of its own, for the run of that name in
// round: its -cpuprofile and -memprofile files are named after the run
// and the round, so that every run's profiles are kept (-memprofile's
// files get the run's name appended by the run itself).
func childArgs(args []string, run string, round int) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") {
			out = append(out, a)
			continue
		}
		switch name {
		case "compare", "runs":
			if !hasValue {
				i++ // the flag's value
			}
			continue
		case "cpuprofile", "memprofile":
			if !hasValue && i+1 < len(args) {
				i++
				value = args[i]
			}
			suffix := fmt.Sprintf("-%d", round)
			if name == "cpuprofile" {
				suffix = fmt.Sprintf("-%s-%d", run, round)
			}
			out = append(out, "-"+name+"="+value+suffix)
			continue
		}
		out = append(out, a)
	}
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// printComparison prints the runs, their medians and the ratios; it fails
// when an Oncegate run lost or repeated an intent.
func printComparison(w io.Writer, loop, og []childResult) error {
	if len(loop) == 0 || len(loop) != len(og) {
		return errors.New("compare: runs missing")
	}
	fmt.Fprintf(w, "\n%-10s %5s %10s %10s %12s %14s\n", "run", "round", "seconds", "per second", "CPU µs each", "RSS KiB each")
	col := func(rs []childResult, f func(childResult) float64) []float64 {
		var out []float64
		for _, r := range rs {
			out = append(out, f(r))
		}
		return out
	}
	var bad []string
	for i := range loop {
		for _, r := range []childResult{loop[i], og[i]} {
			fmt.Fprintf(w, "%-10s %5d %10.2f %10.0f %12.0f %14.1f\n", r.Name, i+1, r.Seconds, float64(r.Intents)/r.Seconds, r.CPUPer, r.RSSPer)
		}
		if r := og[i]; r.Effects != r.Intents || r.Keys != r.Intents || r.Dead != 0 {
			bad = append(bad, fmt.Sprintf("round %d: %d effects for %d distinct keys, %d intents, %d dead letters", i+1, r.Effects, r.Keys, r.Intents, r.Dead))
		}
	}
	rate := func(r childResult) float64 { return float64(r.Intents) / r.Seconds }
	cpu := func(r childResult) float64 { return r.CPUPer }
	rss := func(r childResult) float64 { return r.RSSPer }
	mRate, mCPU, mRSS := median(col(og, rate))/median(col(loop, rate)), median(col(og, cpu))/median(col(loop, cpu)), median(col(og, rss))/median(col(loop, rss))
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "not met"
	}
	fmt.Fprintf(w, "\nmedians of %d rounds: the plain go-openai loop %.0f calls/s, %.0f CPU µs and %.1f KiB RSS per call in flight; Oncegate %.0f triggers/s, %.0f µs and %.1f KiB per trigger in flight\n",
		len(loop), median(col(loop, rate)), median(col(loop, cpu)), median(col(loop, rss)), median(col(og, rate)), median(col(og, cpu)), median(col(og, rss)))
	fmt.Fprintf(w, "Oncegate against the plain loop: rate %.2f× (target ≥ 0.95: %s), CPU per trigger %.2f× (≤ 1.5: %s), RSS per trigger in flight %.2f× (≤ 1.5: %s)\n",
		mRate, mark(mRate >= 0.95), mCPU, mark(mCPU <= 1.5), mRSS, mark(mRSS <= 1.5))
	if len(bad) == 0 {
		fmt.Fprintln(w, "every Oncegate run: one effect per intent, no dead letter")
	} else {
		return errors.New("Oncegate runs lost or repeated intents: " + strings.Join(bad, "; "))
	}
	return nil
}
