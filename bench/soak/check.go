package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger/jskvstore"
)

// streamMsg is a message read back from a stream.
type streamMsg struct {
	subject string
	header  nats.Header
	data    []byte
	at      time.Time
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
				sm.at = meta.Timestamp
			}
			out = append(out, sm)
			got++
		}
		if got == 0 {
			if empty++; empty > 5 {
				return nil, fmt.Errorf("reading %s: %d of %d messages: %v", name, len(out), want, b.Error())
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
)

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
	effectsAt   []timed
	published   []time.Time

	modelMin, modelCalls, modelAnswered, modelRepaid int
	modelRepaidElsewhere                             int // of modelRepaid, answered on two replicas or more
	modelRepaidEx                                    []int
	modelRepaidWhen                                  []string
	tokensMin, tokensSpent                           int64
	standin                                          map[string]int64

	pay           map[string]int64
	shotCalls     int64
	shotDropped   int64
	ledgerPending int
	ledgerErr     error

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
// consumer killed, and with -strict-tokens the tokens within 0.05% of the
// minimum.
func (r *report) pass() bool {
	t := r.totals()
	return r.settled && t[cLost] == 0 && t[cDuplicated] == 0 && r.passed == 0 && r.stray == 0 && r.modelBounded() &&
		(r.tokensBounded() || !r.strictTokens)
}

// modelBounded: the model answered at most once per intent with a model
// step, plus once per consumer killed (a process killed after the model
// answered and before the answer was stored takes the answer with it).
func (r *report) modelBounded() bool { return r.modelAnswered <= r.modelMin+r.consumerKills }

// tokensBounded: the tokens spent are within 0.05% of the minimum, each
// intent's first answer.
func (r *report) tokensBounded() bool { return r.tokensSpent*10000 <= r.tokensMin*10005 }

func (h *harness) check(ctx context.Context) (*report, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rep := &report{hostile: newRow("hostile", "must be dead-lettered")}
	sinks := map[string]string{
		pTriage:  "jetstream, Nats-Msg-Id",
		pCharges: "http, Idempotency-Key",
		pNotify:  "http, one-shot via outbox",
		pHooks:   "jetstream (gate, batched)",
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

	// Dead letters.
	type dl struct{ reason, pipeline string }
	dead := map[int][]dl{}
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
			dead[i] = append(dead[i], dl{reason, m.header.Get(consumer.HeaderPipeline)})
			continue
		}
		rep.dlOther++
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
		e := effects[in.id]
		var reasons []string
		unknown := false
		for _, d := range dead[in.id] {
			reasons = append(reasons, d.reason)
			if d.reason == string(consumer.ReasonUnknownOutcome) {
				unknown = true
			}
		}
		switch {
		case e > 1:
			r.add(cDuplicated, in.id)
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
		default:
			r.add(cLost, in.id)
		}
	}

	// The model.
	h.proxy.mu.Lock()
	for _, in := range h.w.intents {
		if in.hostile != "" || !hasStep(in.pipeline) {
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
	rep.consumerKills = h.events.count(evKill) + h.events.count(evCrashPoint)
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

	// Work the ledger still shows in progress: the trace of lost work.
	if l, err := jskvstore.New(ctx, h.js, jskvstore.Options{}); err != nil {
		rep.ledgerErr = err
	} else {
		for _, err := range l.Pending(ctx) {
			if err != nil {
				rep.ledgerErr = err
				break
			}
			rep.ledgerPending++
		}
		l.Close()
	}
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
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pipeline\teffect sink\tintents\ttriggers\tcommitted\tdead-lettered\tunknown\tlost\tduplicated\t")
	for _, x := range append(slices.Clone(r.rows), r.hostile) {
		unknown := fmt.Sprint(x.n[cUnknown])
		if x.name != pNotify {
			unknown = "-"
		}
		committed := fmt.Sprint(x.n[cCommitted])
		if x == r.hostile {
			committed = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%s\t%d\t%d\t\n", x.name, x.sink, x.intents, x.triggers, committed,
			x.n[cDead], unknown, x.n[cLost], x.n[cDuplicated])
	}
	t := r.totals()
	intents, triggers := 0, 0
	for _, x := range append(slices.Clone(r.rows), r.hostile) {
		intents += x.intents
		triggers += x.triggers
	}
	fmt.Fprintf(tw, "total\t\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", intents, triggers, t[cCommitted], t[cDead], t[cUnknown], t[cLost], t[cDuplicated])
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
				fmt.Fprintf(w, "%s: %d %s, e.g. intents %v\n", x.name, x.n[c], c, x.examples[c])
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
	fmt.Fprintf(tw, "faults\tconsumer SIGKILLs %d (scheduled) + %d at armed crash points; SIGSTOP past the lease %d; %s %d (SIGTERM %d, SIGKILL %d; %d of a stream leader); partitions %d (one node cut off for %v); ledger clock jumps %d; skipped %d\n",
		ev.count(evKill), ev.count(evCrashPoint), ev.count(evPause), server, ev.count(evServerTerm)+ev.count(evServerKill),
		ev.count(evServerTerm), ev.count(evServerKill), ev.countDetail("leader of"), ev.count(evPartition), h.o.partitionFor, ev.count(evClock), ev.count(evMissed))
	starts, failed := int64(0), int64(0)
	for _, rp := range h.replicas {
		starts += rp.starts.Load()
		failed += rp.failedStarts.Load()
	}
	fmt.Fprintf(tw, "replicas\t%d process starts, %d exits with an error (e.g. started while the server was down)\n", starts, failed)
	fmt.Fprintf(tw, "payment sink\t%s\n", formatCounts(r.pay))
	fmt.Fprintf(tw, "one-shot sink\t%d calls, %d responses dropped\n", r.shotCalls, r.shotDropped)
	fmt.Fprintf(tw, "model calls\t%d made, %d answered; minimum %d (one per intent with a model step); %d intents paid for twice or more (%d of them on two replicas)\n",
		r.modelCalls, r.modelAnswered, r.modelMin, r.modelRepaid, r.modelRepaidElsewhere)
	if len(r.modelRepaidEx) > 0 {
		fmt.Fprintf(tw, "\tpaid twice or more: e.g. intents %v\n", r.modelRepaidEx)
		for _, w := range r.modelRepaidWhen {
			fmt.Fprintf(tw, "\t  %s\n", w)
		}
	}
	fmt.Fprintf(tw, "stand-in\t%s\n", formatCounts(r.standin))
	extra := 0.0
	if r.tokensMin > 0 {
		extra = 100 * float64(r.tokensSpent-r.tokensMin) / float64(r.tokensMin)
	}
	fmt.Fprintf(tw, "tokens\t%d spent; minimum %d (each intent's first answer); %+.3f%%\n", r.tokensSpent, r.tokensMin, extra)
	fmt.Fprintf(tw, "paid once\tmodel answers %d ≤ %d intents with a model step + %d consumer kills = %d: %v; tokens %d ≤ minimum + 0.05%% = %d: %v\n",
		r.modelAnswered, r.modelMin, r.consumerKills, r.modelMin+r.consumerKills, r.modelBounded(),
		r.tokensSpent, r.tokensMin*10005/10000, r.tokensBounded())
	if r.ledgerErr != nil {
		fmt.Fprintf(tw, "ledger\tpending records: unreadable: %v\n", r.ledgerErr)
	} else {
		fmt.Fprintf(tw, "ledger\t%d records still pending (claimed, never committed or failed)\n", r.ledgerPending)
	}
	tw.Flush()
	fmt.Fprintln(w)
	verdict := "PASS"
	if !r.pass() {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "verdict: %s — lost %d, duplicated %d, hostile with an effect %d, stray effects %d, settled %v, model answers ≤ bound %v, tokens ≤ bound %v\n",
		verdict, t[cLost], t[cDuplicated], r.passed, r.stray, r.settled, r.modelBounded(), r.tokensBounded())
	if !r.settled {
		fmt.Fprintf(w, "not settled: %s\n", r.settleWhy)
	}
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
