package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/jskvstore"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/receiver"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// The alerts pipeline is the last mile under faults: Alertmanager-shaped
// triggers, each alert firing (sent one to three times, as Alertmanager
// repeats a notification) and most of them resolved later under the same
// fingerprint, and a few alerts first seen resolved. The pipeline keys a
// trigger by the alert's identity and its status (key.status), triages
// firings with the model and skips the step for resolves (skip_when), and
// routes a critical firing to PagerDuty, any other firing to Slack; a
// resolve goes where its firing went (PagerDuty's event_action resolve
// with the firing's dedup_key, or a Slack note), and a resolve whose
// alert never fired here sends nothing. PagerDuty and Slack are the
// schema-checking receivers of package receiver, served from this
// process; the pagerduty preset's effect is replayable (PagerDuty
// collapses events by dedup_key), the slack preset's is one-shot, through
// the outbox.
//
// The lifecycle under a forced race: for a share of the critical alerts
// that resolve (-alerts-race), PagerDuty refuses the firing's page (500)
// until it has the resolve, so the firing is retried past its resolve; it
// must be dropped, never paged after its resolve (the resolve, after
// waiting for it up to key.resolve_wait, reaches PagerDuty first, which
// drops it: nothing was open). And a storm (-storm): that many critical
// alerts within a minute to the one routing key, past PagerDuty's quota
// (120 a minute; both time scaled by -storm-scale): every alert must be
// paged once, none refused with a 429.

const (
	severityCritical = "critical"
	severityWarning  = "warning"

	statusFiring   = "firing"
	statusResolved = "resolved"
)

// alertInfo is what an alerts intent is: a firing or a resolve of one
// alert.
type alertInfo struct {
	fingerprint string
	severity    string
	status      string
	firing      *intent // a resolve's firing, nil for an alert first seen resolved
	resolve     *intent // a firing's resolve, if it gets one
	raced       bool    // its page is refused until its resolve (the firing and its resolve)
	storm       bool    // an alert of the storm
}

// toPagerDuty and toSlack say where an alerts intent's messages go: a
// firing by its route (a raced firing nowhere: it is dropped after its
// resolve), a resolve where its firing went, one first seen resolved
// nowhere.
func (a *alertInfo) toPagerDuty() bool {
	return a.severity == severityCritical && a.reaches()
}

func (a *alertInfo) toSlack() bool {
	return a.severity != severityCritical && a.reaches()
}

func (a *alertInfo) reaches() bool {
	if a.status == statusResolved {
		return a.firing != nil
	}
	return !a.raced
}

// routeName is the route the intent should take (a resolve: its
// firing's).
func (a *alertInfo) routeName() string {
	switch {
	case a.status == statusResolved && a.firing == nil:
		return "none (first seen resolved)"
	case a.raced && a.status == statusFiring:
		return "page, dropped after its resolve"
	case a.severity == severityCritical:
		return "page"
	}
	return "rest"
}

// needsModel reports whether an intent's work calls the model: an intent
// of a pipeline with a model step, but not an alert's resolve.
func needsModel(in *intent) bool {
	if in.hostile != "" {
		return false
	}
	if in.alert != nil {
		return in.alert.status == statusFiring
	}
	return hasStep(in.pipeline)
}

// addAlerts draws n alerts with ids from next: each a firing, 70% of them
// resolved 2 to 6s after their last firing copy, and one in 25 an alert
// first seen resolved (never firing); a share race of the critical ones
// that resolve are raced. The firings are spread over 85% of pubWindow,
// so that the resolves go out within end.
func addAlerts(rng *rand.Rand, w *workload, n, next int, pubWindow, end time.Duration, race float64) {
	for j := range n {
		sev := severityWarning
		if rng.IntN(10) < 4 {
			sev = severityCritical
		}
		fp := fmt.Sprintf("am-%06d", j)
		at := time.Duration(float64(pubWindow) * 0.85 * (float64(j) + 0.5) / float64(n))
		if j%25 == 24 {
			in := &intent{id: next, pipeline: pAlerts, alert: &alertInfo{fingerprint: fp, severity: sev, status: statusResolved}}
			next++
			addAlertCopies(rng, w, in, at, 1+rng.IntN(2), end)
			continue
		}
		firing := &intent{id: next, pipeline: pAlerts, alert: &alertInfo{fingerprint: fp, severity: sev, status: statusFiring}}
		next++
		last := addAlertCopies(rng, w, firing, at, 1+rng.IntN(3), end)
		if rng.IntN(10) < 7 {
			res := &intent{id: next, pipeline: pAlerts, alert: &alertInfo{fingerprint: fp, severity: sev, status: statusResolved, firing: firing}}
			next++
			firing.alert.resolve = res
			if sev == severityCritical && rng.Float64() < race {
				firing.alert.raced, res.alert.raced = true, true
			}
			addAlertCopies(rng, w, res, min(end, last+2*time.Second+time.Duration(rng.Int64N(int64(4*time.Second)))), 1+rng.IntN(2), end)
		}
	}
}

// addStorm adds n critical alerts with ids from next, one trigger each,
// published evenly over over from at: a storm to one routing key.
func addStorm(w *workload, n, next int, at, over time.Duration) {
	for j := range n {
		in := &intent{id: next + j, pipeline: pAlerts, alert: &alertInfo{fingerprint: fmt.Sprintf("st-%06d", j), severity: severityCritical, status: statusFiring, storm: true}}
		p := &publication{at: at + time.Duration(float64(over)*float64(j)/float64(n)), intent: in, kind: "original",
			subject: "triggers." + pAlerts, msgID: fmt.Sprintf("soak-%06d-0", in.id)}
		p.data = alertPayload(in, 0)
		in.copies = []*publication{p}
		w.pubs = append(w.pubs, p)
		w.intents = append(w.intents, in)
	}
}

// addAlertCopies adds an alerts intent with copies publications from at:
// the first, then Alertmanager's repeats (the same bytes) and redeliveries
// (another delivery number), up to 3s later. It returns when the last goes
// out.
func addAlertCopies(rng *rand.Rand, w *workload, in *intent, at time.Duration, copies int, end time.Duration) time.Duration {
	last := at
	for c := range copies {
		t, kind := at, "original"
		if c > 0 {
			t = min(end, at+time.Duration(rng.Int64N(int64(3*time.Second))))
			kind = []string{"retry", "redelivery"}[rng.IntN(2)]
		}
		p := &publication{at: t, intent: in, copy: c, kind: kind, subject: "triggers." + pAlerts,
			msgID: fmt.Sprintf("soak-%06d-%d", in.id, c)}
		if kind == "retry" {
			p.data = in.copies[0].data
		} else {
			p.data = alertPayload(in, c)
		}
		last = max(last, t)
		in.copies = append(in.copies, p)
		w.pubs = append(w.pubs, p)
	}
	w.intents = append(w.intents, in)
	return last
}

// alertPayload is one alert as Oncegate's Alertmanager ingress publishes
// it: the notification's status, and the alert. Its key is the
// fingerprint and startsAt; its annotation ref carries the intent's
// marker (a resolve's own, not its firing's), which the prompt and the
// Slack text repeat.
func alertPayload(in *intent, delivery int) []byte {
	a := in.alert
	n := strings.TrimPrefix(strings.TrimPrefix(a.fingerprint, "am-"), "st-")
	b, err := json.Marshal(map[string]any{
		"receiver": "oncegate", "status": a.status, "delivery": delivery,
		"alert": map[string]any{
			"status": a.status, "fingerprint": a.fingerprint, "startsAt": "2026-01-01T00:00:00Z",
			"labels": map[string]string{"alertname": "DiskAlmostFull", "instance": "db-" + n, "severity": a.severity},
			"annotations": map[string]string{
				"summary": "Disk 93% full on db-" + n, "ref": fmt.Sprintf("soak%06d", in.id),
			},
		},
	})
	if err != nil {
		panic(err)
	}
	return b
}

// The receivers' secrets, as the configuration reads them from the
// environment.
const (
	envRoutingKey = "SOAK_PAGERDUTY_ROUTING_KEY"
	envSlackURL   = "SOAK_SLACK_WEBHOOK_URL"
	routingKey    = "Rsoak0123456789abcdef0123456789a"
	slackPath     = "/services/TSOAK/BSOAK/soak0webhook0s3cret"
)

// received is one request a receiver accepted (answered 2xx).
type received struct {
	at     time.Time
	key    string // Idempotency-Key
	body   []byte
	action string // PagerDuty: event_action
	dedup  string // PagerDuty: dedup_key
}

// receiverLog passes requests to a receiver, counts those in flight, and
// keeps those it accepted.
type receiverLog struct {
	h http.Handler

	inFlight  atomic.Int64
	mu        sync.Mutex
	accepted  []received
	refused   int
	throttled map[string]int // Idempotency-Key → 429s answered
	throttles []received     // the requests answered 429, when
}

func (l *receiverLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.inFlight.Add(1)
	defer l.inFlight.Add(-1)
	c, ok := readCall(w, r)
	if !ok {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(c.body))
	cw := &captureWriter{ResponseWriter: w, status: http.StatusOK}
	l.h.ServeHTTP(cw, r)
	l.mu.Lock()
	defer l.mu.Unlock()
	if cw.status/100 != 2 {
		l.refused++
		if cw.status == http.StatusTooManyRequests {
			if l.throttled == nil {
				l.throttled = map[string]int{}
			}
			l.throttled[c.key]++
			l.throttles = append(l.throttles, l.record(c))
		}
		return
	}
	l.accepted = append(l.accepted, l.record(c))
}

// record is a request as the log keeps it.
func (l *receiverLog) record(c effectCall) received {
	rec := received{at: time.Now(), key: c.key, body: c.body}
	var ev struct {
		Action string `json:"event_action"`
		Dedup  string `json:"dedup_key"`
	}
	if json.Unmarshal(c.body, &ev) == nil {
		rec.action, rec.dedup = ev.Action, ev.Dedup
	}
	return rec
}

func (l *receiverLog) snapshot() []received {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]received(nil), l.accepted...)
}

// alertReceivers are the alerts pipeline's PagerDuty and Slack.
type alertReceivers struct {
	pd       *receiver.PagerDuty
	slack    *receiver.Slack
	pdLog    *receiverLog
	slackLog *receiverLog
}

func newAlertReceivers() *alertReceivers {
	r := &alertReceivers{pd: receiver.NewPagerDuty(routingKey), slack: receiver.NewSlack(slackPath)}
	r.pdLog, r.slackLog = &receiverLog{h: r.pd}, &receiverLog{h: r.slack}
	return r
}

func (r *alertReceivers) busy() int { return int(r.pdLog.inFlight.Load() + r.slackLog.inFlight.Load()) }

// alertEffects is what PagerDuty and Slack got, by alerts intent.
type alertEffects struct {
	pdKeys    map[int]map[string]bool // intent → the distinct effect keys (Idempotency-Key) of its PagerDuty events
	pdEvents  map[int]int             // intent → PagerDuty events, sent again under one key included
	slack     map[int]int             // intent → Slack messages
	unmatched []string                // PagerDuty events whose dedup_key is no alert's identity, or has no intent of that action
	misrouted []string                // a message at a receiver the intent's route does not name, or of the other status
	stray     int                     // Slack messages naming no alerts intent

	afterResolve []string  // firings that reached a receiver after their resolve had
	wrongState   []string  // alerts whose incident PagerDuty holds open when it should not, or not when it should
	stormLast    time.Time // when the storm's last page was accepted

	// What the ledger says the consumer decided, by intent: a firing
	// dropped because its resolve went out first, a resolve whose firing
	// left no route (nothing sent), a Slack message the dispatcher did not
	// send to keep the lifecycle in order. maybeSent are the dropped
	// firings whose record says an earlier try may have sent some of them
	// (a holder that stopped, its claim taken over): a page of theirs
	// before the resolve is no fault; one after it is (afterResolve).
	dropped, none, slackDropped, maybeSent map[int]bool
	dropped429                             []string // events refused with a 429 and never accepted after, the lifecycle's drops aside
	throttledDropped                       []int    // firings refused with a 429, then dropped by the lifecycle (their resolve went out first)
	throttled                              int      // 429s answered
	otherKey                               int      // PagerDuty events accepted under another key than their intent's effect key
}

func (a *alertEffects) wrong(list *[]string, format string, args ...any) {
	if len(*list) < 8 {
		*list = append(*list, fmt.Sprintf(format, args...))
	} else {
		*list = append(*list, "")
	}
}

// alertEffects attributes the receivers' messages to the alerts intents:
// a PagerDuty event by its dedup_key, which must be an alert's identity
// (the key of its firing, and of a resolve less its status, as the
// pipeline's keyer derives it), to the firing (a trigger) or the resolve
// (a resolve) of that alert; a Slack message by the intent's marker in
// its text.
func (h *harness) alertEffects(rep *report) (*alertEffects, error) {
	ae := &alertEffects{pdKeys: map[int]map[string]bool{}, pdEvents: map[int]int{}, slack: map[int]int{},
		dropped: map[int]bool{}, none: map[int]bool{}, slackDropped: map[int]bool{}, maybeSent: map[int]bool{}}
	keyer, err := h.keyer(pAlerts)
	if err != nil {
		return nil, err
	}
	if err := h.alertDecisions(ae, keyer); err != nil {
		return nil, err
	}
	type pair struct{ firing, resolve *intent }
	byIdentity := map[string]*pair{}
	pdKeyOf := map[int]string{}     // intent → the Idempotency-Key of its PagerDuty event
	intentOfKey := map[string]int{} // and back
	for _, in := range h.w.intents {
		if in.alert == nil {
			continue
		}
		ik, err := keyer.Intent(in.copies[0].data)
		if err != nil {
			return nil, fmt.Errorf("the identity of alerts intent %d: %w", in.id, err)
		}
		k := pdEffectKey(ik.Key, in.alert.status)
		pdKeyOf[in.id], intentOfKey[k] = k, in.id
		p := byIdentity[ik.Key.String()]
		if p == nil {
			p = &pair{}
			byIdentity[ik.Key.String()] = p
		}
		if in.alert.status == statusFiring {
			p.firing = in
		} else {
			p.resolve = in
		}
	}
	// When each intent's first and last message reached its receiver.
	first, last := map[int]time.Time{}, map[int]time.Time{}
	seen := func(id int, at time.Time) {
		if f, ok := first[id]; !ok || at.Before(f) {
			first[id] = at
		}
		if at.After(last[id]) {
			last[id] = at
		}
	}
	for _, e := range h.alerts.pdLog.snapshot() {
		rep.effectsAt = append(rep.effectsAt, timed{e.at, pAlerts})
		p := byIdentity[e.dedup]
		var in *intent
		if p != nil {
			in = map[string]*intent{"trigger": p.firing, "resolve": p.resolve}[e.action]
		}
		if in == nil {
			ae.wrong(&ae.unmatched, "%s with dedup_key %q", e.action, e.dedup)
			continue
		}
		seen(in.id, e.at)
		if e.key != pdKeyOf[in.id] {
			ae.otherKey++
		}
		if in.alert.storm && e.at.After(ae.stormLast) {
			ae.stormLast = e.at
		}
		if !in.alert.toPagerDuty() && !(in.alert.raced && in.alert.status == statusFiring) { // a raced firing paged: counted below
			ae.wrong(&ae.misrouted, "intent %d (%s %s) at PagerDuty", in.id, in.alert.severity, in.alert.status)
		}
		if ae.pdKeys[in.id] == nil {
			ae.pdKeys[in.id] = map[string]bool{}
		}
		ae.pdKeys[in.id][e.key] = true
		ae.pdEvents[in.id]++
	}
	h.alerts.pdLog.mu.Lock()
	droppedFirings := map[int]bool{}
	for id := range ae.dropped {
		if a := h.w.intents[id].alert; a != nil && a.status == statusFiring {
			droppedFirings[id] = true
		}
	}
	ae.dropped429, ae.throttledDropped, ae.throttled = throttledFate(h.alerts.pdLog.throttled, h.alerts.pdLog.accepted, intentOfKey, droppedFirings)
	h.alerts.pdLog.mu.Unlock()
	for _, m := range h.alerts.slackLog.snapshot() {
		rep.effectsAt = append(rep.effectsAt, timed{m.at, pAlerts})
		id := intentOf(m.body)
		if id < 0 || id >= len(h.w.intents) || h.w.intents[id].alert == nil {
			ae.stray++
			continue
		}
		in := h.w.intents[id]
		seen(in.id, m.at)
		var msg struct{ Text string }
		json.Unmarshal(m.body, &msg)
		resolvedNote := strings.HasPrefix(msg.Text, "Resolved: ")
		switch {
		case !in.alert.toSlack():
			ae.wrong(&ae.misrouted, "intent %d (%s %s) at Slack", in.id, in.alert.severity, in.alert.status)
		case resolvedNote != (in.alert.status == statusResolved):
			ae.wrong(&ae.misrouted, "intent %d (%s) at Slack as %q", in.id, in.alert.status, clipText(msg.Text, 60))
		}
		ae.slack[in.id]++
	}
	// No firing after its resolve, at either receiver; and PagerDuty's
	// last state of each alert: open for a page never resolved, closed
	// otherwise.
	for id, p := range byIdentity {
		f, r := p.firing, p.resolve
		if f != nil && r != nil {
			if fl, ok := last[f.id]; ok {
				if rf, ok := first[r.id]; ok && fl.After(rf) {
					ae.wrong(&ae.afterResolve, "intent %d (%s, key %s) reached its receiver %v after its resolve (intent %d, key %s) did", f.id, f.alert.severity, h.intentKeys([]int{f.id}), fl.Sub(rf).Round(time.Millisecond), r.id, h.intentKeys([]int{r.id}))
				}
			}
		}
		if f == nil || f.alert.severity != severityCritical {
			continue
		}
		open := f.alert.resolve == nil && !f.alert.raced
		if got := h.alerts.pd.IsOpen(id); got != open {
			ae.wrong(&ae.wrongState, "alert %s (firing intent %d): PagerDuty has it open %v; want %v", f.alert.fingerprint, f.id, got, open)
		}
	}
	return ae, nil
}

// pdEffectKey is the Idempotency-Key of the PagerDuty event of the
// alerts intent of identity in status, as the consumer derives it: the
// effect "pagerduty" of the intent's key (consumer.StatusKey).
func pdEffectKey(identity dedupe.Key, status string) string {
	return consumer.EffectKey(consumer.StatusKey(identity, status), "pagerduty").String()
}

// throttledFate sorts the Idempotency-Keys PagerDuty answered 429 (with
// how many times) that no accepted event carried after: a firing the
// consumer dropped (droppedFirings: by the ledger, a firing committed as
// dropped) because its resolve went out first
// (the forced race's firing, whose page PagerDuty refuses until its
// resolve, or one behind its resolve past resolve_wait) was not lost to
// the 429 but left out by the lifecycle, which its own checks count (a
// page sent all the same is sentAfterDrop, a firing after its resolve
// afterResolve); every other key is an event the 429 dropped: lost,
// named with its intent, or with none if it is no alerts intent's. It
// also returns the 429s answered.
func throttledFate(throttled map[string]int, accepted []received, intentOfKey map[string]int, droppedFirings map[int]bool) (lost []string, lifecycle []int, n int) {
	got := map[string]bool{}
	for _, e := range accepted {
		got[e.key] = true
	}
	for key, c := range throttled {
		n += c
		if got[key] {
			continue
		}
		id, ok := intentOfKey[key]
		switch {
		case ok && droppedFirings[id]:
			lifecycle = append(lifecycle, id)
		case ok:
			lost = append(lost, fmt.Sprintf("intent %d (key %s, %d 429s)", id, key, c))
		default:
			lost = append(lost, fmt.Sprintf("no alerts intent (key %s, %d 429s)", key, c))
		}
	}
	slices.Sort(lost)
	slices.Sort(lifecycle)
	return lost, lifecycle, n
}

// alertsReport is what the checker reports of the alerts pipeline.
type alertsReport struct {
	firings, resolves, firstResolved int
	toPD, toSlack                    int // intents routed there
	pdEffects, slackEffects          int // their effects (PagerDuty: distinct effect keys)
	pdEvents, pdSentAgain            int
	resolvesToPD, resolvesMatched    int // resolves routed to PagerDuty, and those whose event carried the firing's dedup_key
	resolvePaid                      []int
	unknownSent                      int
	openExpected                     int // critical firings never resolved
	pd                               receiver.PagerDutyStats
	slackRefused                     map[string]int
	routes                           map[string]int
	unmatched, misrouted             []string
	stray                            int

	raced, racedDropped int      // raced firings, and those the consumer dropped (never paged)
	droppedDelayed      int      // other firings dropped: behind their resolve past resolve_wait (a backlog)
	droppedAstray       []int    // firings dropped that have no resolve
	sentAfterDrop       []int    // firings dropped whose page went out all the same
	maybeSent           int      // firings dropped whose record says an earlier try may have sent some of them
	dropped429          []string // events refused with a 429 and never accepted after, the lifecycle's drops aside
	throttledDropped    []int    // firings refused with a 429, then dropped by the lifecycle (their resolve went out first)
	throttled           int      // 429s answered
	otherKey            int      // PagerDuty events accepted under another key than their intent's effect key
	stormQuotaN         int
	stormPer            time.Duration
	afterResolve        []string
	wrongState          []string
	storm               int           // storm alerts
	stormPaged          int           // of them, paged once
	stormDrain          time.Duration // from the storm's first trigger to its last page
	stormQuota          string        // PagerDuty's quota in the run
}

// classifyAlert classifies one alerts intent by the receivers its route
// names: committed when each got exactly one effect (PagerDuty: one
// effect key, however often it was sent: PagerDuty collapses by
// dedup_key; Slack, one-shot: one message), duplicated when one got more,
// unknown when the one-shot Slack message's dispatch was cut short
// (unknown_outcome; sent at most once), dead-lettered or lost otherwise.
func (h *harness) classifyAlert(rep *report, r *row, in *intent, dead []deadLetter, ae *alertEffects) {
	ar, a := rep.alerts, in.alert
	ar.routes[a.routeName()]++
	switch {
	case a.storm:
		ar.storm++
		ar.firings++
		ar.openExpected++
		if len(ae.pdKeys[in.id]) == 1 {
			ar.stormPaged++
		}
	case a.status == statusFiring:
		ar.firings++
		if a.resolve == nil && a.toPagerDuty() {
			ar.openExpected++
		}
		if a.raced {
			ar.raced++
			if ae.dropped[in.id] && len(ae.pdKeys[in.id]) == 0 {
				ar.racedDropped++
			}
		}
		if ae.dropped[in.id] && a.resolve == nil {
			ar.openExpected-- // counted above; nothing was paged
		}
	case a.firing != nil:
		ar.resolves++
	default:
		ar.firstResolved++
	}
	if a.status == statusResolved {
		h.proxy.mu.Lock()
		paid := h.proxy.calls[in.id] > 0
		h.proxy.mu.Unlock()
		if paid {
			ar.resolvePaid = append(ar.resolvePaid, in.id)
		}
	}
	var reasons []string
	unknown := false
	for _, d := range dead {
		reasons = append(reasons, d.reason)
		unknown = unknown || d.reason == string(outcome.ReasonUnknownOutcome)
	}
	pd, slack := len(ae.pdKeys[in.id]), ae.slack[in.id]
	dup, missing, pdOK := false, false, true
	if a.status == statusFiring && ae.dropped[in.id] {
		if a.resolve == nil {
			ar.droppedAstray = append(ar.droppedAstray, in.id) // dropped, with no resolve to go first
		} else if !a.raced {
			ar.droppedDelayed++
		}
	}
	if ae.dropped[in.id] || ae.none[in.id] || ae.slackDropped[in.id] && a.toSlack() {
		// The consumer decided to send nothing to keep the lifecycle in
		// order: a firing whose resolve went first (the forced race, or a
		// firing behind its resolve past resolve_wait), a resolve whose
		// firing left no route, a message whose firing's was not sent.
		// Anything sent all the same is counted against it.
		if ae.maybeSent[in.id] {
			ar.maybeSent++
		}
		if ae.dropped[in.id] && !ae.maybeSent[in.id] && pd > 0 {
			ar.sentAfterDrop = append(ar.sentAfterDrop, in.id)
		}
		if slack > 0 && (ae.dropped[in.id] || ae.slackDropped[in.id] || ae.none[in.id]) {
			r.add(cDuplicated, in.id)
		} else {
			r.add(cCommitted, in.id)
		}
		return
	}
	if !a.toPagerDuty() && !a.toSlack() {
		// A raced firing (dropped after its resolve) or an alert first
		// seen resolved: nothing is sent. A raced firing paged all the
		// same is a firing after its resolve, reported as such.
		if slack > 0 || pd > 0 && !a.raced {
			r.add(cDuplicated, in.id)
		} else {
			r.add(cCommitted, in.id)
		}
		return
	}
	if a.toPagerDuty() {
		ar.toPD++
		ar.pdEffects += pd
		dup, missing, pdOK = pd > 1, pd == 0, pd == 1
		if a.status == statusResolved {
			ar.resolvesToPD++
			if pd > 0 {
				ar.resolvesMatched++
			}
		}
	}
	if a.toSlack() {
		ar.toSlack++
		ar.slackEffects += slack
		dup, missing = dup || slack > 1, missing || slack == 0
	}
	switch {
	case dup:
		r.add(cDuplicated, in.id)
	case unknown && pdOK:
		r.add(cUnknown, in.id)
		if slack == 1 {
			ar.unknownSent++
		}
	case !missing:
		r.add(cCommitted, in.id)
		if len(reasons) > 0 {
			r.alsoDead++
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

func (ar *alertsReport) ok() bool {
	return ar == nil || len(ar.resolvePaid) == 0 && len(ar.unmatched) == 0 && len(ar.misrouted) == 0 && ar.stray == 0 &&
		ar.resolvesMatched == ar.resolvesToPD && ar.pd.Refused == 0 && len(ar.slackRefused) == 0 &&
		len(ar.afterResolve) == 0 && ar.pd.AfterResolve == 0 && len(ar.dropped429) == 0 && len(ar.wrongState) == 0 &&
		ar.racedDropped == ar.raced && ar.stormPaged == ar.storm && len(ar.droppedAstray) == 0 && len(ar.sentAfterDrop) == 0
}

// firingsAfterResolve counts the firings that reached a receiver after
// their resolve: by the receivers' logs, and PagerDuty's own count.
func (ar *alertsReport) firingsAfterResolve() int {
	if ar == nil {
		return 0
	}
	return max(len(ar.afterResolve), ar.pd.AfterResolve)
}

// droppedBy429 counts the events PagerDuty refused with a 429 (past its
// quota) that never got through after.
func (ar *alertsReport) droppedBy429() int {
	if ar == nil {
		return 0
	}
	return len(ar.dropped429)
}

// sentAfterDropIDs are the firings dropped whose page went out all the
// same (none if the run had no alerts).
func (ar *alertsReport) sentAfterDropIDs() []int {
	if ar == nil {
		return nil
	}
	return ar.sentAfterDrop
}

func (ar *alertsReport) print(w io.Writer) {
	fmt.Fprintf(w, "alerts\t%d firings, %d resolves of them, %d alerts first seen resolved; routes taken: %s\n",
		ar.firings, ar.resolves, ar.firstResolved, formatCounts(ar.routes))
	fmt.Fprintf(w, "\tPagerDuty: %d intents routed there, %d effects (distinct effect keys; %d events accepted, %d of them sent again under a key PagerDuty had, collapsed by dedup_key); "+
		"alerts opened %d, resolved by their firing's dedup_key %d, resolves of alerts never opened dropped %d, open %d (want %d: critical firings never resolved, the storm's included; alerts in another state %d %v); refused %d; "+
		"429s (past the quota, %s: after a replica restarts, its limiter does not know what its previous life sent) %d, events dropped by them (never accepted after) %d %v, "+
		"firings refused with a 429 then dropped by the lifecycle (their resolve went out first: not lost to the 429) %d %v; events accepted under another key than their intent's effect key %d\n",
		ar.toPD, ar.pdEffects, ar.pdEvents, ar.pdSentAgain, ar.pd.Opened, ar.pd.Resolved, ar.pd.Dropped, ar.pd.Open, ar.openExpected, len(ar.wrongState), ar.wrongState[:min(4, len(ar.wrongState))], ar.pd.Refused,
		ar.stormQuota, ar.throttled, len(ar.dropped429), ar.dropped429[:min(4, len(ar.dropped429))], len(ar.throttledDropped), ar.throttledDropped[:min(8, len(ar.throttledDropped))], ar.otherKey)
	fmt.Fprintf(w, "\tlifecycle: %d raced firings (PagerDuty refused the page until it had the resolve), %d dropped after their resolve, never paged; %d other firings dropped behind their resolve (a backlog past resolve_wait); dropped with no resolve %v, dropped yet paged %v (dropped with an earlier try's sending unknown, allowed a page before the resolve: %d); firings that reached a receiver after their resolve %d (PagerDuty counts %d) %v\n",
		ar.raced, ar.racedDropped, ar.droppedDelayed, ar.droppedAstray, ar.sentAfterDrop, ar.maybeSent, len(ar.afterResolve), ar.pd.AfterResolve, ar.afterResolve[:min(4, len(ar.afterResolve))])
	if ar.storm > 0 {
		fmt.Fprintf(w, "\tstorm: %d critical alerts to one routing key within a (scaled) minute; %d paged once; drained %v after its first trigger (the quota, %s, allows %v at best)\n",
			ar.storm, ar.stormPaged, ar.stormDrain.Round(10*time.Millisecond), ar.stormQuota, ar.stormBest())
	}
	fmt.Fprintf(w, "\tSlack: %d intents routed there, %d messages (one-shot, through the outbox; %d sent of unknown outcome); refused %v\n",
		ar.toSlack, ar.slackEffects, ar.unknownSent, ar.slackRefused)
	fmt.Fprintf(w, "\tresolves: %d routed to PagerDuty, %d of them matched to their firing's dedup_key; model calls for a resolve %d %v; "+
		"PagerDuty events naming no alert %d %v; messages at a receiver the route does not name %d %v; Slack messages naming no intent %d\n",
		ar.resolvesToPD, ar.resolvesMatched, len(ar.resolvePaid), ar.resolvePaid[:min(8, len(ar.resolvePaid))],
		len(ar.unmatched), ar.unmatched[:min(4, len(ar.unmatched))], len(ar.misrouted), ar.misrouted[:min(4, len(ar.misrouted))], ar.stray)
}

// matched says how many resolves routed to PagerDuty reached it with
// their firing's dedup_key.
func (ar *alertsReport) matched() string {
	return fmt.Sprintf("%d/%d", ar.resolvesMatched, ar.resolvesToPD)
}

// stormBest is the least time the quota lets the storm's pages take: a
// quota's worth per window, the first at once.
func (ar *alertsReport) stormBest() time.Duration {
	if ar.stormQuotaN <= 0 || ar.storm == 0 {
		return 0
	}
	return time.Duration((ar.storm-1)/ar.stormQuotaN) * ar.stormPer
}

// alertDecisions reads, from the ledger, what the consumer decided for
// each alerts intent beyond its route: a firing dropped after its resolve,
// a resolve with no route to take, a Slack message not sent.
func (h *harness) alertDecisions(ae *alertEffects, keyer *dedupe.Keyer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := jskvstore.New(ctx, h.js, jskvstore.Options{})
	if err != nil {
		return fmt.Errorf("the ledger: %w", err)
	}
	defer l.Close()
	said := func(k dedupe.Key) string {
		rec, err := l.Get(ctx, k)
		if err != nil || rec.State != ledger.StateCommitted {
			return ""
		}
		return rec.Result.DownstreamID
	}
	const dropped, none = `{"dropped":"its resolve went out first"}`, `{"route":null}`
	const maybeSent = `{"dropped":"its resolve went out first","sent":"unknown: an earlier try may have sent some of it"}`
	for _, in := range h.w.intents {
		a := in.alert
		if a == nil || a.storm {
			continue
		}
		ik, err := keyer.Intent(in.copies[0].data)
		if err != nil {
			return fmt.Errorf("the identity of alerts intent %d: %w", in.id, err)
		}
		k := consumer.StatusKey(ik.Key, a.status)
		switch said(k) {
		case dropped:
			ae.dropped[in.id] = true
		case maybeSent:
			ae.dropped[in.id], ae.maybeSent[in.id] = true, true
		case none:
			ae.none[in.id] = true
		}
		if a.severity != severityCritical && said(consumer.DispatchKey(consumer.EffectKey(k, "slack"))) == dropped {
			ae.slackDropped[in.id] = true
		}
	}
	return nil
}
