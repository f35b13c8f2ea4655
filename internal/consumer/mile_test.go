package consumer_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/receiver"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

const routingKey = "R0123456789abcdef0123456789abcde"

// recipe starts the Alertmanager recipe (examples/recipes/alertmanager.yaml)
// with its PagerDuty and Slack pointed at in-process receivers.
type recipe struct {
	*fixture
	pd    *receiver.PagerDuty
	slack *receiver.Slack
	keyer *dedupe.Keyer
}

func startRecipe(t *testing.T, modelOpts standin.Options, edit func(p *config.Pipeline), opts ...func(*consumer.Options)) *recipe {
	t.Helper()
	pd := receiver.NewPagerDuty(routingKey)
	pdSrv := httptest.NewServer(pd)
	t.Cleanup(pdSrv.Close)
	slack := receiver.NewSlack("/services/T0001/B0002/s3cr3tT0ken1234567890")
	slackSrv := httptest.NewServer(slack)
	t.Cleanup(slackSrv.Close)
	t.Setenv("PAGERDUTY_ROUTING_KEY", routingKey)
	t.Setenv("SLACK_WEBHOOK_URL", slackSrv.URL+slack.Path)

	data, err := os.ReadFile("../../examples/recipes/alertmanager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := config.ParseEnv(data, "alertmanager.yaml", []string{"ONCEGATE_PIPELINES_ALERTS_EFFECTS_PAGERDUTY_URL=" + pdSrv.URL + "/v2/enqueue"})
	if err != nil {
		t.Fatal(err)
	}
	p := rc.Pipelines[0]
	if edit != nil {
		edit(&p)
	}
	keyer, err := dedupe.NewKeyer(consumer.KeySpec(&p))
	if err != nil {
		t.Fatal(err)
	}
	p.Concurrency, p.AckWait, p.Backoff = 16, 5*time.Second, nil
	if edit != nil {
		edit(&p) // again: an edit may set what the lines above do
	}
	f := start(t, func(c *config.Config) {
		c.Pipelines = []config.Pipeline{p}
	}, modelOpts, opts...)
	return &recipe{fixture: f, pd: pd, slack: slack, keyer: keyer}
}

// amAlert is one alert as the ingress publishes it from an Alertmanager
// notification.
func amAlert(fp, severity, status string, delivery int) []byte {
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

// identity is the intent key of an alert less its status: PagerDuty's
// dedup_key.
func (r *recipe) identity(t *testing.T, fp string) string {
	in, err := r.keyer.Intent(amAlert(fp, "page", "firing", 0))
	if err != nil {
		t.Fatal(err)
	}
	return in.Key.String()
}

// TestAlertmanagerRecipe runs the recipe on 12 alerts that fire (each
// delivered twice), 8 of them resolving, an alert first seen resolved, and
// 3 info alerts: one model call per firing, no call for a resolve or an
// info alert; one message per firing at the receiver its route names, and
// one per resolve at the receiver its firing went to (nothing for the
// alert first seen resolved: its firing went nowhere); every incident a
// firing opened in PagerDuty closed by its resolve.
func TestAlertmanagerRecipe(t *testing.T) {
	r := startRecipe(t, standin.Options{}, func(p *config.Pipeline) { p.Key.ResolveWait = time.Second })
	const firing, resolving, info = 12, 8, 3
	for i := range firing {
		fp := fmt.Sprintf("fp%02d", i)
		r.publish("triggers.alerts", amAlert(fp, "page", "firing", 0))
		r.publish("triggers.alerts", amAlert(fp, "page", "firing", 1)) // Alertmanager's repeat
	}
	for i := range info {
		r.publish("triggers.alerts", amAlert(fmt.Sprintf("info%d", i), "info", "firing", 0))
	}
	waitFor(t, 20*time.Second, "the firings settled", func() bool {
		s := r.stats("alerts")
		return s.Effects == firing && s.Filtered == info && settled(s)+s.Filtered == 2*firing+info
	}, r.fixture)
	for i := range resolving {
		r.publish("triggers.alerts", amAlert(fmt.Sprintf("fp%02d", i), "page", "resolved", 2))
	}
	r.publish("triggers.alerts", amAlert("never-fired", "page", "resolved", 0))
	intents := firing + resolving + 1
	waitFor(t, 20*time.Second, "every intent's messages out", func() bool {
		return r.stats("alerts").Effects == int64(intents) && r.allAcked("alerts") && r.outboxDone("alerts") &&
			len(r.slack.Messages())+len(r.pd.Events()) == firing+resolving
	}, r.fixture)

	if got := r.model.Stats().Completions; got != firing {
		t.Errorf("model calls %d; want %d (one per firing; none for resolves or info alerts)", got, firing)
	}
	s := r.stats("alerts")
	if s.Filtered != info || s.StepsSkipped != resolving+1 || s.DeadLetters != 0 {
		t.Errorf("stats %+v; want %d filtered, %d steps skipped, no dead letters", s, info, resolving+1)
	}
	// Each firing went to PagerDuty or Slack, once; each resolve where its
	// firing went, once.
	pdByKey, slackByKey := map[string]int{}, map[string]int{}
	for _, e := range r.pd.Events() {
		pdByKey[e.IdempotencyKey]++
		if !strings.HasPrefix(e.UserAgent, "oncegate/") {
			t.Errorf("PagerDuty request User-Agent %q", e.UserAgent)
		}
	}
	for _, m := range r.slack.Messages() {
		slackByKey[m.IdempotencyKey]++
	}
	opened := map[string]bool{}
	for _, e := range r.pd.Events() {
		if e.Action == "trigger" {
			opened[e.DedupKey] = true
		}
	}
	for i := range firing {
		fp := fmt.Sprintf("fp%02d", i)
		id, _ := dedupe.ParseKey(r.identity(t, fp))
		fk := consumer.StatusKey(id, "firing")
		pdF, slackF := pdByKey[consumer.EffectKey(fk, "pagerduty").String()], slackByKey[consumer.EffectKey(fk, "slack").String()]
		if pdF+slackF != 1 {
			t.Errorf("alert %s firing: %d messages; want 1", fp, pdF+slackF)
		}
		if i < resolving {
			rk := consumer.StatusKey(id, "resolved")
			pdR, slackR := pdByKey[consumer.EffectKey(rk, "pagerduty").String()], slackByKey[consumer.EffectKey(rk, "slack").String()]
			if pdR != pdF || slackR != slackF {
				t.Errorf("alert %s resolve: %d PagerDuty events and %d Slack messages; want %d and %d, where its firing went", fp, pdR, slackR, pdF, slackF)
			}
		}
	}
	st := r.pd.Stats()
	resolvedOpened := 0
	for i := range resolving {
		if opened[r.identity(t, fmt.Sprintf("fp%02d", i))] {
			resolvedOpened++
		}
	}
	if st.Resolved != resolvedOpened || st.Open != len(opened)-resolvedOpened || st.Refused != 0 || st.Dropped != 0 {
		t.Errorf("PagerDuty %+v; want the %d incidents whose alerts resolved closed by their resolves (dedup_key = the firing's), %d left open, none refused, no resolve of an alert never paged", st, resolvedOpened, len(opened)-resolvedOpened)
	}
	if len(opened) == 0 || len(opened) == firing {
		t.Logf("the stand-in found %d of %d firings critical; both routes are exercised only when it is neither", len(opened), firing)
	}
	var notes int
	for _, m := range r.slack.Messages() {
		if strings.Contains(m.Text, "Resolved:") {
			notes++
		}
	}
	if want := resolving - resolvedOpened; notes != want {
		t.Errorf("%d Slack resolve notes; want %d (the resolved alerts that went to Slack)", notes, want)
	}
}

// TestBadTemplateIsDeadLettered: a prompt naming a key the trigger lacks
// dead-letters it with reason template and never calls the model; an
// effect template that fails dead-letters it and sends none of its route's
// effects.
func TestBadTemplateIsDeadLettered(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(p *config.Pipeline)
		send []byte
	}{
		{"prompt", func(p *config.Pipeline) { p.Step.Prompt += "Team: {{.alert.labels.team}}\n" }, amAlert("a", "page", "firing", 0)},
		{"effect", func(p *config.Pipeline) {
			e := p.Effects["slack"]
			e.Text = "{{.trigger.alert.labels.team}}"
			p.Effects["slack"] = e
			p.Routes = []config.Route{{Name: "both", Effects: []string{"pagerduty", "slack"}}}
		}, amAlert("b", "page", "firing", 0)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := startRecipe(t, standin.Options{}, tt.edit)
			r.publish("triggers.alerts", tt.send)
			waitFor(t, 10*time.Second, "the dead letter", func() bool { return r.stats("alerts").DeadLetters == 1 }, r.fixture)
			dead := r.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.alerts")
			if len(dead) != 1 || dead[0].Headers().Get(consumer.HeaderReason) != string(outcome.ReasonTemplate) ||
				!strings.Contains(dead[0].Headers().Get(consumer.HeaderDetail), `no entry for key "team"`) {
				t.Fatalf("dead letters %d, reason %q (%s); want one, template, naming the key", len(dead), dead[0].Headers().Get(consumer.HeaderReason), dead[0].Headers().Get(consumer.HeaderDetail))
			}
			if n := r.model.Stats().Completions; n != 0 && tt.name == "prompt" {
				t.Errorf("model calls %d; want 0", n)
			}
			if n, m := len(r.pd.Events()), len(r.slack.Messages()); n+m != 0 {
				t.Errorf("%d PagerDuty events and %d Slack messages; want none", n, m)
			}
		})
	}
}

// TestBadAnswerIsDeadLettered: a model whose answers never match the
// schema is asked answer_attempts times, then the trigger is
// dead-lettered bad_answer; a retry of the trigger pays nothing more.
func TestBadAnswerIsDeadLettered(t *testing.T) {
	r := startRecipe(t, standin.Options{OffSchemaRate: 1}, nil)
	r.publish("triggers.alerts", amAlert("c", "page", "firing", 0))
	waitFor(t, 10*time.Second, "the dead letter", func() bool { return r.stats("alerts").DeadLetters == 1 }, r.fixture)
	dead := r.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.alerts")
	if got := dead[0].Headers().Get(consumer.HeaderReason); got != string(outcome.ReasonBadAnswer) {
		t.Fatalf("reason %q (%s); want bad_answer", got, dead[0].Headers().Get(consumer.HeaderDetail))
	}
	if n := r.model.Stats().Completions; n != config.DefaultAnswerAttempts {
		t.Errorf("model calls %d; want %d", n, config.DefaultAnswerAttempts)
	}
	if n, m := len(r.pd.Events()), len(r.slack.Messages()); n+m != 0 {
		t.Errorf("%d PagerDuty events and %d Slack messages; want none", n, m)
	}
}

// TestFilteredIsNotPaid: a trigger the when: condition filters out is
// acked without a claim, a model call or an effect.
func TestFilteredIsNotPaid(t *testing.T) {
	r := startRecipe(t, standin.Options{}, nil)
	r.publish("triggers.alerts", amAlert("d", "info", "firing", 0))
	waitFor(t, 10*time.Second, "filtered", func() bool { return r.stats("alerts").Filtered == 1 }, r.fixture)
	waitFor(t, 10*time.Second, "acked", func() bool { return r.allAcked("alerts") }, r.fixture)
	if n := r.model.Stats().Completions; n != 0 {
		t.Errorf("model calls %d; want 0", n)
	}
	if n, m := len(r.pd.Events()), len(r.slack.Messages()); n+m != 0 {
		t.Errorf("%d PagerDuty events and %d Slack messages; want none", n, m)
	}
	in, _ := r.keyer.Intent(amAlert("d", "info", "firing", 0))
	id := consumer.StatusKey(in.Key, "firing") // the identity
	if _, err := r.ledger.Get(t.Context(), id); err == nil {
		t.Errorf("the filtered trigger's intent has a ledger record; want none (never claimed)")
	}
	if got := r.stats("alerts").Effects; got != 0 {
		t.Errorf("effects %d; want 0", got)
	}
}

// TestBuiltinAlertsResolve: on the built-in alerts pipeline, a resolve is
// its own work, not a duplicate of the firing it resolves, and is not
// triaged; an alert first seen resolved is not triaged either.
func TestBuiltinAlertsResolve(t *testing.T) {
	f := start(t, func(c *config.Config) { c.Pipelines[0].Key.ResolveWait = time.Second }, standin.Options{})
	firing := alert("r1", 1, 0)
	resolved := []byte(strings.Replace(string(alert("r1", 1, 1)), `"status":"firing"`, `"status":"resolved"`, 1))
	firstResolved := []byte(strings.Replace(string(alert("r2", 1, 0)), `"status":"firing"`, `"status":"resolved"`, 1))
	f.publish("triggers.alerts", firing)
	waitFor(t, 10*time.Second, "the firing's effect", func() bool { return f.stats("alerts").Effects == 1 }, f)
	f.publish("triggers.alerts", resolved)
	f.publish("triggers.alerts", firstResolved)
	waitFor(t, 10*time.Second, "all settled", func() bool { return settled(f.stats("alerts")) == 3 }, f)
	if s := f.stats("alerts"); s.Effects != 3 || s.DuplicatesLedger+s.DuplicatesWindow != 0 {
		t.Errorf("stats %+v; want 3 effects (the firing, its resolve, the first-seen resolve), no duplicates", s)
	}
	if n := f.model.Stats().Completions; n != 1 {
		t.Errorf("model calls %d; want 1 (the firing only)", n)
	}
}

// TestBuiltinPromptTypoIsNotPaid: a prompt naming a member the trigger
// lacks dead-letters it (template) instead of sending "<no value>" to the
// model.
func TestBuiltinPromptTypoIsNotPaid(t *testing.T) {
	f := start(t, func(c *config.Config) {
		c.Pipelines[0].Step.Prompt = "Triage {{.alert.labels.alertname}} owned by {{.alert.labels.tema}}"
	}, standin.Options{})
	f.publish("triggers.alerts", alert("t1", 1, 0))
	waitFor(t, 10*time.Second, "settled", func() bool { return settled(f.stats("alerts")) == 1 }, f)
	if s := f.stats("alerts"); s.DeadLetters != 1 || f.model.Stats().Completions != 0 {
		t.Errorf("stats %+v, model calls %d; want a dead letter and no model call", s, f.model.Stats().Completions)
	}
}

// TestJetStreamEffectTemplate: a JetStream effect renders its body and a
// subject suffix per trigger; a suffix that is not subject tokens
// dead-letters the trigger (template).
func TestJetStreamEffectTemplate(t *testing.T) {
	f := start(t, func(c *config.Config) {
		p := &c.Pipelines[1] // webhooks: a gate
		p.Name, p.Subject = "orders", "triggers.orders"
		p.Key = config.Key{Fields: []string{"/id"}, Scope: config.ScopeInput, Hash: config.HashXXH}
		p.Effect = config.Effect{Sink: config.SinkJetStream, Subject: "effects.orders", Class: config.ClassReplayable,
			SubjectSuffix: "{{.trigger.region}}", Body: `{"order":{{quote .trigger.id}},"key":{{quote .key}}}`}
	}, standin.Options{})
	for _, b := range []string{`{"id":"o1","region":"eu"}`, `{"id":"o2","region":"us"}`, `{"id":"o1","region":"eu","retry":1}`, `{"id":"o3","region":"a b"}`} {
		f.publish("triggers.orders", []byte(b))
	}
	waitFor(t, 10*time.Second, "settled", func() bool { return settled(f.stats("orders")) == 4 }, f)
	if s := f.stats("orders"); s.Effects != 2 || s.DeadLetters != 1 {
		t.Fatalf("stats %+v; want 2 effects, 1 dead letter", s)
	}
	eu := f.streamMsgs("ONCEGATE_EFFECTS", "effects.orders.eu")
	if len(eu) != 1 || !strings.HasPrefix(string(eu[0].Data()), `{"order":"o1","key":"`) || f.subjectCount("ONCEGATE_EFFECTS", "effects.orders.us") != 1 {
		t.Fatalf("effects.orders.eu %d messages (%q), effects.orders.us %d; want the rendered body on each region's subject", len(eu), eu[0].Data(), f.subjectCount("ONCEGATE_EFFECTS", "effects.orders.us"))
	}
	var body struct{ Key string }
	json.Unmarshal(eu[0].Data(), &body)
	if id := eu[0].Headers().Get("Nats-Msg-Id"); id != body.Key {
		t.Errorf("Nats-Msg-Id %q; want the intent key %q", id, body.Key)
	}
	dead := f.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.orders")
	if len(dead) != 1 || dead[0].Headers().Get(consumer.HeaderReason) != string(outcome.ReasonTemplate) {
		t.Errorf("dead letters %d; want one, reason template", len(dead))
	}
}
