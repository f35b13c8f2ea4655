package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/outcome"
)

// The redrive phase (-redrive): the payment sink refuses every new charge
// for good (400) from refuseFrom to refuseTo of the fault window, so that
// the charges pipeline dead-letters them (permanent_effect), and every
// later trigger of those intents meets the failed record and is
// dead-lettered again. Then the sink is fixed, and the soak plays the
// person who redrives them: it runs the consumer binary's redrive command
// (`consumer redrive -yes -json -pipeline charges -reason
// permanent_effect`, which reaches the replicas' admin service, or opens
// the stores itself when none answers) every redriveEvery while the faults
// go on, and again once everything settled, until a pass republishes
// nothing; that last pass, which takes every dead letter again, must
// republish none of them.
const (
	refuseFrom   = 0.25
	refuseTo     = 0.45
	redriveEvery = 5 * time.Second
	// redriveTimeout bounds one run of the command: a request to a replica
	// that is killed as it works waits for the admin client's timeout
	// (minutes) otherwise.
	redriveTimeout = 30 * time.Second
)

// Events of the redrive phase, on the timeline.
const (
	evRefusing = "payment sink refusing"
	evFixed    = "payment sink fixed"
)

// redrivePass is one run of the redrive command.
type redrivePass struct {
	at      time.Duration // after the start of the fault window
	after   bool          // run after the fault window, once everything settled
	took    time.Duration
	err     string
	counts  map[string]int // dead letters chosen, by outcome
	results []admin.RedriveResult
}

// redriver runs the redrive command and keeps what each run answered.
type redriver struct {
	h     *harness
	fixed chan struct{} // closed when the payment sink stops refusing

	mu     sync.Mutex
	passes []redrivePass
}

// refuse makes the payment sink refuse new charges over its part of the
// fault window that starts at t0, and past it until it has refused one (a
// consumer outage can cover the whole part, and then there is nothing to
// redrive), at most until the window ends. It closes r.fixed when the sink
// is fixed.
func (h *harness) refuse(ctx context.Context, t0 time.Time, r *redriver) {
	defer close(r.fixed)
	from := t0.Add(time.Duration(float64(h.o.duration) * refuseFrom))
	to := t0.Add(time.Duration(float64(h.o.duration) * refuseTo))
	end := t0.Add(h.o.duration)
	if !sleepCtx(ctx, time.Until(from)) {
		return
	}
	h.pay.refusing.Store(true)
	h.events.add(event{kind: evRefusing, replica: -1})
	sleepCtx(ctx, time.Until(to))
	for h.pay.refused.Load() == 0 && time.Now().Before(end) && sleepCtx(ctx, 100*time.Millisecond) {
	}
	h.pay.refusing.Store(false)
	h.events.add(event{kind: evFixed, replica: -1})
}

// during runs the command every redriveEvery from a few seconds after the
// sink is fixed until over is closed (the fault window is over).
func (r *redriver) during(ctx context.Context, over <-chan struct{}) {
	select {
	case <-r.fixed:
	case <-over:
		return
	case <-ctx.Done():
		return
	}
	select {
	case <-time.After(3 * time.Second):
	case <-over:
		return
	case <-ctx.Done():
		return
	}
	for {
		r.pass(ctx, false)
		select {
		case <-time.After(redriveEvery):
		case <-over:
			return
		case <-ctx.Done():
			return
		}
	}
}

// after runs the command once everything settled, settling again after a
// pass that republished anything (a dead letter that landed after the
// last pass during the faults), until a pass republishes nothing, at most
// four times. It returns whether everything settled each time.
func (r *redriver) after(ctx context.Context) (bool, string) {
	for range 4 {
		p := r.pass(ctx, true)
		if p.err == "" && p.counts[admin.OutcomeRedriven] == 0 && p.counts[admin.OutcomeInProgress] == 0 {
			return true, ""
		}
		if p.err != "" {
			sleepCtx(ctx, time.Second)
			continue
		}
		done := make(chan struct{})
		close(done)
		settled, why := r.h.settle(ctx, done)
		if !settled {
			return false, "after a redrive: " + why
		}
	}
	return true, ""
}

// pass runs the redrive command once.
func (r *redriver) pass(ctx context.Context, after bool) redrivePass {
	h := r.h
	p := redrivePass{at: time.Since(h.t0), after: after, counts: map[string]int{}}
	cctx, cancel := context.WithTimeout(ctx, redriveTimeout)
	defer cancel()
	args := []string{"redrive", "-config", h.configPath, "-yes", "-json", "-pipeline", pCharges, "-reason", string(outcome.ReasonPermanentEffect)}
	cmd := exec.CommandContext(cctx, h.consumerBin, args...)
	// Should no replica answer (an outage), the command opens the ledger
	// itself; its operations are recorded beside the replicas'.
	cmd.Env = append(append(append([]string(nil), h.procs.env...), h.secretsEnv()...),
		"ONCEGATE_FAULTS_LEDGER_HISTORY="+h.redriveHistoryPath())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	p.took = time.Since(start)
	var reply admin.RedriveReply
	switch {
	case err != nil:
		p.err = fmt.Sprintf("%v: %s", err, strings.TrimSpace(lastLines(stderr.String(), 2)))
	case json.Unmarshal(stdout.Bytes(), &reply) != nil:
		p.err = "the command's output is not a redrive reply: " + clipText(stdout.String(), 200)
	default:
		p.results = reply.Results
		for _, x := range reply.Results {
			p.counts[x.Outcome]++
		}
	}
	if h.o.verbose {
		fmt.Printf("  %5.1fs  redrive: %s %s (%.1fs)\n", p.at.Seconds(), formatCounts(p.counts), p.err, p.took.Seconds())
	}
	r.mu.Lock()
	r.passes = append(r.passes, p)
	r.mu.Unlock()
	return p
}

// redriveHistoryPath is where the redrive command records its ledger
// operations when it opens the ledger itself.
func (h *harness) redriveHistoryPath() string {
	return filepath.Join(h.dir, "logs", "ledger-history-redrive.jsonl")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " / ")
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// redriveReport is what the checker makes of the redrive phase.
type redriveReport struct {
	refusedCalls  int64 // charges the payment sink refused
	deadLetters   int   // permanent_effect dead letters of charges
	passesDuring  int   // runs of the command during the fault window
	passesAfter   int   // runs after it
	failedPasses  int   // runs that did not answer (a replica killed under it, the server down)
	failures      []string
	republished   int // dead letters republished
	twice         []uint64
	intents       int            // charges intents dead-lettered and redriven
	oneEffect     int            // of them, ending with exactly one charge
	final         map[string]int // the last pass, by outcome
	finalErr      string
	left          []string // dead letters the last pass did not find redriven or committed
	notRedriven   []int    // charges intents refused and left dead-lettered
	lastPassAfter bool     // the last pass ran after everything settled
}

// ok reports whether the redrive phase kept its promises: something was
// redriven, no dead letter was republished twice, the last pass (a
// redrive of every dead letter again) republished nothing, and every
// refused intent ended with exactly one effect. A run with no dead letter
// to redrive has not exercised the phase, which the report says, and is
// not failed for it: the sink saw no new charge while it refused (a short
// run whose charges were all made before, or during an outage that lasted
// the whole window), or every charge it refused was tried again, and
// made, after it was fixed (the failure could not be recorded: a ledger
// blip, a kill before the record), which is right.
func (r *redriveReport) ok() bool {
	if r == nil {
		return true
	}
	exercised := r.republished > 0 || r.deadLetters == 0
	return exercised && len(r.twice) == 0 && r.finalErr == "" && r.lastPassAfter &&
		r.final[admin.OutcomeRedriven] == 0 && len(r.left) == 0 && len(r.notRedriven) == 0 && r.oneEffect == r.intents
}

// summarize fills rep.redrive in from the passes; deadSeq maps each
// permanent_effect dead letter of charges to its intent, effects counts
// each intent's effects.
func (r *redriver) summarize(rep *report, deadSeq map[uint64]int, effects map[int]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rr := &redriveReport{refusedCalls: r.h.pay.refused.Load(), deadLetters: len(deadSeq), final: map[string]int{}}
	times := map[uint64]int{}
	for _, p := range r.passes {
		if p.after {
			rr.passesAfter++
		} else {
			rr.passesDuring++
		}
		if p.err != "" {
			rr.failedPasses++
			if len(rr.failures) < 3 {
				rr.failures = append(rr.failures, fmt.Sprintf("at %+.1fs: %s", p.at.Seconds(), clipText(p.err, 160)))
			}
			continue
		}
		for _, x := range p.results {
			if x.Outcome == admin.OutcomeRedriven {
				times[x.Seq]++
			}
		}
	}
	for seq, n := range times {
		rr.republished++
		if n > 1 {
			rr.twice = append(rr.twice, seq)
		}
	}
	slices.Sort(rr.twice)
	if n := len(r.passes); n > 0 {
		last := r.passes[n-1]
		rr.lastPassAfter, rr.finalErr, rr.final = last.after, last.err, last.counts
		seen := map[uint64]string{}
		for _, x := range last.results {
			seen[x.Seq] = x.Outcome
		}
		for seq, in := range deadSeq {
			switch o := seen[seq]; o {
			case admin.OutcomeAlreadyRedriven, admin.OutcomeCommitted:
			default:
				if o == "" {
					o = "not chosen"
				}
				rr.left = append(rr.left, fmt.Sprintf("dead letter %d (intent %d): %s", seq, in, o))
			}
		}
		slices.Sort(rr.left)
	}
	intents := map[int]bool{}
	for _, in := range deadSeq {
		intents[in] = true
	}
	for in := range intents {
		rr.intents++
		switch effects[in] {
		case 1:
			rr.oneEffect++
		case 0:
			rr.notRedriven = append(rr.notRedriven, in)
		}
	}
	slices.Sort(rr.notRedriven)
	rep.redrive = rr
}

func (r *redriveReport) String() string {
	s := fmt.Sprintf("the payment sink refused %d new charges from %.0f%% to %.0f%% of the fault window; %d dead letters (permanent_effect) of %d intents; "+
		"redrive command run %d times during the faults and %d after (%d did not answer); %d dead letters republished, %d of them twice; "+
		"%d of %d redriven intents ended with exactly one charge; the last redrive (every dead letter again): %s",
		r.refusedCalls, 100*refuseFrom, 100*refuseTo, r.deadLetters, r.intents, r.passesDuring, r.passesAfter, r.failedPasses,
		r.republished, len(r.twice), r.oneEffect, r.intents, formatCounts(r.final))
	switch {
	case r.deadLetters > 0:
	case r.refusedCalls == 0:
		s += " — not exercised: no new charge reached the sink while it refused"
	default:
		s += " — not exercised: every charge the sink refused was tried again, and made, once it was fixed (its failure was not recorded: a ledger blip, a kill), so none was dead-lettered"
	}
	if !r.lastPassAfter {
		s += " (it ran during the faults: none ran after they settled)"
	}
	if r.finalErr != "" {
		s += ", failed: " + r.finalErr
	}
	return s
}

// verdict sums the phase up for the verdict line.
func (r *redriveReport) verdict() string {
	if r == nil {
		return "off"
	}
	return fmt.Sprintf("%d republished, %d twice, %d/%d with one effect, last redrive republished %d, left %d, ok %v",
		r.republished, len(r.twice), r.oneEffect, r.intents, r.final[admin.OutcomeRedriven], len(r.left)+len(r.notRedriven), r.ok())
}
