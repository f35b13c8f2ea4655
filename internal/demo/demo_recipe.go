package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/examples/recipes"
	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/receiver"
)

// The demo's last mile: the Alertmanager recipe (examples/recipes/
// alertmanager.yaml) as pipeline "oncall" on triggers.oncall, with its
// PagerDuty and Slack served in this process by receivers that check each
// request against the provider's documented schema.

const (
	demoRoutingKey = "Rdemo0123456789abcdef0123456789a"
	demoSlackPath  = "/services/TDEMO/BDEMO/demo0webhook0s3cret0path"
	demoRecipeName = "oncall"
)

// demoReceivers are the recipe's PagerDuty and Slack.
type demoReceivers struct {
	pd    *receiver.PagerDuty
	slack *receiver.Slack
	srv   []*httptest.Server
}

func (r *demoReceivers) Close() {
	for _, s := range r.srv {
		s.Close()
	}
}

// demoRecipe adds the recipe's pipeline to cfg, pointed at in-process
// receivers; the secrets it reads from the environment are set in this
// process's.
func demoRecipe(cfg *config.Config) (*demoReceivers, error) {
	r := &demoReceivers{pd: receiver.NewPagerDuty(demoRoutingKey), slack: receiver.NewSlack(demoSlackPath)}
	pdSrv, slackSrv := httptest.NewServer(r.pd), httptest.NewServer(r.slack)
	r.srv = []*httptest.Server{pdSrv, slackSrv}
	data, err := recipes.FS.ReadFile("alertmanager.yaml")
	if err != nil {
		return nil, err
	}
	rc, err := config.ParseEnv(data, "examples/recipes/alertmanager.yaml", nil)
	if err != nil {
		return nil, fmt.Errorf("demo: the recipe: %w", err)
	}
	p := rc.Pipelines[0]
	p.Name, p.Subject = demoRecipeName, "triggers."+demoRecipeName
	// The demo's alerts first seen resolved wait this long for a firing
	// that will not come, rather than the recipe's minute.
	p.Key.ResolveWait = 2 * time.Second
	pd := p.Effects["pagerduty"]
	pd.URL, pd.RoutingKeyEnv = pdSrv.URL+"/v2/enqueue", "DEMO_PAGERDUTY_ROUTING_KEY"
	p.Effects["pagerduty"] = pd
	slack := p.Effects["slack"]
	slack.URLEnv = "DEMO_SLACK_WEBHOOK_URL"
	p.Effects["slack"] = slack
	os.Setenv("DEMO_PAGERDUTY_ROUTING_KEY", demoRoutingKey)
	os.Setenv("DEMO_SLACK_WEBHOOK_URL", slackSrv.URL+demoSlackPath)
	cfg.Pipelines = append(cfg.Pipelines, p)
	return r, nil
}

// recipeWorkload is what the demo sent the recipe, and what it knows.
type recipeWorkload struct {
	firing, info, resolving, firstResolved int
	published, infoSent                    int
	resolved                               []string // the fingerprints of the alerts resolved after firing
}

// amTrigger is one alert as the ingress publishes it from a notification.
func amTrigger(fp, severity, status string, delivery int) []byte {
	b, _ := json.Marshal(map[string]any{
		"receiver": "oncegate", "status": status, "delivery": delivery,
		"alert": map[string]any{
			"status": status, "fingerprint": fp, "occurrence": "2026-11-29T07:09:03Z",
			"labels":      map[string]string{"alertname": "DiskAlmostFull", "instance": "db-" + fp, "severity": severity},
			"annotations": map[string]string{"summary": "Disk 93% full on db-" + fp, "runbook": "https://runbooks.example/disk"},
			"startsAt":    "2026-11-29T07:09:03Z", "generatorURL": "http://prometheus.example/graph",
		},
	})
	return b
}

// driveRecipe publishes firings (a quarter of them info alerts, each
// firing sent 1 to 3 times, as Alertmanager repeats a notification), waits
// for them to settle, then the resolves of most of them and of a few
// alerts never seen firing, and waits again.
func driveRecipe(ctx context.Context, a *app.App, js jetstream.JetStream, rng *rand.Rand, n int, timeout time.Duration) (recipeWorkload, error) {
	var w recipeWorkload
	subj := "triggers." + demoRecipeName
	pub := func(b []byte) error {
		w.published++
		_, err := js.Publish(ctx, subj, b)
		return err
	}
	var resolve []string
	for i := range n {
		fp := fmt.Sprintf("am%03d", i)
		sev := "page"
		if i%4 == 3 {
			sev, w.info = "info", w.info+1
		} else {
			w.firing++
			if rng.IntN(10) < 7 {
				resolve = append(resolve, fp)
			}
		}
		for d := range 1 + rng.IntN(3) {
			if sev == "info" {
				w.infoSent++
			}
			if err := pub(amTrigger(fp, sev, "firing", d)); err != nil {
				return w, err
			}
		}
	}
	if err := settle(ctx, a, timeout); err != nil {
		return w, err
	}
	w.resolved = resolve
	for _, fp := range resolve {
		w.resolving++
		for d := range 1 + rng.IntN(2) {
			if err := pub(amTrigger(fp, "page", "resolved", 10+d)); err != nil {
				return w, err
			}
		}
	}
	for i := range 3 {
		w.firstResolved++
		if err := pub(amTrigger(fmt.Sprintf("gone%d", i), "page", "resolved", 0)); err != nil {
			return w, err
		}
	}
	return w, settle(ctx, a, timeout)
}

// settle waits until no pipeline has a trigger unsettled.
func settle(ctx context.Context, a *app.App, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		left, err := a.Outstanding(ctx)
		if err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: %d triggers still unsettled after %v", left, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// recipeReport prints what reached PagerDuty and Slack against what the
// recipe's routes sent there, and returns an error on any mismatch: each
// firing at the receiver its route names, each resolve where its firing
// went (a PagerDuty resolve with the firing's dedup_key, or a Slack note),
// nothing for an alert first seen resolved, no page after its resolve.
func recipeReport(out io.Writer, a *app.App, r *demoReceivers, w recipeWorkload) error {
	// The dispatcher sends one-shot Slack messages from the outbox: wait
	// for the last of them.
	deadline := time.Now().Add(10 * time.Second)
	var pdTrig, pdRes, slackFiring, slackNotes map[string]bool
	paged := map[string]string{} // fingerprint → its page's dedup_key
	for {
		pdTrig, pdRes, slackFiring, slackNotes = map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, e := range r.pd.Events() {
			if e.Action == "trigger" {
				pdTrig[e.IdempotencyKey] = true
				paged[strings.TrimPrefix(e.Source, "db-")] = e.DedupKey
			} else {
				pdRes[e.DedupKey] = true
			}
		}
		for _, m := range r.slack.Messages() {
			if strings.Contains(m.Text, "Resolved:") {
				slackNotes[m.Text] = true
			} else {
				slackFiring[m.IdempotencyKey] = true
			}
		}
		if len(pdTrig)+len(slackFiring) >= w.firing && len(pdRes)+len(slackNotes) >= w.resolving || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Each resolve where its firing went, and nowhere else.
	toPD, toSlack, astray := 0, 0, 0
	for _, fp := range w.resolved {
		note := false
		for text := range slackNotes {
			note = note || strings.Contains(text, "db-"+fp+" ") || strings.HasSuffix(text, "db-"+fp)
		}
		if dk, ok := paged[fp]; ok {
			toPD++
			if !pdRes[dk] || note {
				astray++
			}
		} else {
			toSlack++
			if !note {
				astray++
			}
		}
	}
	var s struct{ filtered, skipped, dead, effects int64 }
	for _, st := range a.Consumer.Stats() {
		if st.Pipeline == demoRecipeName {
			s.filtered, s.skipped, s.dead, s.effects = st.Filtered, st.StepsSkipped, st.DeadLetters, st.Effects
		}
	}
	var answers int64
	for _, st := range llmhook.Stats(a.Cache) {
		if st.Namespace == demoRecipeName {
			answers += paid(st)
		}
	}
	pd := r.pd.Stats()
	check := func(ok bool) string {
		if ok {
			return "OK"
		}
		return "MISMATCH"
	}
	want := w.resolving + w.firstResolved
	firingOK := len(pdTrig)+len(slackFiring) == w.firing && pd.Opened == len(pdTrig)
	// The demo's PagerDuty sink loses some responses after sending
	// (flakySink), so an event may be sent again under its intent's
	// Idempotency-Key: PagerDuty merges a second trigger into the open
	// alert and drops a second resolve. A resolve dropped for any other
	// reason (one of an alert never paged) is a mismatch.
	triggered, resolvedOnce, replays, stray := map[string]bool{}, map[string]bool{}, 0, 0
	for _, e := range r.pd.Events() {
		switch {
		case e.Action == "trigger":
			if triggered[e.DedupKey] {
				replays++
			}
			triggered[e.DedupKey] = true
		case resolvedOnce[e.DedupKey]:
			replays++
		case !triggered[e.DedupKey]:
			stray++
		default:
			resolvedOnce[e.DedupKey] = true
		}
	}
	resolvesOK := astray == 0 && stray == 0 && len(pdRes) == toPD && len(slackNotes) == toSlack && pd.Open == pd.Opened-pd.Resolved && pd.Dropped <= replays && pd.AfterResolve == 0
	paidOK := answers == int64(w.firing) && s.filtered == int64(w.infoSent) && s.skipped >= int64(want)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\n== the Alertmanager recipe (examples/recipes/alertmanager.yaml), PagerDuty and Slack in this process ==\n")
	fmt.Fprintf(tw, "alert triggers published\t%d\t(%d alerts firing, %d info, each sent 1 to 3 times; then %d resolves sent 1 or 2 times, and %d alerts first seen resolved)\n",
		w.published, w.firing, w.info, w.resolving, w.firstResolved)
	fmt.Fprintf(tw, "filtered (info)\t%d\t(the %d info alerts' triggers; when: severity != info: acked, never claimed, no model call)\n", s.filtered, w.infoSent)
	fmt.Fprintf(tw, "model answers\t%d\t(one per firing: %s; resolves and info alerts: none, %d steps skipped)\n", answers, check(paidOK), s.skipped)
	fmt.Fprintf(tw, "firings routed\t%d\t(triaged critical → PagerDuty: %d, rest → Slack: %d; one message per intent: %s)\n", w.firing, len(pdTrig), len(slackFiring), check(firingOK))
	fmt.Fprintf(tw, "PagerDuty\t%d\tevents accepted (%d triggers, %d resolves; alerts opened %d, resolved %d by their firing's dedup_key, %d resolves of alerts never opened dropped, %d triggers after their resolve, %d open; refused %d)\n",
		len(r.pd.Events()), pd.Triggers, pd.Resolves, pd.Opened, pd.Resolved, pd.Dropped, pd.AfterResolve, pd.Open, pd.Refused)
	fmt.Fprintf(tw, "  sent again\t%d\t(PagerDuty events sent again after a lost response, under the same Idempotency-Key and dedup_key: merged or dropped by PagerDuty)\n", replays)
	fmt.Fprintf(tw, "Slack\t%d\tmessages accepted (%d for firings, %d resolve notes; refused %v)\n", len(r.slack.Messages()), len(slackFiring), len(slackNotes), r.slack.Refused())
	fmt.Fprintf(tw, "resolves matched\t%d\t(each where its firing went: %d PagerDuty resolves, %d Slack notes; the %d alerts first seen resolved: nothing sent: %s)\n", w.resolving, len(pdRes), len(slackNotes), w.firstResolved, check(resolvesOK))
	tw.Flush()
	if !firingOK || !resolvesOK || !paidOK || s.dead != 0 || pd.Refused != 0 {
		return fmt.Errorf("demo: the recipe: %d PagerDuty triggers and %d Slack messages for %d firings; %d PagerDuty resolves and %d Slack notes for %d resolves (%d paged, %d to Slack; %d astray); %d answers for %d firings, %d filtered of %d info triggers; %d dead letters",
			len(pdTrig), len(slackFiring), w.firing, len(pdRes), len(slackNotes), w.resolving, toPD, toSlack, astray, answers, w.firing, s.filtered, w.infoSent, s.dead)
	}
	return nil
}

var _ http.Handler = (*receiver.Slack)(nil)

// paid counts the answers a step's cache figures say were paid for: the
// calls the cache sent upstream (misses, and the calls of a step that
// keeps its answers in the ledger, which pass the cache's store) that
// did not fail.
func paid(st llmhook.StepStats) int64 { return st.Misses + st.Bypassed - st.Errors }
