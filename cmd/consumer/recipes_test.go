package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/examples/recipes"
	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ingress"
	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/receiver"
)

// The recipes of examples/recipes, each run end to end: webhooks signed as
// the provider signs them, posted to the ingress, through the pipeline, to
// the in-process receivers that check the providers' request schemas.

// recipeApp is a recipe running in this process: embedded NATS, the
// stand-in model, the ingress on a free port.
type recipeApp struct {
	a    *app.App
	base string
	src  map[string]config.Source
}

func startRecipeApp(t *testing.T, file string, environ ...string) *recipeApp {
	t.Helper()
	data, err := recipes.FS.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The recipes name no model: the test asks for the stand-in by name.
	return startConfigApp(t, file, data, append(environ, "ONCEGATE_LLM_STANDIN=true")...)
}

// startConfigApp runs the configuration data (named file), with the
// variables of environ set over it, as startRecipeApp runs a recipe.
func startConfigApp(t *testing.T, file string, data []byte, environ ...string) *recipeApp {
	t.Helper()
	cfg, err := config.ParseEnv(data, file, environ)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	dir := t.TempDir()
	cfg.DataDir = dir
	cfg.NATS.Embedded.Listen = "127.0.0.1:0"
	cfg.NATS.Embedded.StoreDir = filepath.Join(dir, "nats")
	cfg.Metrics.Listen = ""
	cfg.Ingress.Listen = "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.Start(ctx, cfg, app.Options{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		a.Close()
	})
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	if err := a.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	r := &recipeApp{a: a, base: "http://" + a.IngressAddr, src: map[string]config.Source{}}
	for _, s := range cfg.Ingress.Sources {
		r.src[s.Name] = s
	}
	return r
}

// post signs body as the source's provider does and posts it; it must be
// answered 200.
func (r *recipeApp) post(t *testing.T, source, secret, id, event string, body []byte) {
	t.Helper()
	h, err := ingress.Sign(r.src[source], []byte(secret), body, time.Now(), id, event)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, r.base+ingress.PathPrefix+source, bytes.NewReader(body))
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s answered %d: %s", source, resp.StatusCode, answer)
	}
}

func (r *recipeApp) stats(t *testing.T, pipeline string) (filtered, skipped, dead int64, answers int64) {
	for _, s := range r.a.Consumer.Stats() {
		if s.Pipeline == pipeline {
			filtered, skipped, dead = s.Filtered, s.StepsSkipped, s.DeadLetters
		}
	}
	if r.a.Cache == nil { // no model step
		return
	}
	for _, s := range llmhook.Stats(r.a.Cache) {
		if s.Namespace == pipeline {
			answers += s.Misses + s.Bypassed - s.Errors // the answers paid for
		}
	}
	return
}

func (r *recipeApp) settled(t *testing.T) bool {
	n, err := r.a.Outstanding(context.Background())
	return err == nil && n == 0
}

func serve(t *testing.T, h http.Handler) string {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

// TestRecipeAlertmanager posts Alertmanager notifications (groups of
// alerts, each sent twice as Alertmanager repeats them, then the resolves
// with send_resolved) with its bearer token: one PagerDuty trigger or one
// Slack message per firing by its route, each resolve where its firing
// went, no model call for info alerts or resolves, every PagerDuty
// incident closed by its resolve.
func TestRecipeAlertmanager(t *testing.T) {
	const token, routingKey = "am-t0ken", "R0123456789abcdef0123456789abcde"
	pd := receiver.NewPagerDuty(routingKey)
	slack := receiver.NewSlack("/services/T1/B1/recipe0s3cret0path0123")
	pdURL, slackURL := serve(t, pd), serve(t, slack)
	t.Setenv("ALERTMANAGER_WEBHOOK_TOKEN", token)
	t.Setenv("PAGERDUTY_ROUTING_KEY", routingKey)
	t.Setenv("SLACK_WEBHOOK_URL", slackURL+slack.Path)
	r := startRecipeApp(t, "alertmanager.yaml", "ONCEGATE_PIPELINES_ALERTS_EFFECTS_PAGERDUTY_URL="+pdURL+"/v2/enqueue")

	alert := func(i int, status string) map[string]any {
		sev := "page"
		if i%4 == 3 {
			sev = "info"
		}
		return map[string]any{
			"status": status, "fingerprint": fmt.Sprintf("%016x", i+1), "startsAt": "2026-11-29T07:09:03Z",
			"labels":      map[string]string{"alertname": "DiskAlmostFull", "instance": fmt.Sprintf("db-%d:9100", i), "severity": sev},
			"annotations": map[string]string{"summary": fmt.Sprintf("Disk %d is 93%% full", i), "runbook": "https://runbooks.example/disk"},
		}
	}
	group := func(status string, from, to int) []byte {
		var as []any
		for i := from; i < to; i++ {
			as = append(as, alert(i, status))
		}
		b, _ := json.Marshal(map[string]any{"version": "4", "status": status, "receiver": "oncegate", "groupKey": "{}:{alertname=\"DiskAlmostFull\"}",
			"groupLabels": map[string]string{"alertname": "DiskAlmostFull"}, "externalURL": "http://alertmanager.example:9093", "alerts": as})
		return b
	}
	const n = 12 // alerts 3, 7, 11 are info
	for g := 0; g < n; g += 4 {
		for range 2 { // Alertmanager's repeat_interval sends the group again
			r.post(t, "alertmanager", token, "", "", group("firing", g, g+4))
		}
	}
	waitFor(t, 20*time.Second, "the firings out", func() bool {
		return r.settled(t) && len(pd.Events())+len(slack.Messages()) == 9
	})
	// The firings of alerts 0 to 7 that went to PagerDuty, and to Slack.
	pagedBefore, slackBefore := 0, 0
	for _, e := range pd.Events() {
		var i int
		fmt.Sscanf(e.Source, "db-%d:9100", &i)
		if i < 8 {
			pagedBefore++
		}
	}
	for _, m := range slack.Messages() {
		for i := range 8 {
			if strings.Contains(m.Text, fmt.Sprintf("db-%d:9100", i)) {
				slackBefore++
			}
		}
	}
	r.post(t, "alertmanager", token, "", "", group("resolved", 0, 8)) // 6 of them not info
	waitFor(t, 20*time.Second, "the resolves out", func() bool {
		st := pd.Stats()
		return r.settled(t) && st.Resolves == pagedBefore && len(slack.Messages()) == 9-st.Triggers+slackBefore
	})
	filtered, skipped, dead, answers := r.stats(t, "alerts")
	st := pd.Stats()
	// The repeated notifications carry the same delivery ids (fingerprint,
	// startsAt, status): the stream drops them at the ingress.
	if answers != 9 || filtered != 3+2 || skipped != 6 || dead != 0 {
		t.Errorf("model answers %d, filtered %d, steps skipped %d, dead letters %d; want 9 (the firings), 5 (info alerts firing and resolving), 6 (resolves), 0", answers, filtered, skipped, dead)
	}
	resolvedOpened := 0
	for _, e := range pd.Events() {
		if e.Action == "trigger" {
			var i int
			fmt.Sscanf(e.Source, "db-%d:9100", &i)
			if i < 8 {
				resolvedOpened++
			}
		}
	}
	if st.Opened != st.Triggers || st.Resolved != resolvedOpened || st.Open != st.Opened-resolvedOpened || st.Refused != 0 {
		t.Errorf("PagerDuty %+v; want one alert per trigger event, the %d of them whose alerts resolved closed by dedup_key", st, resolvedOpened)
	}
	if notes := strings.Count(fmt.Sprint(slack.Messages()), "Resolved:"); notes != slackBefore || st.Dropped != 0 || st.AfterResolve != 0 {
		t.Errorf("%d Slack resolve notes, %d PagerDuty resolves of alerts never paged, %d pages after their resolve; want %d (each resolve where its firing went), 0, 0", notes, st.Dropped, st.AfterResolve, slackBefore)
	}
}

// TestRecipeGitHub posts issue and pull request deliveries, each redelivered
// once, and others the recipe filters out: one Slack summary per issue or
// pull request opened, a model answer each, nothing for the rest.
func TestRecipeGitHub(t *testing.T) {
	const secret = "gh-s3cret"
	slack := receiver.NewSlack("/services/T2/B2/github0s3cret0path0123")
	slackURL := serve(t, slack)
	t.Setenv("GITHUB_WEBHOOK_SECRET", secret)
	t.Setenv("SLACK_WEBHOOK_URL", slackURL+slack.Path)
	r := startRecipeApp(t, "github.yaml")
	repo := map[string]any{"id": 1296269, "full_name": "octo-org/octo-repo"}
	deliveries := []struct {
		event string
		body  map[string]any
		want  bool
	}{
		{"issues", map[string]any{"action": "opened", "issue": map[string]any{"number": 1, "title": "Login fails", "body": "Since 2.3", "html_url": "https://github.com/octo-org/octo-repo/issues/1"}, "repository": repo}, true},
		{"issues", map[string]any{"action": "opened", "issue": map[string]any{"number": 2, "title": "Typo in docs", "body": nil, "html_url": "https://github.com/octo-org/octo-repo/issues/2"}, "repository": repo}, true},
		{"issues", map[string]any{"action": "labeled", "issue": map[string]any{"number": 1, "title": "Login fails", "html_url": "https://github.com/octo-org/octo-repo/issues/1"}, "repository": repo}, false},
		{"pull_request", map[string]any{"action": "opened", "pull_request": map[string]any{"number": 3, "title": "Fix login", "body": "Fixes #1", "html_url": "https://github.com/octo-org/octo-repo/pull/3"}, "repository": repo}, true},
		{"pull_request", map[string]any{"action": "reopened", "pull_request": map[string]any{"number": 4, "title": "Bump deps", "body": "", "html_url": "https://github.com/octo-org/octo-repo/pull/4"}, "repository": repo}, true},
		{"push", map[string]any{"ref": "refs/heads/main", "repository": repo}, false},
	}
	for i, d := range deliveries {
		b, _ := json.Marshal(d.body)
		id := fmt.Sprintf("%08x-cc78-11e3-81ab-000000000000", i)
		r.post(t, "github", secret, id, d.event, b)
		r.post(t, "github", secret, id, d.event, b) // GitHub's redelivery of the same delivery
	}
	waitFor(t, 20*time.Second, "the summaries", func() bool { return r.settled(t) && len(slack.Messages()) >= 4 })
	filtered, _, dead, answers := r.stats(t, "github")
	msgs := slack.Messages()
	if len(msgs) != 4 || answers != 4 || filtered != 2 || dead != 0 {
		t.Fatalf("%d Slack messages, %d answers, %d filtered, %d dead letters; want 4, 4, 2, 0", len(msgs), answers, filtered, dead)
	}
	for _, want := range []string{"issue #1 Login fails", "issue #2 Typo in docs", "pull request #3 Fix login", "pull request #4 Bump deps"} {
		if !strings.Contains(fmt.Sprint(msgs), want) {
			t.Errorf("no Slack message with %q", want)
		}
	}
}

// TestRecipeStripe posts dispute events, each retried once by Stripe, and
// events the recipe filters out: one Jira issue per dispute, with an ADF
// description, created with basic auth.
func TestRecipeStripe(t *testing.T) {
	const secret = "whsec_recipe"
	jira := receiver.NewJira("billing@example.com", "atl-t0ken", "PAY")
	jiraURL := serve(t, jira)
	t.Setenv("STRIPE_WEBHOOK_SECRET", secret)
	t.Setenv("JIRA_EMAIL", "billing@example.com")
	t.Setenv("JIRA_API_TOKEN", "atl-t0ken")
	r := startRecipeApp(t, "stripe.yaml", "ONCEGATE_PIPELINES_DISPUTES_EFFECT_URL="+jiraURL)
	event := func(i int, typ string) []byte {
		b, _ := json.Marshal(map[string]any{
			"id": fmt.Sprintf("evt_%04d", i), "object": "event", "type": typ, "created": 1764570000 + i, "livemode": false,
			"data": map[string]any{"object": map[string]any{"id": fmt.Sprintf("dp_%04d", i%10), "object": "dispute", "charge": fmt.Sprintf("ch_%04d", i),
				"amount": 4200 + i, "currency": "eur", "reason": "fraudulent", "status": "needs_response",
				"evidence_details": map[string]any{"due_by": 1765000000}}},
		})
		return b
	}
	for i := range 4 {
		for range 2 { // Stripe retries the event
			r.post(t, "stripe", secret, "", "", event(i, "charge.dispute.created"))
		}
	}
	r.post(t, "stripe", secret, "", "", event(21, "charge.dispute.updated")) // dp_0001, not created: filtered
	r.post(t, "stripe", secret, "", "", event(5, "charge.succeeded"))
	waitFor(t, 20*time.Second, "the tickets", func() bool { return r.settled(t) && len(jira.Issues()) >= 4 })
	filtered, _, dead, answers := r.stats(t, "disputes")
	is := jira.Issues()
	if len(is) != 4 || answers != 4 || filtered != 2 || dead != 0 || jira.Refused() != 0 {
		t.Fatalf("%d Jira issues (%d refused), %d answers, %d filtered, %d dead letters; want 4, 0, 4, 2, 0", len(is), jira.Refused(), answers, filtered, dead)
	}
	seen := map[string]bool{}
	for _, i := range is {
		seen[i.Summary] = true
		if !strings.HasPrefix(i.Summary, "Dispute dp_000") || !strings.Contains(i.Summary, "EUR (fraudulent)") || i.Project != "PAY" {
			t.Errorf("issue %+v", i)
		}
	}
	if len(seen) != 4 {
		t.Errorf("%d distinct summaries; want 4", len(seen))
	}
}
