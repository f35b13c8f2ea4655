package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/history"
	"github.com/oncegate/oncegate/internal/ledger/jskvstore"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// streamMsg is a message read back from a stream.
type streamMsg struct {
	subject string
	header  nats.Header
	data    []byte
	at      time.Time
	seq     uint64 // in its stream
}

// readStream returns every message of a stream, or none if it does not
// exist.
func readStream(ctx context.Context, js jetstream.JetStream, name string) ([]streamMsg, error) {
	st, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	want := int(info.State.Msgs)
	if want == 0 {
		return nil, nil
	}
	oc, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	out := make([]streamMsg, 0, want)
	for empty := 0; len(out) < want; {
		b, err := oc.Fetch(min(want-len(out), 1000), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		got := 0
		for m := range b.Messages() {
			sm := streamMsg{subject: m.Subject(), header: m.Headers(), data: m.Data()}
			if meta, err := m.Metadata(); err == nil {
				sm.at, sm.seq = meta.Timestamp, meta.Sequence.Stream
			}
			out = append(out, sm)
			got++
		}
		if got == 0 {
			if empty++; empty > 5 {
				return nil, fmt.Errorf("reading %s: %d of %d messages: %w", name, len(out), want, b.Error())
			}
		}
	}
	return out, nil
}

// Classes of an intent's outcome.
const (
	cCommitted  = "committed"
	cDead       = "dead-lettered"
	cUnknown    = "unknown"
	cLost       = "lost"
	cDuplicated = "duplicated"
	cCancelled  = "cancelled" // a one-shot effect cancelled before it went out
	cRedriven   = "redriven"  // dead-lettered, redriven, and then committed with one effect
)

// deadLetter is a dead letter that names an intent.
type deadLetter struct {
	reason, pipeline string
	seq              uint64
}

// row is one line of the verdict table.
type row struct {
	name, sink string
	intents    int
	triggers   int
	n          map[string]int // by class
	alsoDead   int            // committed, and dead-lettered as well
	reasons    map[string]int // dead-letter reasons of the dead-lettered intents
	examples   map[string][]int
}

func newRow(name, sink string) *row {
	return &row{name: name, sink: sink, n: map[string]int{}, reasons: map[string]int{}, examples: map[string][]int{}}
}

func (r *row) add(class string, intent int) {
	r.n[class]++
	if len(r.examples[class]) < 8 {
		r.examples[class] = append(r.examples[class], intent)
	}
}

// timed is something that happened at a time, for the plot.
type timed struct {
	at       time.Time
	pipeline string
}

type report struct {
	rows        []*row
	hostile     *row
	hostileBad  []string // hostile copies dead-lettered with another reason than expected
	passed      int      // effects of hostile payloads
	unknownSent int      // unknown one-shot effects that had in fact been sent
	stray       int      // effects that name no intent
	dlOther     int      // dead letters that name no intent

	poisonBad      []string // poison intents not dead-lettered as they must be
	cancelSent     []int    // notify intents whose cancel answered "cancelled", and whose effect was sent
	unapproved     []int    // notify intents never approved whose effect was sent
	committedDead  []string // dead letters whose ledger record is committed (hole 12)
	controls       string   // what the approvals and cancels got
	deadUnreadable error    // the ledger records of dead letters could not be read

	restarts, restartBound int    // replica processes started again after a death the soak did not cause, and the bound
	deaths                 string // those deaths, by cause
	effectsAt              []timed
	published              []time.Time

	modelMin, modelCalls, modelAnswered, modelRepaid int
	modelRepaidElsewhere                             int // of modelRepaid, answered on two replicas or more
	modelRepaidEx                                    []int
	modelRepaidWhen                                  []string
	repaidWhy                                        map[string]int // extra answers, by what became of the answer before
	repaidAliveEx                                    []string       // extra answers whose previous answer's process still ran, or died more than 100ms after it
	repaidAliveIDs                                   []int          // their intents
	tokensMin, tokensSpent                           int64
	lostInFlight                                     int   // answers paid again because the process that made the one before died or stopped with it in hand, or had died before it came
	lostTokens                                       int64 // the tokens of those answers paid again
	standin                                          map[string]int64

	pay           map[string]int64
	shotCalls     int64
	shotDropped   int64
	ledgerPending int
	pendingEx     []string // records still pending: key, owner, token, claims, when updated
	ledgerErr     error

	lin *linResult // the linearizability check of the ledger histories

	alerts  *alertsReport  // the alerts pipeline: routes, resolves
	redrive *redriveReport // the redrive phase, nil when off

	consumerKills int  // scheduled SIGKILLs and deaths at armed crash points
	strictTokens  bool // the token bound fails the run

	settled    bool
	settleWhy  string
	window     time.Duration
	settleTime time.Duration
}

func (r *report) totals() map[string]int {
	t := map[string]int{}
	for _, x := range append(slices.Clone(r.rows), r.hostile) {
		for k, v := range x.n {
			t[k] += v
		}
	}
	return t
}

// pass reports whether the run kept the promise: nothing lost or
// duplicated, the model answered at most once per intent plus once per
// answer lost in flight, and with -strict-tokens the tokens within 0.05%
// of the minimum plus what those answers cost.
func (r *report) pass() bool {
	t := r.totals()
	return r.settled && t[cLost] == 0 && t[cDuplicated] == 0 && r.passed == 0 && r.stray == 0 && r.modelBounded() &&
		(r.tokensBounded() || !r.strictTokens) && r.lin != nil && r.lin.ok() &&
		len(r.poisonBad) == 0 && len(r.cancelSent) == 0 && len(r.unapproved) == 0 && len(r.committedDead) == 0 && r.deadUnreadable == nil &&
		r.ledgerErr == nil && r.ledgerPending == 0 && r.restarts <= r.restartBound && r.alerts.ok() && r.redrive.ok()
}

// lossWindow is how soon after the model's answer the process that asked
// must have died (or been stopped) for the answer to count as lost in
// flight: the consumer writes a paid answer to its disk (HoldDir) as soon
// as it has read it, so an answer outlives any death later than that. The
// window allows for the scheduling of a loaded two-core machine between
// the stand-in's last byte and the consumer's write (a short soak measured
// 281ms once, with the CLI's redrives running beside three replicas). An
// answer on the disk of a process that died later is still out of the
// other replicas' reach until the ledger takes it: one whose process had
// no ledger write answered between the answer and its death (its node cut
// off, no majority) is lost in flight too (ledgerAnswered).
const lossWindow = time.Second

// resumeGrace is how long after a pause's end an answer counts as one the
// paused process had in its socket (stoppedWith): seed 418632018 recorded
// one 6ms after the SIGCONT that ended a pause past the lease, paid again
// by the replica that took its claim over during the pause.
const resumeGrace = 100 * time.Millisecond

// modelBounded: the model answered at most once per intent with a model
// step, plus once per answer lost in flight (the process that asked died,
// or was stopped past its claims, within lossWindow of the answer: it had
// the answer and no time to keep it; or it had died before the answer
// came, and nobody received it). Any other answer paid again fails.
func (r *report) modelBounded() bool { return r.modelAnswered <= r.modelMin+r.lostInFlight }

// tokensBounded: the tokens spent are within 0.05% of the minimum (each
// intent's first answer) plus the tokens of the answers paid again after
// one was lost in flight.
func (r *report) tokensBounded() bool {
	return r.tokensSpent*10000 <= (r.tokensMin+r.lostTokens)*10005
}

func (h *harness) check(ctx context.Context) (*report, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rep := &report{hostile: newRow("hostile", "must be dead-lettered")}
	sinks := map[string]string{
		pTriage:  "jetstream, Nats-Msg-Id",
		pCharges: "http, Idempotency-Key",
		pNotify:  "http, one-shot via outbox",
		pHooks:   "jetstream (gate, batched)",
		pPoison:  fmt.Sprintf("jetstream; panics, kills (max_deliver %d)", poisonMaxDeliver),
		pAlerts:  "routes: pagerduty, slack (one-shot)",
	}
	if h.o.approvals {
		sinks[pNotify] = "http, one-shot, approvals"
	}
	rows := map[string]*row{}
	for _, p := range pipelines {
		rows[p] = newRow(p, sinks[p])
		rep.rows = append(rep.rows, rows[p])
	}

	// Effects, per intent.
	effects := map[int]int{} // intent → effects (distinct charges at the payment sink)
	hostileEffects := map[int]int{}
	count := func(intent, hostile int, pipeline string, at time.Time) {
		rep.effectsAt = append(rep.effectsAt, timed{at, pipeline})
		if hi := hostile; hi >= 0 {
			hostileEffects[hi]++
			return
		}
		if intent < 0 || intent >= len(h.w.intents) || h.w.intents[intent].pipeline != pipeline {
			rep.stray++
			return
		}
		effects[intent]++
	}
	effMsgs, err := readStream(ctx, h.js, "ONCEGATE_EFFECTS")
	if err != nil {
		return nil, err
	}
	hookMsgs, err := readStream(ctx, h.js, hooksStream)
	if err != nil {
		return nil, err
	}
	effMsgs = append(effMsgs, hookMsgs...)
	for _, m := range effMsgs {
		hi, _ := hostileOf(m.data)
		count(intentOf(m.data), hi, strings.TrimPrefix(m.subject, "effects."), m.at)
	}
	for _, e := range h.pay.snapshot() {
		count(e.intent, e.hostile, pCharges, e.at)
	}
	for _, e := range h.shot.snapshot() {
		count(e.intent, e.hostile, pNotify, e.at)
	}
	ae, err := h.alertEffects(rep)
	if err != nil {
		return nil, err
	}
	rep.alerts = &alertsReport{routes: map[string]int{}, unmatched: ae.unmatched, misrouted: ae.misrouted, stray: ae.stray,
		pd: h.alerts.pd.Stats(), slackRefused: h.alerts.slack.Refused(), afterResolve: ae.afterResolve, wrongState: ae.wrongState}
	quota, per := pdQuota(h.o)
	rep.alerts.stormQuota = fmt.Sprintf("%d per %v", quota, per)
	rep.alerts.stormQuotaN, rep.alerts.stormPer = quota, per
	rep.alerts.dropped429, rep.alerts.throttledDropped, rep.alerts.throttled, rep.alerts.otherKey = ae.dropped429, ae.throttledDropped, ae.throttled, ae.otherKey
	for _, in := range h.w.intents {
		if in.alert != nil && in.alert.storm && !ae.stormLast.IsZero() {
			rep.alerts.stormDrain = ae.stormLast.Sub(h.t0.Add(in.copies[0].at))
			break
		}
	}
	for id, n := range ae.pdEvents {
		rep.alerts.pdEvents += n
		rep.alerts.pdSentAgain += n - len(ae.pdKeys[id])
	}

	// Dead letters.
	var deadKeys []deadKey
	dead := map[int][]deadLetter{}
	deadSeq := map[uint64]int{} // with -redrive: the permanent_effect dead letters of charges, and their intents
	hostileDead := map[[2]int]string{}
	deadMsgs, err := readStream(ctx, h.js, "ONCEGATE_DEAD")
	if err != nil {
		return nil, err
	}
	for _, m := range deadMsgs {
		reason := m.header.Get(consumer.HeaderReason)
		if hi, hc := hostileOf(m.data); hi >= 0 {
			hostileDead[[2]int{hi, hc}] = reason
			continue
		}
		if i := intentOf(m.data); i >= 0 && i < len(h.w.intents) {
			dead[i] = append(dead[i], deadLetter{reason, m.header.Get(consumer.HeaderPipeline), m.seq})
			if h.o.redrive && h.w.intents[i].pipeline == pCharges && reason == string(outcome.ReasonPermanentEffect) {
				deadSeq[m.seq] = i
			}
			if k, err := dedupe.ParseKey(m.header.Get(consumer.HeaderKey)); err == nil {
				if m.header.Get(consumer.HeaderStream) == consumer.OutboxStream("ONCEGATE") {
					k = consumer.DispatchKey(k) // the dispatcher's: its record is the dispatch's
				}
				deadKeys = append(deadKeys, deadKey{k, i, reason, h.o.redrive && h.w.intents[i].pipeline == pCharges && reason == string(outcome.ReasonPermanentEffect)})
			}
			continue
		}
		rep.dlOther++
	}

	// How often each poison trigger's work reached the effect (and
	// panicked, or killed its process), by the replicas' logs.
	tries, err := h.poisonTries()
	if err != nil {
		return nil, err
	}

	// Every intent, classified.
	for _, in := range h.w.intents {
		published := 0
		for _, p := range in.copies {
			if !p.published.IsZero() {
				published++
				rep.published = append(rep.published, p.published)
			}
		}
		if published == 0 {
			continue // never went out (an interrupted run)
		}
		if in.hostile != "" {
			r := rep.hostile
			r.intents++
			r.triggers += published
			missing := 0
			for _, p := range in.copies {
				if p.published.IsZero() {
					continue
				}
				reason, ok := hostileDead[[2]int{in.id, p.copy}]
				switch {
				case !ok:
					missing++
				case reason != in.reason:
					rep.hostileBad = append(rep.hostileBad, fmt.Sprintf("%s on %s: %s, want %s", in.hostile, in.pipeline, reason, in.reason))
				}
				if ok {
					r.reasons[reason]++
				}
			}
			switch {
			case hostileEffects[in.id] > 0:
				rep.passed++
				r.add(cDuplicated, in.id) // an effect from a payload that must never have one
			case missing > 0:
				r.add(cLost, in.id)
			default:
				r.add(cDead, in.id)
			}
			continue
		}
		r := rows[in.pipeline]
		r.intents++
		r.triggers += published
		if in.alert != nil {
			h.classifyAlert(rep, r, in, dead[in.id], ae)
			continue
		}
		e := effects[in.id]
		var reasons []string
		unknown := false
		for _, d := range dead[in.id] {
			reasons = append(reasons, d.reason)
			if d.reason == string(outcome.ReasonUnknownOutcome) {
				unknown = true
			}
		}
		if in.pipeline == pPoison {
			// Dead-lettered, panic or exhausted, within max_deliver
			// deliveries, and never an effect.
			bad := func(why string) {
				rep.poisonBad = append(rep.poisonBad, fmt.Sprintf("intent %d (%s): %s", in.id, in.fault, why))
			}
			for _, d := range dead[in.id] {
				r.reasons[d.reason]++
				if d.reason != string(outcome.ReasonPanic) && d.reason != string(outcome.ReasonExhausted) {
					bad("dead-lettered " + d.reason)
				}
			}
			if n := tries[in.id]; n > poisonMaxDeliver {
				bad(fmt.Sprintf("its work reached the effect %d times", n))
			}
			switch {
			case e > 0:
				bad(fmt.Sprintf("%d effects", e))
				r.add(cCommitted, in.id)
			case len(reasons) == 0:
				bad("never dead-lettered")
				r.add(cLost, in.id)
			default:
				r.add(cDead, in.id)
			}
			continue
		}
		cancelled := in.pipeline == pNotify && h.controls.cancelled(in.id)
		if cancelled && e > 0 {
			rep.cancelSent = append(rep.cancelSent, in.id)
		}
		if (in.fate == fateCancel || in.fate == fateNever) && e > 0 {
			rep.unapproved = append(rep.unapproved, in.id)
		}
		redriven := false
		for _, d := range dead[in.id] {
			_, ok := deadSeq[d.seq]
			redriven = redriven || ok
		}
		switch {
		case e > 1:
			r.add(cDuplicated, in.id)
		case redriven && e == 1:
			// Its dead letters were redriven (or found committed by a
			// redrive of another): not final outcomes.
			r.add(cRedriven, in.id)
		case in.pipeline == pNotify && unknown:
			r.add(cUnknown, in.id) // reported; sent at most once (e is 0 or 1)
			if e == 1 {
				rep.unknownSent++
			}
		case e == 1:
			r.add(cCommitted, in.id)
			if len(reasons) > 0 {
				r.alsoDead++
				if len(r.examples["also-dead"]) < 8 {
					r.examples["also-dead"] = append(r.examples["also-dead"], in.id)
				}
				for _, x := range reasons {
					r.reasons["also: "+x]++
				}
			}
		case len(reasons) > 0:
			r.add(cDead, in.id)
			for _, x := range reasons {
				r.reasons[x]++
			}
		case cancelled:
			r.add(cCancelled, in.id)
		default:
			r.add(cLost, in.id)
		}
	}

	// The model.
	h.proxy.mu.Lock()
	for _, in := range h.w.intents {
		if !needsModel(in) {
			continue
		}
		rep.modelMin++
		rep.tokensMin += h.proxy.first[in.id]
		if h.proxy.answered[in.id] > 1 {
			rep.modelRepaid++
			if len(rep.modelRepaidEx) < 8 {
				rep.modelRepaidEx = append(rep.modelRepaidEx, in.id)
				if len(rep.modelRepaidEx) <= 4 {
					rep.modelRepaidWhen = append(rep.modelRepaidWhen, h.repaidWhen(in.id))
				}
			}
			if len(h.proxy.by[in.id]) > 1 {
				rep.modelRepaidElsewhere++
			}
			h.classifyRepaid(rep, in.id)
		}
	}
	for _, n := range h.proxy.calls {
		rep.modelCalls += n
	}
	for _, n := range h.proxy.answered {
		rep.modelAnswered += n
	}
	rep.tokensSpent = h.proxy.spent
	h.proxy.mu.Unlock()
	rep.consumerKills = h.events.count(evKill) + h.events.count(evCrashPoint) + int(h.outageKills.Load()) + h.events.count(evPoisonKill)
	rep.strictTokens = h.o.strictTokens
	st := h.model.Stats()
	rep.standin = map[string]int64{
		"requests": st.Requests, "answered": st.Completions, "server errors": st.ServerErrors,
		"timeouts": st.Timeouts, "rate limited": st.RateLimited, "tokens": st.PromptTokens + st.CompletionTokens,
	}

	rep.pay = map[string]int64{
		"calls": h.pay.calls.Load(), "charges": h.pay.created.Load(), "replayed": h.pay.replayed.Load(),
		"409 in flight": h.pay.inFlight409.Load(), "422 other body": h.pay.mismatch422.Load(),
		"responses dropped": h.pay.dropped.Load(), "no key": h.pay.noKey.Load(),
	}
	rep.shotCalls, rep.shotDropped = h.shot.calls.Load(), h.shot.dropped.Load()

	// Work the ledger still shows in progress (the trace of lost work, or
	// of a claim nobody settled), and dead letters whose work the ledger
	// says was done (hole 12: a dead letter tells a person the work did
	// not happen, or may not have).
	if l, err := jskvstore.New(ctx, h.js, jskvstore.Options{}); err != nil {
		rep.ledgerErr = err
	} else {
		for rec, err := range l.Pending(ctx) {
			if err != nil {
				rep.ledgerErr = err
				break
			}
			rep.ledgerPending++
			if len(rep.pendingEx) < 8 {
				rep.pendingEx = append(rep.pendingEx, fmt.Sprintf("%s (%s) owner %s token %d claims %d updated %+.2fs lease until %+.2fs",
					rec.Key, h.nameKey(rec.Key), rec.Owner, rec.Token, rec.Attempts, rec.Updated.Sub(h.t0).Seconds(), rec.LeaseUntil.Sub(h.t0).Seconds()))
			}
		}
		for _, d := range deadKeys {
			if d.redriven {
				continue // committed by its redrive
			}
			rec, err := l.Get(ctx, d.key)
			switch {
			case errors.Is(err, ledger.ErrNotFound):
			case err != nil:
				rep.deadUnreadable = err
			case rec.State == ledger.StateCommitted:
				rep.committedDead = append(rep.committedDead, fmt.Sprintf("intent %d (%s, %s)", d.intent, h.w.intents[d.intent].pipeline, d.reason))
			}
		}
		l.Close()
	}
	if c := h.controls; c != nil {
		c.mu.Lock()
		answers := map[string]int{}
		for _, a := range c.answers {
			for cancel, ans := range a {
				ans, _, _ = strings.Cut(ans, ":") // "unknown: a dispatcher was sending it..."
				answers[map[bool]string{true: "cancel", false: "approve"}[cancel]+" → "+ans]++
			}
		}
		rep.controls = fmt.Sprintf("%d requests answered (%s), %d never answered", c.sent, formatCounts(answers), c.failures)
		c.mu.Unlock()
	}

	// Restarts: a replica process that died of anything but the soak's
	// kills (and did not merely fail to start) was started again. Only the
	// kill poison allows for that, each trigger max_deliver times.
	var poisonKills, panics, crashes int64
	for _, rp := range h.replicas {
		poisonKills += rp.poisonKills.Load()
		panics += rp.panics.Load()
		crashes += rp.crashes.Load()
	}
	kill := 0
	for _, in := range h.w.intents {
		if in.fault == poisonKill && !in.copies[0].published.IsZero() {
			kill++
		}
	}
	rep.restarts = int(poisonKills + panics + crashes)
	rep.restartBound = kill * poisonMaxDeliver
	rep.deaths = fmt.Sprintf("%d SIGKILLs by poison triggers, %d panics, %d other deaths", poisonKills, panics, crashes)

	// The ledger histories of every replica's processes.
	files := make([]string, len(h.replicas))
	for i := range h.replicas {
		files[i] = h.historyPath(i)
	}
	if _, err := os.Stat(h.redriveHistoryPath()); err == nil {
		files = append(files, h.redriveHistoryPath()) // the redrive command's, when it opened the ledger itself
	}
	if h.redriver != nil {
		if err := h.redriver.readAudit(ctx); err != nil {
			return nil, fmt.Errorf("reading the audit of the redrives: %w", err)
		}
		h.redriver.summarize(rep, deadSeq, effects)
	}
	rep.lin = checkHistories(ctx, files, ledger.MismatchAccept, h.linearizabilityHTML())
	return rep, nil
}

func (r *report) print(w io.Writer, h *harness) {
	fmt.Fprintln(w)
	nats := "one nats-server"
	if h.o.cluster > 0 {
		nats = fmt.Sprintf("a %d-node nats cluster, streams and buckets R%d", h.o.cluster, h.o.cluster)
	}
	fmt.Fprintf(w, "Oncegate soak, seed %d: %d intents, %d replicas (ledger.store: kv, llm.cache.store: kv) on %s, fault window %.0fs, settled in %.0fs after it\n",
		h.o.seed, len(h.w.intents), h.o.replicas, nats, r.window.Seconds(), r.settleTime.Seconds())
	if h.o.broken {
		fmt.Fprintln(w, "BROKEN BUILD: consumers ran with ONCEGATE_BROKEN=ack-early (ack before the effect)")
	}
	if h.o.brokenLedger {
		fmt.Fprintln(w, "BROKEN BUILD: consumers ran with ONCEGATE_BROKEN=commit-skips-token (the ledger commits without checking the fencing token)")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pipeline\teffect sink\tintents\ttriggers\tcommitted\tredriven\tcancelled\tdead-lettered\tunknown\tlost\tduplicated\t")
	for _, x := range append(slices.Clone(r.rows), r.hostile) {
		unknown, cancelled, redriven := fmt.Sprint(x.n[cUnknown]), fmt.Sprint(x.n[cCancelled]), fmt.Sprint(x.n[cRedriven])
		if x.name != pNotify {
			cancelled = "-"
		}
		if x.name != pNotify && x.name != pAlerts {
			unknown = "-"
		}
		if x.name != pCharges || r.redrive == nil {
			redriven = "-"
		}
		committed := fmt.Sprint(x.n[cCommitted])
		if x == r.hostile {
			committed = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%d\t%s\t%d\t%d\t\n", x.name, x.sink, x.intents, x.triggers, committed, redriven, cancelled,
			x.n[cDead], unknown, x.n[cLost], x.n[cDuplicated])
	}
	t := r.totals()
	intents, triggers := 0, 0
	for _, x := range append(slices.Clone(r.rows), r.hostile) {
		intents += x.intents
		triggers += x.triggers
	}
	fmt.Fprintf(tw, "total\t\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", intents, triggers, t[cCommitted], t[cRedriven], t[cCancelled], t[cDead], t[cUnknown], t[cLost], t[cDuplicated])
	tw.Flush()
	fmt.Fprintln(w)

	for _, x := range append(slices.Clone(r.rows), r.hostile) {
		if len(x.reasons) > 0 {
			fmt.Fprintf(w, "dead-letter reasons, %s: %s\n", x.name, formatCounts(x.reasons))
		}
		if x.alsoDead > 0 {
			fmt.Fprintf(w, "%s: %d intents committed (one effect) AND dead-lettered, e.g. intents %v\n", x.name, x.alsoDead, x.examples["also-dead"])
		}
		for _, c := range []string{cLost, cDuplicated} {
			if x.n[c] > 0 {
				fmt.Fprintf(w, "%s: %d %s, e.g. intents %v (keys %s)\n", x.name, x.n[c], c, x.examples[c], h.intentKeys(x.examples[c]))
			}
		}
	}
	if t[cUnknown] > 0 {
		fmt.Fprintf(w, "%s: %d one-shot effects of unknown outcome (dead-lettered unknown_outcome, not resent); the sink shows %d of them sent, %d not\n",
			pNotify, t[cUnknown], r.unknownSent, t[cUnknown]-r.unknownSent)
	}
	if len(r.hostileBad) > 0 {
		fmt.Fprintf(w, "hostile copies dead-lettered with another reason than expected: %d, e.g. %s\n", len(r.hostileBad), strings.Join(r.hostileBad[:min(3, len(r.hostileBad))], "; "))
	}
	if len(r.poisonBad) > 0 {
		fmt.Fprintf(w, "poison intents not dead-lettered (panic or exhausted) within %d deliveries: %d, e.g. %s\n", poisonMaxDeliver, len(r.poisonBad), strings.Join(r.poisonBad[:min(4, len(r.poisonBad))], "; "))
	}
	if len(r.cancelSent) > 0 {
		fmt.Fprintf(w, "%s: %d cancels answered \"cancelled\" whose effect was sent all the same, e.g. intents %v\n", pNotify, len(r.cancelSent), r.cancelSent[:min(8, len(r.cancelSent))])
	}
	if len(r.unapproved) > 0 {
		fmt.Fprintf(w, "%s: %d effects sent that were never approved, e.g. intents %v\n", pNotify, len(r.unapproved), r.unapproved[:min(8, len(r.unapproved))])
	}
	if len(r.committedDead) > 0 {
		fmt.Fprintf(w, "dead letters of work the ledger has committed: %d, e.g. %s\n", len(r.committedDead), strings.Join(r.committedDead[:min(4, len(r.committedDead))], "; "))
	}
	if r.passed > 0 || r.stray > 0 || r.dlOther > 0 {
		fmt.Fprintf(w, "effects of hostile payloads: %d; effects naming no intent: %d; dead letters naming no intent: %d\n", r.passed, r.stray, r.dlOther)
	}
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	ev := h.events
	server := "nats-server restarts"
	if h.o.cluster > 0 {
		server = "node restarts"
	}
	fmt.Fprintf(tw, "faults\tconsumer SIGKILLs %d (scheduled) + %d at armed crash points; SIGSTOP past the lease %d; %s %d (SIGTERM %d, SIGKILL %d; %d of a stream leader); partitions %d (one node cut off for %v); ledger clock jumps %d; skipped %d; nodes restarted because still unhealthy 2 minutes after a fault %d\n",
		ev.count(evKill), ev.count(evCrashPoint), ev.count(evPause), server, ev.count(evServerTerm)+ev.count(evServerKill),
		ev.count(evServerTerm), ev.count(evServerKill), ev.countDetail("leader of"), ev.count(evPartition), h.o.partitionFor, ev.count(evClock), ev.count(evMissed), ev.count(evSickNode))
	starts, failed := int64(0), int64(0)
	for _, rp := range h.replicas {
		starts += rp.starts.Load()
		failed += rp.failedStarts.Load()
	}
	fmt.Fprintf(tw, "faults, more\tconsumer outages %d (every replica SIGKILLed, %d processes, down %v: longer than the %v duplicate window of %s); ledger blips %d (%s); poison triggers %d\n",
		ev.count(evOutage), h.outageKills.Load(), h.o.outageFor, h.o.hooksWindow, hooksStream, ev.count(evBlip), blipKind(h), h.o.poison)
	fmt.Fprintf(tw, "replicas\t%d process starts, %d that did not start (e.g. while the server was down); restarts after a death the soak did not cause %d (%s) ≤ %d poison kill triggers × max_deliver %d = %d: %v\n",
		starts, failed, r.restarts, r.deaths, r.restartBound/poisonMaxDeliver, poisonMaxDeliver, r.restartBound, r.restarts <= r.restartBound)
	killed, slow, lag := h.reapLags()
	fmt.Fprintf(tw, "reaping\t%d processes killed by the soak, reaped at most %v after the SIGKILL (%d after more than %v; a death counts from the SIGKILL)\n",
		killed, lag.Round(time.Millisecond), slow, lossWindow)
	if r.controls != "" {
		fmt.Fprintf(tw, "approvals\t%s\n", r.controls)
	}
	fmt.Fprintf(tw, "payment sink\t%s\n", formatCounts(r.pay))
	if r.alerts != nil {
		r.alerts.print(tw)
	}
	if r.redrive != nil {
		fmt.Fprintf(tw, "redrive\t%s\n", r.redrive)
		for _, x := range r.redrive.failures {
			fmt.Fprintf(tw, "\ta run that did not answer, %s\n", x)
		}
		if len(r.redrive.twice) > 0 {
			fmt.Fprintf(tw, "\tdead letters republished by two redrives: %v\n", r.redrive.twice[:min(8, len(r.redrive.twice))])
		}
		for _, x := range r.redrive.left[:min(6, len(r.redrive.left))] {
			fmt.Fprintf(tw, "\tleft after the last redrive: %s\n", x)
		}
		if len(r.redrive.notRedriven) > 0 {
			fmt.Fprintf(tw, "\trefused intents that never got their charge: %d, e.g. %v\n", len(r.redrive.notRedriven), r.redrive.notRedriven[:min(8, len(r.redrive.notRedriven))])
		}
	}
	fmt.Fprintf(tw, "one-shot sink\t%d calls, %d responses dropped\n", r.shotCalls, r.shotDropped)
	fmt.Fprintf(tw, "model calls\t%d made, %d answered; minimum %d (one per intent with a model step); %d intents paid for twice or more (%d of them on two replicas)\n",
		r.modelCalls, r.modelAnswered, r.modelMin, r.modelRepaid, r.modelRepaidElsewhere)
	if len(r.modelRepaidEx) > 0 {
		fmt.Fprintf(tw, "\tpaid twice or more: e.g. intents %v\n", r.modelRepaidEx)
		for _, w := range r.modelRepaidWhen {
			fmt.Fprintf(tw, "\t  %s\n", w)
		}
		fmt.Fprintf(tw, "\tanswers paid again, by what became of the process that made the answer before: %s\n", formatCounts(r.repaidWhy))
		for _, w := range r.repaidAliveEx {
			fmt.Fprintf(tw, "\t  %s\n", w)
		}
	}
	fmt.Fprintf(tw, "stand-in\t%s\n", formatCounts(r.standin))
	extra := 0.0
	if r.tokensMin > 0 {
		extra = 100 * float64(r.tokensSpent-r.tokensMin) / float64(r.tokensMin)
	}
	fmt.Fprintf(tw, "tokens\t%d spent; minimum %d (each intent's first answer); %+.3f%%\n", r.tokensSpent, r.tokensMin, extra)
	fmt.Fprintf(tw, "paid once\tmodel answers %d ≤ %d intents with a model step + %d answers lost in flight (their process died before the answer came, or died or stopped ≤ %v after it, or died with the ledger out of its reach since; %d consumer kills) = %d: %v; tokens %d ≤ (minimum + %d lost in flight) + 0.05%% = %d: %v\n",
		r.modelAnswered, r.modelMin, r.lostInFlight, lossWindow, r.consumerKills, r.modelMin+r.lostInFlight, r.modelBounded(),
		r.tokensSpent, r.lostTokens, (r.tokensMin+r.lostTokens)*10005/10000, r.tokensBounded())
	if r.ledgerErr != nil {
		fmt.Fprintf(tw, "ledger\tpending records: unreadable: %v\n", r.ledgerErr)
	} else {
		fmt.Fprintf(tw, "ledger\t%d records still pending (claimed, never committed or failed)\n", r.ledgerPending)
		for _, p := range r.pendingEx {
			fmt.Fprintf(tw, "\t  %s\n", p)
		}
	}
	if r.deadUnreadable != nil {
		fmt.Fprintf(tw, "\tthe records of the dead letters' keys: unreadable: %v\n", r.deadUnreadable)
	}
	if r.lin != nil {
		fmt.Fprintf(tw, "ledger history\t%s\n", r.lin)
		if r.lin.visualized != "" {
			fmt.Fprintf(tw, "\tvisualization of the keys whose history is not linearizable: %s%s\n", r.lin.visualized, keepHint(h, r.lin.visualized))
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	verdict := "PASS"
	if !r.pass() {
		verdict = "FAIL"
	}
	lin := "unchecked"
	if r.lin != nil {
		lin = fmt.Sprintf("%v (%d operations, %d keys, %.1fs)", r.lin.ok(), r.lin.ops, r.lin.keys, r.lin.took.Seconds())
	}
	fmt.Fprintf(w, "verdict: %s — lost %d, duplicated %d, hostile with an effect %d, stray effects %d, settled %v, model answers ≤ bound %v, tokens ≤ bound %v, "+
		"poison astray %d, restarts %d ≤ %d, cancelled yet sent %d, sent unapproved %d, committed and dead-lettered %d, claims left pending %d, ledger linearizable %s, "+
		"alerts: resolves matched %s, resolves paid %d, misrouted %d, firings after their resolve %d, dropped by 429 %d; redrive: %s\n",
		verdict, t[cLost], t[cDuplicated], r.passed, r.stray, r.settled, r.modelBounded(), r.tokensBounded(),
		len(r.poisonBad), r.restarts, r.restartBound, len(r.cancelSent), len(r.unapproved), len(r.committedDead), r.ledgerPending, lin,
		r.alerts.matched(), len(r.alerts.resolvePaid), len(r.alerts.misrouted)+len(r.alerts.unmatched), r.alerts.firingsAfterResolve(), r.alerts.droppedBy429(), r.redrive.verdict())
	if !r.settled {
		fmt.Fprintf(w, "not settled: %s\n", r.settleWhy)
	}
	if verdict == "FAIL" {
		h.printTrails(w, r)
	}
}

// keepHint says how to keep a file of the run's directory.
func keepHint(h *harness, path string) string {
	if !h.o.keep && strings.HasPrefix(path, h.dir) {
		return " (removed at exit: run with -keep to keep it)"
	}
	return ""
}

func formatCounts[V int | int64](m map[string]V) string {
	keys := slices.Collect(maps.Keys(m))
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// repaidWhen says when and by which replica an intent's answers were made,
// and the last fault before its second answer. Call with h.proxy.mu held.
func (h *harness) repaidWhen(id int) string {
	var parts []string
	ts := h.proxy.times[id]
	for _, a := range ts {
		parts = append(parts, fmt.Sprintf("replica-%d at %+.2fs", a.replica, a.at.Sub(h.t0).Seconds()))
	}
	last := ""
	if len(ts) > 1 {
		for _, ev := range h.events.snapshot() {
			if ev.at.Before(ts[1].at) && ev.kind != evMissed {
				last = fmt.Sprintf("; last fault before the second: %s replica-%d %s at %+.2fs", ev.kind, ev.replica, ev.detail, ev.at.Sub(h.t0).Seconds())
			}
		}
	}
	return fmt.Sprintf("intent %d: answered by %s%s", id, strings.Join(parts, ", "), last)
}

// classifyRepaid sorts an intent's answers after its first by what became
// of the process that made the answer before: it died (SIGKILL, a crash
// point, a poison trigger, an outage) before the next answer was paid
// for, so the answer may have gone with it, and how soon after the answer
// it died; or it still ran, and the answer was paid for again all the same.
// Call with h.proxy.mu held.
func (h *harness) classifyRepaid(rep *report, id int) {
	if rep.repaidWhy == nil {
		rep.repaidWhy = map[string]int{}
	}
	ts := h.proxy.times[id]
	for i := 1; i < len(ts); i++ {
		prev, next := ts[i-1], ts[i]
		if prev.replica < 0 || prev.replica >= len(h.replicas) {
			rep.repaidWhy["answer by an unknown replica"]++
			continue
		}
		if h.stoppedWith(prev, next) {
			rep.repaidWhy["stopped ≤ "+lossWindow.String()+" after (SIGSTOP)"]++
			rep.lostInFlight++
			rep.lostTokens += next.tokens
			continue
		}
		ended, how, ok := h.replicas[prev.replica].diedAfter(prev.at)
		if ok && ended.Before(next.at) && ended.Sub(prev.at) <= lossWindow {
			rep.lostInFlight++
			rep.lostTokens += next.tokens
		}
		if !ok || !ended.Before(next.at) {
			rep.repaidWhy["its process still ran"]++
			if len(rep.repaidAliveEx) < 6 {
				rep.repaidAliveEx = append(rep.repaidAliveEx, fmt.Sprintf("intent %d: replica-%d at %+.3fs, still running, then replica-%d at %+.3fs",
					id, prev.replica, prev.at.Sub(h.t0).Seconds(), next.replica, next.at.Sub(h.t0).Seconds()))
				rep.repaidAliveIDs = append(rep.repaidAliveIDs, id)
			}
			continue
		}
		if ended.Before(prev.at) {
			// No process of the replica ran when the answer came: the
			// model answered a call whose caller had died.
			rep.repaidWhy["died before the answer came ("+how+")"]++
			continue
		}
		var after string
		switch d := ended.Sub(prev.at); {
		case d <= 10*time.Millisecond:
			after = "≤ 10ms"
		case d <= 100*time.Millisecond:
			after = "≤ 100ms"
		case d <= time.Second:
			after = "≤ 1s"
		case d <= 10*time.Second:
			after = "≤ 10s"
		default:
			after = "> 10s"
		}
		if h.serverDown(prev.at, ended) {
			how += ", a nats-server down in between"
		}
		if ended.Sub(prev.at) > lossWindow && !h.ledgerAnswered(prev.replica, prev.at, ended) {
			// The process kept the answer on disk and in memory, and tried
			// the ledger until it died: no write of it was answered from
			// the answer to its death (a partition, no majority), so
			// nobody else could find the answer, and nothing could.
			rep.repaidWhy["died "+after+" after, the ledger out of its reach until then ("+how+")"]++
			rep.lostInFlight++
			rep.lostTokens += next.tokens
			continue
		}
		rep.repaidWhy["died "+after+" after ("+how+")"]++
		if ended.Sub(prev.at) > lossWindow && len(rep.repaidAliveEx) < 6 {
			rep.repaidAliveEx = append(rep.repaidAliveEx, fmt.Sprintf("intent %d: replica-%d at %+.3fs, which died (%s) at %+.3fs, then replica-%d at %+.3fs",
				id, prev.replica, prev.at.Sub(h.t0).Seconds(), how, ended.Sub(h.t0).Seconds(), next.replica, next.at.Sub(h.t0).Seconds()))
			rep.repaidAliveIDs = append(rep.repaidAliveIDs, id)
		}
	}
}

// ledgerAnswered reports whether the ledger answered a write of replica's
// process (a claim, a renewal, a note, a commit...) asked after from and
// answered by to: with a result or with one of its own verdicts, not a
// timeout or a lost connection. Read from the replica's ledger history.
func (h *harness) ledgerAnswered(replica int, from, to time.Time) bool {
	h.reach.once.Do(func() {
		h.reach.writes = map[int][][2]int64{}
		h.reach.unread = map[int]bool{}
		for i := range h.replicas {
			ops, _, err := history.ReadFile(h.historyPath(i))
			if err != nil {
				h.reach.unread[i] = true
				continue
			}
			for _, o := range ops {
				switch o.Call.Op {
				case history.OpGet, history.OpPending, history.OpClose:
					continue
				}
				if o.Answered() && o.Return.Err != history.ErrOther {
					h.reach.writes[i] = append(h.reach.writes[i], [2]int64{o.Call.Time, o.Return.Time})
				}
			}
		}
	})
	if h.reach.unread[replica] {
		return true // unknown: the answer is not excused
	}
	for _, w := range h.reach.writes[replica] {
		if w[0] >= from.UnixNano() && w[1] <= to.UnixNano() {
			return true
		}
	}
	return false
}

// stoppedWith reports whether the replica that made answer prev was
// stopped (SIGSTOP) when the answer came, or within lossWindow after it,
// or had resumed at most resumeGrace before it, and the pause began before
// answer next: the answer was in its socket or its hands, and the pause
// (past the lease) ran out the call's deadline and its fill claim, so the
// process dropped it when it resumed, while another replica took the
// claim over. (A stopped process's socket takes the model's answer all
// the same: the soak's proxy records it answered, or, if the proxy's write
// waits on the stopped reader, records it just after the resume.)
func (h *harness) stoppedWith(prev, next answerAt) bool {
	var stopped time.Time // the pause under way, if any
	for _, ev := range h.events.snapshot() {
		if ev.replica != prev.replica {
			continue
		}
		switch ev.kind {
		case evPause:
			stopped = ev.at
		case evResume:
			if !stopped.IsZero() && !ev.at.Add(resumeGrace).Before(prev.at) && stopped.Sub(prev.at) <= lossWindow && stopped.Before(next.at) {
				return true // stopped before the answer, or within the window after it
			}
			stopped = time.Time{}
		}
	}
	return !stopped.IsZero() && stopped.Sub(prev.at) <= lossWindow && stopped.Before(next.at)
}

// serverDown reports whether a nats-server (or a node of the cluster) was
// down at some moment between from and to.
func (h *harness) serverDown(from, to time.Time) bool {
	down := 0
	for _, ev := range h.events.snapshot() {
		if !ev.at.Before(to) {
			break
		}
		stop := ev.kind == evServerTerm || ev.kind == evServerKill || ev.kind == evSickNode
		if !ev.at.Before(from) && (down > 0 || stop) {
			return true
		}
		switch {
		case stop:
			down++
		case ev.kind == evServerUp:
			down--
		}
	}
	return down > 0
}

// writeAnswers writes every answer the model made to logs/model-answers.jsonl
// (with -keep): when, for which replica, for which intent and its key, to
// set beside the replicas' logs.
func (h *harness) writeAnswers() error {
	keys := map[int]string{}
	keyers := map[string]*dedupe.Keyer{}
	for _, in := range h.w.intents {
		if !needsModel(in) {
			continue
		}
		ky, ok := keyers[in.pipeline]
		if !ok {
			ky, _ = h.keyer(in.pipeline)
			keyers[in.pipeline] = ky
		}
		if ky == nil {
			continue
		}
		if ik, err := ky.Intent(in.copies[0].data); err == nil {
			keys[in.id] = ik.Key.String()
		}
	}
	var b strings.Builder
	h.proxy.mu.Lock()
	for id, ts := range h.proxy.times {
		for _, a := range ts {
			fmt.Fprintf(&b, "{\"t\":%q,\"intent\":%d,\"key\":%q,\"replica\":%d}\n", a.at.Format(time.RFC3339Nano), id, keys[id], a.replica)
		}
	}
	h.proxy.mu.Unlock()
	return os.WriteFile(filepath.Join(h.dir, "logs", "model-answers.jsonl"), []byte(b.String()), 0o644)
}

// nameKey says which intent a ledger key belongs to: its own record, or
// its one-shot effect's dispatch or approval.
func (h *harness) nameKey(k dedupe.Key) string {
	keyers := map[string]*dedupe.Keyer{}
	for _, in := range h.w.intents {
		if in.hostile != "" {
			continue
		}
		ky, ok := keyers[in.pipeline]
		if !ok {
			ky, _ = h.keyer(in.pipeline)
			keyers[in.pipeline] = ky
		}
		if ky == nil {
			continue
		}
		ik, err := ky.Intent(in.copies[0].data)
		if err != nil {
			continue
		}
		switch k {
		case ik.Key:
			return fmt.Sprintf("intent %d, %s", in.id, in.pipeline)
		case consumer.DispatchKey(ik.Key):
			return fmt.Sprintf("dispatch of intent %d, %s", in.id, in.pipeline)
		case consumer.ApprovalKey(ik.Key):
			return fmt.Sprintf("approval of intent %d, %s", in.id, in.pipeline)
		}
	}
	return "no intent's"
}

// deadKey is a dead letter's ledger key, and the intent it names.
type deadKey struct {
	key      dedupe.Key
	intent   int
	reason   string
	redriven bool // a dead letter the redrive phase redrives (its record ends committed)
}

// blipKind says what a ledger blip is in this run.
func blipKind(h *harness) string {
	if h.o.cluster > 0 {
		return "step-downs of the leader of " + ledgerStream
	}
	return fmt.Sprintf("every replica's ledger writes refused for %v", h.o.ledgerBlipFor)
}

// poisonTries counts, per poison intent, the times its work reached the
// effect: the panics the replicas logged and the SIGKILLs they announced,
// by the intent's key.
func (h *harness) poisonTries() (map[int]int, error) {
	keyer, err := h.keyer(pPoison)
	if err != nil {
		return nil, err
	}
	byKey := map[string]int{}
	for _, in := range h.w.intents {
		if in.pipeline == pPoison {
			k, err := keyer.Intent(in.copies[0].data)
			if err != nil {
				return nil, fmt.Errorf("the key of poison intent %d: %w", in.id, err)
			}
			byKey[k.Key.String()] = in.id
		}
	}
	tries := map[int]int{}
	for _, r := range h.replicas {
		b, err := os.ReadFile(r.log)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			var k string
			switch {
			case strings.Contains(line, string(poisonMarker)):
				_, k, _ = strings.Cut(line, ", key ")
			case strings.Contains(line, "pipeline="+pPoison) && strings.Contains(line, "panicked"):
				_, k, _ = strings.Cut(line, " key=")
			default:
				continue
			}
			k, _, _ = strings.Cut(strings.TrimSpace(k), " ")
			if id, ok := byKey[k]; ok {
				tries[id]++
			}
		}
	}
	return tries, nil
}

// reapLags returns how many replica processes the soak killed, how many of
// them were reaped more than lossWindow after the SIGKILL, and the longest
// wait: a process is reaped once every thread has left the kernel, which a
// slow disk can hold up.
func (h *harness) reapLags() (killed, slow int, longest time.Duration) {
	for _, r := range h.replicas {
		r.mu.Lock()
		for _, c := range r.lives {
			select {
			case <-c.done:
			default:
				continue
			}
			if d, ok := c.reapLag(); ok {
				killed++
				longest = max(longest, d)
				if d > lossWindow {
					slow++
				}
			}
		}
		r.mu.Unlock()
	}
	return killed, slow, longest
}

// writeReceived writes what PagerDuty and Slack accepted to
// logs/alert-receivers.jsonl (with -keep): when, which receiver, the
// Idempotency-Key, the alerts intent the message names and, for PagerDuty,
// its action and dedup_key; then the PagerDuty events answered 429
// ("refused":429).
func (h *harness) writeReceived() error {
	if h.alerts == nil {
		return nil
	}
	var b strings.Builder
	for _, r := range []struct {
		name string
		log  *receiverLog
	}{{"pagerduty", h.alerts.pdLog}, {"slack", h.alerts.slackLog}} {
		for _, m := range r.log.snapshot() {
			fmt.Fprintf(&b, "{\"t\":%q,\"receiver\":%q,\"key\":%q,\"intent\":%d,\"action\":%q,\"dedup\":%q}\n",
				m.at.Format(time.RFC3339Nano), r.name, m.key, intentOf(m.body), m.action, m.dedup)
		}
	}
	h.alerts.pdLog.mu.Lock()
	throttles := append([]received(nil), h.alerts.pdLog.throttles...)
	h.alerts.pdLog.mu.Unlock()
	for _, m := range throttles {
		fmt.Fprintf(&b, "{\"t\":%q,\"receiver\":\"pagerduty\",\"refused\":429,\"key\":%q,\"intent\":%d,\"action\":%q,\"dedup\":%q}\n",
			m.at.Format(time.RFC3339Nano), m.key, intentOf(m.body), m.action, m.dedup)
	}
	return os.WriteFile(filepath.Join(h.dir, "logs", "alert-receivers.jsonl"), []byte(b.String()), 0o644)
}

// intentKeys are the intent keys of ids, for finding them in the
// replicas' logs.
func (h *harness) intentKeys(ids []int) string {
	var keys []string
	for _, id := range ids {
		k := "?"
		if id >= 0 && id < len(h.w.intents) {
			in := h.w.intents[id]
			if ky, err := h.keyer(in.pipeline); err == nil && ky != nil {
				if ik, err := ky.Intent(in.copies[0].data); err == nil {
					k = ik.Key.String()
				}
			}
		}
		keys = append(keys, k)
	}
	return strings.Join(keys, " ")
}
