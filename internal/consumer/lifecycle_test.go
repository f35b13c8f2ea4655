package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// An alert's lifecycle: its firing and its resolve share an identity
// (fingerprint + startsAt), and the resolve must never be overtaken.

// pageAll edits the recipe so that every firing is paged, whatever the
// model's triage: the races below are between a page and its resolve.
func pageAll(wait time.Duration) func(p *config.Pipeline) {
	return func(p *config.Pipeline) {
		p.Routes = []config.Route{{Name: "page", Effects: []string{"pagerduty"}}}
		p.Key.ResolveWait = wait
	}
}

// TestResolveWaitsForItsFiring: the firing's page fails (PagerDuty
// answers 500 past the sink's own attempts), and the resolve arrives
// while it is being retried: the resolve waits for the firing's page to
// go out, then closes the incident it opened. Sent at once, it would be
// dropped by PagerDuty (no open alert) and the page, retried after it,
// would open an incident nobody resolves.
func TestResolveWaitsForItsFiring(t *testing.T) {
	slowTest(t)
	r := startRecipe(t, standin.Options{}, pageAll(time.Minute))
	r.pd.Fail(8, 500, 0) // more than one delivery's attempts
	r.publish("triggers.alerts", amAlert("w1", "page", "firing", 0))
	waitFor(t, 10*time.Second, "the page failing", func() bool { return r.pd.Faulted() > 0 }, r.fixture)
	r.publish("triggers.alerts", amAlert("w1", "page", "resolved", 1))
	waitFor(t, 30*time.Second, "the firing and its resolve settled", func() bool {
		s := r.stats("alerts")
		return s.Effects == 2 && r.allAcked("alerts")
	}, r.fixture)
	st := r.pd.Stats()
	var actions []string
	for _, e := range r.pd.Events() {
		actions = append(actions, e.Action)
	}
	if strings.Join(actions, ",") != "trigger,resolve" || st.Resolved != 1 || st.Open != 0 || st.Dropped != 0 || st.AfterResolve != 0 {
		t.Errorf("PagerDuty got %v, %+v; want the trigger, then its resolve closing it (none open, none dropped, no trigger after a resolve)", actions, st)
	}
}

// TestFiringAfterItsResolveIsDropped forces the race: PagerDuty refuses
// the firing's page until it has the resolve. The resolve waits for the
// firing's outcome up to key.resolve_wait, then goes; the firing, retried
// after it, finds its resolve gone out and is dropped and counted — never
// sent, so no incident re-opens after its resolve.
func TestFiringAfterItsResolveIsDropped(t *testing.T) {
	slowTest(t)
	r := startRecipe(t, standin.Options{}, pageAll(time.Second))
	r.pd.HoldTriggers(r.identity(t, "race1"))
	r.publish("triggers.alerts", amAlert("race1", "page", "firing", 0))
	waitFor(t, 10*time.Second, "the page held", func() bool { return r.pd.Faulted() > 0 }, r.fixture)
	r.publish("triggers.alerts", amAlert("race1", "page", "resolved", 1))
	waitFor(t, 30*time.Second, "the firing and its resolve settled", func() bool {
		return r.stats("alerts").Effects == 2 && r.allAcked("alerts")
	}, r.fixture)
	st := r.pd.Stats()
	if st.Triggers != 0 || st.AfterResolve != 0 || st.Open != 0 || st.Resolves != 1 {
		t.Errorf("PagerDuty %+v; want no trigger accepted (none after its resolve), nothing open, the one resolve", st)
	}
	if s := r.stats("alerts"); s.AfterResolve != 1 || s.DeadLetters != 0 {
		t.Errorf("stats %+v; want the firing counted as dropped after its resolve, no dead letter", s)
	}
}

// TestFiringTakenOverAfterItsResolve: the firing's first holder stopped
// without a word (its claim left pending, its lease run out: it may have
// paged), and the resolve went out meanwhile. The firing's next try takes
// the claim over, finds the resolve recorded and sends nothing; its record
// says it was dropped and that what an earlier try sent is unknown — not
// that it never was sent, which a takeover cannot know. A firing that
// comes after its resolve, never tried before, is recorded not sent.
func TestFiringTakenOverAfterItsResolve(t *testing.T) {
	slowTest(t)
	ctx := context.Background()
	r := startRecipe(t, standin.Options{}, pageAll(time.Second))
	stopped, err := dedupe.ParseKey(r.identity(t, "stopped1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ledger.Begin(ctx, consumer.StatusKey(stopped, "firing"), ledger.BeginOptions{Owner: "a-holder-that-stopped:1", Lease: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	r.publish("triggers.alerts", amAlert("late1", "page", "resolved", 1))
	r.publish("triggers.alerts", amAlert("stopped1", "page", "resolved", 1))
	waitFor(t, 30*time.Second, "the resolves settled", func() bool {
		return r.stats("alerts").Effects == 2 && r.allAcked("alerts")
	}, r.fixture)
	r.publish("triggers.alerts", amAlert("late1", "page", "firing", 0))
	r.publish("triggers.alerts", amAlert("stopped1", "page", "firing", 0))
	waitFor(t, 30*time.Second, "the firings settled", func() bool {
		return r.stats("alerts").Effects == 4 && r.allAcked("alerts")
	}, r.fixture)
	said := func(fp string) string {
		id, err := dedupe.ParseKey(r.identity(t, fp))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := r.ledger.Get(ctx, consumer.StatusKey(id, "firing"))
		if err != nil || rec.State != ledger.StateCommitted {
			t.Fatalf("the record of firing %s: %+v, %v; want it committed", fp, rec, err)
		}
		return rec.Result.DownstreamID
	}
	if got := said("late1"); got != `{"dropped":"its resolve went out first"}` {
		t.Errorf("the firing that came after its resolve recorded %s; want dropped, not sent", got)
	}
	if got := said("stopped1"); !strings.Contains(got, `"dropped"`) || !strings.Contains(got, `"sent":"unknown`) {
		t.Errorf("the firing taken over from a holder that stopped recorded %s; want dropped, sent unknown", got)
	}
	if st := r.pd.Stats(); st.Triggers != 0 || st.AfterResolve != 0 {
		t.Errorf("PagerDuty %+v; want no trigger accepted", st)
	}
	if s := r.stats("alerts"); s.AfterResolve != 2 {
		t.Errorf("stats %+v; want both firings counted as dropped after their resolve", s)
	}
}

// TestResolveGoesWhereItsFiringWent: the model's triage sends each firing
// to PagerDuty or to Slack; its resolve goes to the same receiver, read
// from the firing's recorded route, and nowhere else. A resolve whose
// alert never fired here (its firing left no route) sends nothing.
func TestResolveGoesWhereItsFiringWent(t *testing.T) {
	slowTest(t)
	r := startRecipe(t, standin.Options{}, func(p *config.Pipeline) { p.Key.ResolveWait = time.Second })
	const n = 12
	for i := range n {
		r.publish("triggers.alerts", amAlert(fmt.Sprintf("rt%02d", i), "page", "firing", 0))
	}
	waitFor(t, 20*time.Second, "the firings out", func() bool {
		return r.stats("alerts").Effects == n && len(r.pd.Events())+len(r.slack.Messages()) == n
	}, r.fixture)
	paged := map[string]bool{}
	for _, e := range r.pd.Events() {
		paged[e.DedupKey] = true
	}
	if len(paged) == 0 || len(paged) == n {
		t.Fatalf("the stand-in found %d of %d firings critical; the test needs both routes", len(paged), n)
	}
	for i := range n {
		r.publish("triggers.alerts", amAlert(fmt.Sprintf("rt%02d", i), "page", "resolved", 1))
	}
	r.publish("triggers.alerts", amAlert("never-fired", "page", "resolved", 0))
	waitFor(t, 20*time.Second, "the resolves settled", func() bool {
		return r.stats("alerts").Effects == 2*n+1 && r.allAcked("alerts") && r.outboxDone("alerts")
	}, r.fixture)
	notes := map[string]int{}
	for _, m := range r.slack.Messages() {
		if strings.Contains(m.Text, "Resolved:") {
			for i := range n {
				if fp := fmt.Sprintf("rt%02d", i); strings.Contains(m.Text, "db-"+fp) {
					notes[fp]++
				}
			}
			if strings.Contains(m.Text, "never-fired") {
				notes["never-fired"]++
			}
		}
	}
	pdResolves := map[string]int{}
	for _, e := range r.pd.Events() {
		if e.Action == "resolve" {
			pdResolves[e.DedupKey]++
		}
	}
	for i := range n {
		fp := fmt.Sprintf("rt%02d", i)
		id := r.identity(t, fp)
		wantPD, wantSlack := 0, 0
		if paged[id] {
			wantPD = 1
		} else {
			wantSlack = 1
		}
		if pdResolves[id] != wantPD || notes[fp] != wantSlack {
			t.Errorf("alert %s (paged %v): %d PagerDuty resolves, %d Slack resolve notes; want %d, %d", fp, paged[id], pdResolves[id], notes[fp], wantPD, wantSlack)
		}
	}
	if id := r.identity(t, "never-fired"); pdResolves[id]+notes["never-fired"] != 0 {
		t.Errorf("an alert first seen resolved: %d PagerDuty resolves, %d Slack notes; want none (its firing went nowhere)", pdResolves[id], notes["never-fired"])
	}
	if st := r.pd.Stats(); st.Dropped != 0 || st.Open != 0 {
		t.Errorf("PagerDuty %+v; want every incident closed, no resolve of an alert never paged", st)
	}
}

// TestTriageSetsPageSeverity: the recipe pages the alerts the model
// triages critical, and the page says so, whatever the alert's own
// severity label (here "warning").
func TestTriageSetsPageSeverity(t *testing.T) {
	r := startRecipe(t, standin.Options{}, nil)
	const n = 8
	for i := range n {
		r.publish("triggers.alerts", amAlert(fmt.Sprintf("sv%02d", i), "warning", "firing", 0))
	}
	waitFor(t, 20*time.Second, "the firings out", func() bool {
		return r.stats("alerts").Effects == n && len(r.pd.Events())+len(r.slack.Messages()) == n
	}, r.fixture)
	events := r.pd.Events()
	if len(events) == 0 {
		t.Fatal("no alert was triaged critical; the test needs one")
	}
	for _, e := range events {
		if e.Severity != "critical" {
			t.Errorf("page %s severity %q; want critical, the triage's (the route pages what the model found critical)", e.DedupKey, e.Severity)
		}
	}
}

// outboxDone reports whether the pipeline's dispatcher has sent or
// settled every entry of its outbox.
func (f *fixture) outboxDone(pipeline string) bool {
	cons, err := f.js.Consumer(context.Background(), consumer.OutboxStream("ONCEGATE"), consumer.Durable(pipeline)+"-dispatch")
	if err != nil {
		return false
	}
	ci, err := cons.Info(context.Background())
	return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0
}

// TestPagesFastAfterOutage: PagerDuty answers 500 to more requests than
// one delivery of a page makes (an outage), and the pipeline's ack wait
// and redelivery backoff are 30s (what paces work whose process stopped):
// the pages go out soon after PagerDuty is back, on the effect's own
// retry schedule (effect.retry), not a backoff later. The time from the
// end of the outage to the last page is reported.
func TestPagesFastAfterOutage(t *testing.T) {
	slowTest(t)
	const slow = 30 * time.Second
	r := startRecipe(t, standin.Options{}, func(p *config.Pipeline) {
		pageAll(time.Minute)(p)
		p.AckWait, p.Backoff = slow, []time.Duration{slow}
		// A quota wide enough not to space the outage's retries: this
		// test is about the retry schedule.
		e := p.Effects["pagerduty"]
		e.RateLimit = config.EffectRateLimit{Requests: 50, Per: time.Second}
		p.Effects["pagerduty"] = e
	})
	const n, attempts = 4, 5 // the sink's attempts per delivery
	r.pd.Fail(n*attempts+1, 500, 0)
	for i := range n {
		r.publish("triggers.alerts", amAlert(fmt.Sprintf("out%d", i), "page", "firing", 0))
	}
	var back time.Time
	waitFor(t, slow/2, "PagerDuty back", func() bool {
		back = time.Now()
		return r.pd.Faulted() == n*attempts+1
	}, r.fixture)
	// Well within the backoff: a page retried only after it would not
	// make it.
	waitFor(t, slow/2, "the pages after the outage", func() bool {
		return r.pd.Stats().Triggers == n
	}, r.fixture)
	var last time.Time
	for _, e := range r.pd.Events() {
		last = e.At
	}
	t.Logf("PagerDuty answered %d requests 500; the last of %d pages arrived %v after it was back (ack_wait and backoff %v)",
		r.pd.Faulted(), n, last.Sub(back).Round(10*time.Millisecond), slow)
	if s := r.stats("alerts"); s.DeadLetters != 0 {
		t.Errorf("stats %+v; want no dead letter: an outage is retried", s)
	}
}

// TestStormWithinQuota: a storm of alerts to one routing key, with
// PagerDuty's quota (120 events a minute, time scaled 60 times: 120 a
// second) and the preset's rate limit scaled alike: every alert paged
// once, every incident open at the end (the last state of each), and
// none lost to a 429. The limiter spaces its turns by the window and a
// margin (100ms at this scale) for the time between a request's turn and
// its arrival; on a loaded machine a few take longer and reach PagerDuty
// in the next window: they are refused, wait out the Retry-After and go
// again (one run under -race beside other builds: 10 of 300). Without the
// limit 124 of 300 were refused; the test allows a tenth. The time to
// drain is reported.
func TestStormWithinQuota(t *testing.T) {
	slowTest(t)
	const n, quota, per = 300, 120, time.Second
	r := startRecipe(t, standin.Options{}, func(p *config.Pipeline) {
		pageAll(time.Minute)(p)
		e := p.Effects["pagerduty"]
		e.RateLimit = config.EffectRateLimit{Requests: quota, Per: per}
		p.Effects["pagerduty"] = e
		p.Concurrency = 64
	})
	r.pd.Limit(quota, per)
	t0 := time.Now()
	for i := range n {
		r.publish("triggers.alerts", amAlert(fmt.Sprintf("storm%03d", i), "page", "firing", 0))
	}
	waitFor(t, 60*time.Second, "every alert paged", func() bool {
		return r.stats("alerts").Effects == n && r.allAcked("alerts")
	}, r.fixture)
	drain := time.Since(t0)
	st := r.pd.Stats()
	t.Logf("%d alerts to one routing key with a quota of %d per %v: drained in %v (the quota allows %v); %d 429s", n, quota, per, drain.Round(10*time.Millisecond), time.Duration(n/quota)*per, st.Throttled)
	if st.Triggers != n || st.Opened != n || st.Open != n || st.Throttled > n/10 {
		t.Errorf("PagerDuty %+v; want %d triggers, each alert opened once and open, at most %d refused for the quota (and sent again)", st, n, n/10)
	}
	if s := r.stats("alerts"); s.DeadLetters != 0 {
		t.Errorf("stats %+v; want no dead letter", s)
	}
}

// TestSlackDigest: with a digest on the Slack effect, the alerts of one
// group sent within its window go out as one Slack message, one line
// each; each intent is recorded sent. Without it, one message each.
func TestSlackDigest(t *testing.T) {
	r := startRecipe(t, standin.Options{}, func(p *config.Pipeline) {
		p.Routes = []config.Route{{Name: "rest", Effects: []string{"slack"}}}
		e := p.Effects["slack"]
		e.Digest = config.EffectDigest{Window: time.Second, Group: "{{.trigger.alert.labels.alertname}}"}
		p.Effects["slack"] = e
	})
	const n = 6
	for i := range n {
		r.publish("triggers.alerts", amAlert(fmt.Sprintf("dg%02d", i), "page", "firing", 0))
	}
	waitFor(t, 20*time.Second, "the digest out", func() bool {
		return r.stats("alerts").Effects == n && r.allAcked("alerts") && r.outboxDone("alerts")
	}, r.fixture)
	msgs := r.slack.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d Slack messages; want 1, the digest of the %d alerts of one group", len(msgs), n)
	}
	for i := range n {
		if !strings.Contains(msgs[0].Text, fmt.Sprintf("db-dg%02d", i)) {
			t.Errorf("the digest lacks alert dg%02d:\n%s", i, msgs[0].Text)
		}
	}
	if got := strings.Count(msgs[0].Text, "\n") + 1; got != n {
		t.Errorf("the digest has %d lines; want %d, one per alert", got, n)
	}
	if d := r.dispatchStats(); d.Sent != n || d.Unknown != 0 {
		t.Errorf("dispatch stats %+v; want each of the %d entries sent", d, n)
	}
}

// TestResolvingRecordNotLeftPending: a resolve claimed the record that
// says it goes and never committed it (its commit refused by a ledger
// outage, or its process killed between the two writes). The next resolve
// of the identity took "held" for "recorded by another" and went on, and
// the claim was left pending for good (the soak found it). It now waits
// for the claim's lease, takes it over and commits it.
func TestResolvingRecordNotLeftPending(t *testing.T) {
	r := startRecipe(t, standin.Options{}, pageAll(500*time.Millisecond))
	ctx := context.Background()
	identity, err := dedupe.ParseKey(r.identity(t, "left1"))
	if err != nil {
		t.Fatal(err)
	}
	rk := consumer.ResolvingKey(identity)
	if _, err := r.ledger.Begin(ctx, rk, ledger.BeginOptions{Owner: "dead-replica#resolving", Lease: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	r.publish("triggers.alerts", amAlert("left1", "page", "resolved", 0))
	waitFor(t, 20*time.Second, "the resolving record committed", func() bool {
		rec, err := r.ledger.Get(ctx, rk)
		return err == nil && rec.State == ledger.StateCommitted
	}, r.fixture)
	waitFor(t, 10*time.Second, "the resolve settled", func() bool { return r.allAcked("alerts") }, r.fixture)
	if st := r.pd.Stats(); st.Resolves != 0 || st.Triggers != 0 {
		t.Errorf("PagerDuty %+v; want nothing (an alert never paged here)", st)
	}
}

// holdLedger refuses to claim one key while hold is set, as a ledger
// outage would.
type holdLedger struct {
	ledger.Ledger
	key  dedupe.Key
	hold atomic.Bool
}

func (l *holdLedger) Begin(ctx context.Context, k dedupe.Key, o ledger.BeginOptions) (ledger.Claim, error) {
	if k == l.key && l.hold.Load() {
		return ledger.Claim{}, errLedgerDown
	}
	return l.Ledger.Begin(ctx, k, o)
}

// TestSlackFiringAfterItsResolveNotSent: a firing's Slack message waits in
// the outbox (here its dispatch claim refused, as in a ledger outage; in
// the soak also a backlog) while its resolve goes out. The dispatcher
// found the resolve gone and logged the firing's message "not sent" — and
// the effect stage sent it all the same, after its resolve's note (the
// soak saw it 1.2 to 18 s after); the resolve's note, "not sent" because
// its firing's was not, went out too. A dropped entry now goes no further
// than the stage that drops it.
func TestSlackFiringAfterItsResolveNotSent(t *testing.T) {
	hl := &holdLedger{}
	r := startRecipe(t, standin.Options{}, func(p *config.Pipeline) {
		p.Routes = []config.Route{{Name: "rest", Effects: []string{"slack"}}}
		p.Key.ResolveWait = 500 * time.Millisecond
	}, func(o *consumer.Options) {
		hl.Ledger = o.Ledger
		o.Ledger = hl
	})
	identity, err := dedupe.ParseKey(r.identity(t, "late1"))
	if err != nil {
		t.Fatal(err)
	}
	hl.key = consumer.DispatchKey(consumer.EffectKey(identity, "slack"))
	hl.hold.Store(true)
	r.publish("triggers.alerts", amAlert("late1", "warning", "firing", 0))
	waitFor(t, 10*time.Second, "the firing's message in the outbox", func() bool { return r.stats("alerts").Effects == 1 }, r.fixture)
	r.publish("triggers.alerts", amAlert("late1", "warning", "resolved", 1))
	ctx := context.Background()
	waitFor(t, 10*time.Second, "the resolve gone out", func() bool {
		rec, err := hl.Get(ctx, consumer.ResolvingKey(identity))
		return err == nil && rec.State == ledger.StateCommitted
	}, r.fixture)
	hl.hold.Store(false)
	waitFor(t, 20*time.Second, "both settled and the outbox done", func() bool {
		return r.stats("alerts").Effects == 2 && r.allAcked("alerts") && r.outboxDone("alerts")
	}, r.fixture)
	var texts []string
	for _, m := range r.slack.Messages() {
		texts = append(texts, m.Text)
	}
	if len(texts) != 0 {
		t.Errorf("Slack got %q; want nothing: the firing's message was still in the outbox when its resolve went out, so neither is sent", texts)
	}
	if s := r.dispatchStats(); s.AfterResolve != 1 || s.Unopened != 1 || s.Sent != 0 {
		t.Errorf("dispatch stats %+v; want the firing's entry dropped after its resolve, the resolve's note not sent (its firing's was not), nothing sent", s)
	}
}
