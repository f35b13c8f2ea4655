package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/admin"
)

// The redrive phase (-redrive): the payment sink refuses every new charge
// for good (400) from refuseFrom to refuseTo of the fault window, so that
// the charges pipeline dead-letters them (permanent_effect), and every
// later trigger of those intents meets the failed record and is
// dead-lettered again. Then the sink is fixed, and the soak plays the
// person who redrives them, in bulk: it runs the consumer binary's bulk
// redrive (`consumer redrive -filter "pipeline=charges
// reason=permanent_effect handled=yes" -yes -json`, which previews and
// starts a job in a replica through the admin service, or runs it in the
// command when none answers, and follows it, taking it over if its runner
// dies) every redriveEvery while the faults go on, and again once
// everything settled, until a pass republishes nothing; that last pass,
// which takes every dead letter again, must republish none of them. What
// each pass did with each letter is read back from the audit stream.
//
// Every pass must be answered within adminBound whenever a majority of the
// nodes (the server, on one) stayed up while it ran: a pass that fails or
// runs out of time then fails the soak. One that ran while a majority was
// down is reported, and excused.
const (
	refuseFrom   = 0.25
	refuseTo     = 0.45
	redriveEvery = 5 * time.Second
	// adminBound bounds one run of the command while a majority is up: a
	// replica killed under it (its job's lease runs out and the command
	// takes it over), a leader elected, a node coming back all fit in it.
	adminBound = 90 * time.Second
)

// streamName is the trigger stream the consumers run on.
const streamName = "ONCEGATE"

// redriveFilter is the bulk redrive's filter: every permanent_effect dead
// letter of charges, those redriven before included (they come back
// "already redriven").
const redriveFilter = "pipeline=" + pCharges + " reason=permanent_effect handled=yes"

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
	excused bool           // it failed while a majority of the nodes was down
	job     string         // the bulk redrive it ran
	counts  map[string]int // dead letters taken, by outcome
	results []admin.RedriveResult
}

// redriver runs the redrive command and keeps what each run answered.
type redriver struct {
	h     *harness
	fixed chan struct{} // closed when the payment sink stops refusing

	mu        sync.Mutex
	passes    []redrivePass
	auditRead uint64 // redrive entries read from the audit stream
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
	cctx, cancel := context.WithTimeout(ctx, adminBound)
	defer cancel()
	args := []string{"redrive", "-config", h.configPath, "-filter", redriveFilter, "-yes", "-json"}
	cmd := exec.CommandContext(cctx, h.consumerBin, args...)
	// Should no replica answer (an outage), the command runs the job
	// itself; its ledger operations are recorded beside the replicas'.
	cmd.Env = append(append(append([]string(nil), h.procs.env...), h.secretsEnv()...),
		"ONCEGATE_FAULTS_LEDGER_HISTORY="+h.redriveHistoryPath())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	p.took = time.Since(start)
	var job admin.Job
	switch {
	case cctx.Err() != nil && ctx.Err() == nil:
		p.err = fmt.Sprintf("not done within %v: %s", adminBound, strings.TrimSpace(lastLines(stderr.String(), 2)))
	case err != nil:
		p.err = fmt.Sprintf("%v: %s", err, strings.TrimSpace(lastLines(stderr.String(), 2)))
	case json.Unmarshal(stdout.Bytes(), &job) != nil || job.ID == "":
		p.err = "the command's output is not a bulk redrive: " + clipText(stdout.String(), 200)
	default:
		p.job = job.ID
		maps.Copy(p.counts, job.Progress.ByOutcome)
	}
	if p.job == "" {
		p.job = jobOf(stderr.String()) // started, then not followed to the end
	}
	if p.err != "" {
		p.excused = h.majorityDown(start, time.Now())
	}
	if h.o.verbose {
		fmt.Printf("  %5.1fs  redrive %s: %s %s (%.1fs)\n", p.at.Seconds(), p.job, formatCounts(p.counts), p.err, p.took.Seconds())
	}
	r.mu.Lock()
	r.passes = append(r.passes, p)
	r.mu.Unlock()
	return p
}

// jobOf finds the job the command says it started, in its standard error.
func jobOf(stderr string) string {
	for _, line := range strings.Split(stderr, "\n") {
		if rest, ok := strings.CutPrefix(line, "bulk redrive "); ok {
			if id, _, ok := strings.Cut(rest, " "); ok {
				return strings.TrimSuffix(id, ":")
			}
		}
	}
	return ""
}

// majorityDown reports whether more nodes than a majority allows (the
// server, without a cluster) were down, or cut off, at some moment between
// from and to.
func (h *harness) majorityDown(from, to time.Time) bool {
	n := max(len(h.nodes), 1)
	tolerated := n - (n/2 + 1)
	down := map[int]bool{}
	worst := 0
	for _, ev := range h.events.snapshot() {
		if ev.at.After(to) {
			break
		}
		switch ev.kind {
		case evServerTerm, evServerKill, evSickNode, evPartition:
			down[max(ev.replica, 0)] = true
		case evServerUp, evHealed:
			delete(down, max(ev.replica, 0))
		default:
			continue
		}
		if !ev.at.Before(from) || len(down) > 0 {
			worst = max(worst, len(down))
		}
	}
	return worst > tolerated
}

// readAudit fills in each pass's results from the audit stream: what its
// job did with each dead letter.
func (r *redriver) readAudit(ctx context.Context) error {
	h := r.h
	st, err := h.js.Stream(ctx, admin.AuditStream(streamName))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	filter := admin.AuditPrefix + "." + streamName + "." + admin.AuditRedrive + ".>"
	// How many entries there are, counted by the stream, so that a fetch
	// that comes back empty (a cluster still electing the stream's leader
	// after its faults) is tried again rather than read as the end.
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return err
	}
	var want uint64
	for _, n := range info.State.Subjects {
		want += n
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return err
	}
	byJob := map[string][]admin.RedriveResult{}
	var read uint64
	for deadline := time.Now().Add(time.Minute); read < want; {
		if time.Now().After(deadline) {
			return fmt.Errorf("read %d of the %d redrive entries in a minute", read, want)
		}
		b, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return err
		}
		for m := range b.Messages() {
			read++
			var e admin.AuditEntry
			if json.Unmarshal(m.Data(), &e) == nil && e.Letter != nil && e.Job != "" {
				byJob[e.Job] = append(byJob[e.Job], admin.RedriveResult{Stream: e.Letter.Stream, Seq: e.Letter.Seq, Key: e.Key, Outcome: e.Outcome})
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.auditRead = read
	for i := range r.passes {
		r.passes[i].results = byJob[r.passes[i].job]
	}
	return nil
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
	failedPasses  int   // runs that did not answer
	unserved      int   // of them, runs that failed while a majority of the nodes was up
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
	auditRead     uint64   // redrive entries read from the audit stream
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
	return exercised && r.unserved == 0 && len(r.twice) == 0 && r.finalErr == "" && r.lastPassAfter &&
		r.final[admin.OutcomeRedriven] == 0 && len(r.left) == 0 && len(r.notRedriven) == 0 && r.oneEffect == r.intents
}

// summarize fills rep.redrive in from the passes; deadSeq maps each
// permanent_effect dead letter of charges to its intent, effects counts
// each intent's effects.
func (r *redriver) summarize(rep *report, deadSeq map[uint64]int, effects map[int]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rr := &redriveReport{refusedCalls: r.h.pay.refused.Load(), deadLetters: len(deadSeq), final: map[string]int{}, auditRead: r.auditRead}
	times := map[uint64]int{}
	for _, p := range r.passes {
		if p.after {
			rr.passesAfter++
		} else {
			rr.passesDuring++
		}
		if p.err != "" {
			rr.failedPasses++
			excuse := " (a majority of the nodes was down: excused)"
			if !p.excused {
				rr.unserved++
				excuse = " (a majority of the nodes was up: not served within the bound)"
			}
			if len(rr.failures) < 3 {
				rr.failures = append(rr.failures, fmt.Sprintf("at %+.1fs: %s%s", p.at.Seconds(), clipText(p.err, 160), excuse))
			}
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
		"bulk redrive command run %d times during the faults and %d after (%d did not answer, %d of them while a majority of the nodes was up); %d dead letters republished, %d of them twice; "+
		"%d of %d redriven intents ended with exactly one charge; the last redrive (every dead letter again): %s; %d audit entries of the redrives read",
		r.refusedCalls, 100*refuseFrom, 100*refuseTo, r.deadLetters, r.intents, r.passesDuring, r.passesAfter, r.failedPasses, r.unserved,
		r.republished, len(r.twice), r.oneEffect, r.intents, formatCounts(r.final), r.auditRead)
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
	return fmt.Sprintf("%d republished, %d twice, %d/%d with one effect, last redrive republished %d, left %d, %d runs not served while a majority was up, ok %v",
		r.republished, len(r.twice), r.oneEffect, r.intents, r.final[admin.OutcomeRedriven], len(r.left)+len(r.notRedriven), r.unserved, r.ok())
}
