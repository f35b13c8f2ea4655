package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/receiver"
)

// fedConfig runs what the dashboards and alerts watch: an Alertmanager
// source on the ingress (and one whose secret is unset), the proxy, and a
// pipeline like the alerts recipe: a triage step (the stand-in, under a
// rate limit), a PagerDuty effect (replayable) and a Slack one (one-shot,
// through the outbox), both sent for every alert; and a pipeline whose
// receiver refuses its orders. Its arguments: the data directory, the
// proxy's keys file, PagerDuty's URL, Slack's, the orders receiver's.
const fedConfig = `
data_dir: %[1]s
metrics: {listen: ""}
nats: {embedded: {listen: "127.0.0.1:0"}}
llm: {standin: true, rate_limit: {requests_per_minute: 6000}}
ledger: {lease: 2s}
ingress:
  listen: 127.0.0.1:0
  sources:
    - {name: alertmanager, kind: alertmanager, subject: triggers.pages, secret_env: FED_AM_TOKEN}
    - {name: spare, kind: alertmanager, subject: triggers.pages, secret_env: FED_UNSET, optional: true}
proxy: {listen: 127.0.0.1:0, keys_file: %[2]s, max_budget: 5, budget_duration: 24h}
pipelines:
  - name: pages
    subject: triggers.pages
    key: {fields: [/alert/fingerprint], status: /status}
    step:
      name: triage
      skip_when: 'status == "resolved"'
      prompt: "Triage {{.alert.labels.alertname}} on {{.alert.labels.instance}}."
    effects:
      pagerduty: {preset: pagerduty, url: "%[3]s", routing_key_env: FED_PD_KEY, summary: "{{.trigger.alert.labels.alertname}}", source: "{{.trigger.alert.labels.instance}}"}
      slack: {preset: slack, url: "%[4]s", text: "{{.trigger.alert.labels.alertname}} on {{.trigger.alert.labels.instance}}"}
    ack_wait: 2s
    max_deliver: 5
  - name: orders
    subject: triggers.orders
    key: {fields: [/order]}
    effect: {sink: http, url: "%[5]s"}
    ack_wait: 2s
    max_deliver: 3
`

// fedEnv is the environment the configuration reads.
var fedEnv = map[string]string{"FED_AM_TOKEN": "am-token-0123456789abcdef", "FED_PD_KEY": "pdroutingkey0123456789abcdef0123"}

// faultOnly are the selectors of the dashboards and alert rules that no
// healthy traffic feeds, each with what does; every other one must have a
// series this test's traffic moved.
var faultOnly = map[string]string{
	`oncegate_dead_letters_total{reason="unknown_outcome"}`: "a dispatcher dying mid-send (cmd/consumer's TestCrashAtEachPoint)",
	`oncegate_llm_upstream_errors_total`:                    "a model endpoint answering errors (pkg/llmcache's tests)",
	`oncegate_llm_answers_not_stored_total`:                 "a cache store refusing answers (pkg/llmcache's tests)",
	`oncegate_llm_rate_limited_total`:                       "a model endpoint's rate limit reached (internal/app's rate limit tests)",
	`oncegate_ledger_claims_total{status="held"}`:           "a duplicate arriving while its work is under way (internal/consumer's tests)",
	`oncegate_proxy_spend_limit_usd`:                        "set per client with a limit: a gauge, present",
}

// TestSeriesFed runs traffic through a consumer — alerts through the
// ingress (signed, unsigned, badly signed, to a source with no secret),
// duplicates, an effect the receiver fails, a one-shot Slack message, a
// refused order redriven, a reply the consumer refuses, a trigger no
// pipeline reads, a proxy call — and reads what it exposes. Every counter
// and histogram a dashboard panel or an alert rule reads has a series the
// traffic moved (but the few only faults feed, listed with what feeds
// them), every gauge is exposed, and no effect is counted under a series
// the consumer did not make for it at start: a Slack message is counted
// under sink="slack", whose series sat at 0 while sends went to sink="".
func TestSeriesFed(t *testing.T) {
	for k, v := range fedEnv {
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	pd := receiver.NewPagerDuty(fedEnv["FED_PD_KEY"])
	pdSrv := httptest.NewServer(pd)
	defer pdSrv.Close()
	slack := receiver.NewSlack("/services/T0/B0/XX")
	slackSrv := httptest.NewServer(slack)
	defer slackSrv.Close()
	orders := &refusing{}
	ordersSrv := httptest.NewServer(orders)
	defer ordersSrv.Close()
	keys := filepath.Join(dir, "proxy-keys")
	const proxyKey = "sk-team-a-0123456789abcdefghij"
	if err := os.WriteFile(keys, []byte("team-a "+proxyKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(fmt.Appendf(nil, fedConfig, filepath.Join(dir, "data"), keys, pdSrv.URL+"/v2/enqueue", slackSrv.URL+"/services/T0/B0/XX", ordersSrv.URL), "fed")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := app.Start(ctx, cfg, app.Options{NoOps: true, Logger: slog.New(slog.DiscardHandler), Getenv: func(k string) string { return fedEnv[k] }})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	defer func() { stop(); <-done }()
	if err := waitFor(ctx, func() bool { return a.Consumer.Ready() == nil }); err != nil {
		t.Fatal(err)
	}
	reg := a.Metrics.Registry()
	premade := gather(t, reg)

	nc, err := nats.Connect(a.Embedded.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)

	// The ingress: an alert signed (its bearer token), sent twice, then
	// resolved; one unsigned, one badly signed, one to the source with no
	// secret. PagerDuty fails the first tries (the effect is retried).
	pd.Fail(5, http.StatusInternalServerError, 0)
	post := func(source, token string, body []byte) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+a.IngressAddr+"/hooks/"+source, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	group := func(status string) []byte {
		b, _ := json.Marshal(map[string]any{
			"version": "4", "status": status, "receiver": "oncegate", "groupKey": "{}:{alertname=\"DiskFull\"}",
			"alerts": []map[string]any{{
				"status": status, "fingerprint": "c1d7b5e2a9f04417", "startsAt": "2026-11-29T07:09:03.118Z",
				"labels":      map[string]string{"alertname": "DiskFull", "instance": "db-2:9100", "severity": "critical"},
				"annotations": map[string]string{"summary": "Disk 93% full"},
			}},
		})
		return b
	}
	if code := post("alertmanager", fedEnv["FED_AM_TOKEN"], group("firing")); code/100 != 2 {
		t.Fatalf("the signed alert: %d", code)
	}
	post("alertmanager", fedEnv["FED_AM_TOKEN"], group("firing")) // Alertmanager sends it again
	post("alertmanager", "", group("firing"))
	post("alertmanager", "not-the-token-0123456789", group("firing"))
	post("spare", fedEnv["FED_AM_TOKEN"], group("firing"))
	if err := waitFor(ctx, func() bool { return len(slack.Messages()) == 1 && pd.Stats().Opened == 1 }); err != nil {
		t.Fatalf("the firing's PagerDuty event and Slack message: %d messages, %+v", len(slack.Messages()), pd.Stats())
	}
	post("alertmanager", fedEnv["FED_AM_TOKEN"], group("resolved"))
	if err := waitFor(ctx, func() bool { return len(slack.Messages()) == 2 && pd.Stats().Resolved == 1 }); err != nil {
		t.Fatalf("the resolve's PagerDuty event and Slack message: %d messages, %+v", len(slack.Messages()), pd.Stats())
	}

	// An alert PagerDuty refuses for good: dead-lettered, its triage
	// already paid for; redriven, the triage comes from its ledger record
	// (counted in the cache's tokens and cost saved).
	alert := func(fp string) *nats.Msg {
		m := nats.NewMsg("triggers.pages")
		m.Data = fmt.Appendf(nil, `{"status":"firing","alert":{"fingerprint":%q,"labels":{"alertname":"Load","instance":"web-1","severity":"warning"}}}`, fp)
		return m
	}
	pd.Fail(1, http.StatusBadRequest, 0)
	if _, err := js.PublishMsg(ctx, alert("f2")); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, func() bool {
		r, err := a.Admin.Dead(ctx, admin.Selection{Pipeline: "pages"})
		return err == nil && len(r.Letters) == 1
	}); err != nil {
		t.Fatal("the refused alert's dead letter")
	}
	if _, err := a.Admin.Redrive(ctx, admin.RedriveRequest{Selection: admin.Selection{Pipeline: "pages"}, Yes: true, By: admin.Caller{User: "test"}}); err != nil {
		t.Fatal(err)
	}
	// A reply Oncegate refuses to send.
	m := alert("r1")
	m.Header.Set("Oncegate-Reply", "$JS.API.STREAM.LIST")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	// An order refused, then again (the failed record: a failed claim);
	// the receiver fixed, it is redriven. Another sent twice: a duplicate.
	for range 2 {
		if _, err := js.Publish(ctx, "triggers.orders", []byte(`{"order":"O-1"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitFor(ctx, func() bool {
		r, err := a.Admin.Dead(ctx, admin.Selection{Pipeline: "orders"})
		return err == nil && len(r.Letters) == 2
	}); err != nil {
		t.Fatal("the order's two dead letters")
	}
	orders.fix()
	if _, err := a.Admin.Redrive(ctx, admin.RedriveRequest{Selection: admin.Selection{Pipeline: "orders"}, Yes: true, By: admin.Caller{User: "test"}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := js.Publish(ctx, "triggers.orders", []byte(`{"order":"O-3"}`)); err != nil {
			t.Fatal(err)
		}
	}
	// A trigger no pipeline reads.
	if _, err := js.Publish(ctx, "triggers.nobody", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	// A proxy call.
	call, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+a.ProxyAddr+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Disk full on db-2"}]}`))
	call.Header.Set("Authorization", "Bearer "+proxyKey)
	call.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(call)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := waitFor(ctx, func() bool {
		n, err := a.Outstanding(ctx)
		return err == nil && n == 0 && orders.count() == 2 && len(slack.Messages()) == 4
	}); err != nil {
		t.Fatalf("the traffic did not settle: orders took %d effects, Slack %d messages", orders.count(), len(slack.Messages()))
	}
	if err := a.StreamWatch.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	after := gather(t, reg)

	// The effects: under the series made for them at start.
	for _, kind := range []string{"pagerduty", "slack", "outbox", "http"} {
		if v := after.value("oncegate_effects_total", map[string]string{"sink": kind, "outcome": "done"}); v == 0 {
			t.Errorf(`oncegate_effects_total{sink=%q,outcome="done"} = 0 after traffic that sent %s effects`, kind, kind)
		}
	}
	for _, name := range []string{"oncegate_effects_total", "oncegate_effect_seconds_count"} {
		for _, s := range after[name] {
			if s.value > 0 && !premade.has(name, s.labels) {
				t.Errorf("%s%v = %v: traffic is counted under a series the consumer did not make at start (the dashboards' pre-made ones sit at 0)", name, s.labels, s.value)
			}
		}
	}

	// Every selector of the dashboard and the rules.
	var exprs []string
	exprs = append(exprs, dashboardQueries(t, loadDashboard(t))...)
	exprs = append(exprs, ruleExprs(t)...)
	seen := map[string]bool{}
	for _, expr := range exprs {
		e, err := promql.ParseExpr(expr)
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok || vs.Name == "up" {
				return nil
			}
			sel := selectorString(vs)
			if seen[sel] {
				return nil
			}
			seen[sel] = true
			if _, ok := faultOnly[sel]; ok {
				return nil
			}
			series := after.matching(vs)
			switch {
			case len(series) == 0:
				t.Errorf("%s: no series after the traffic", sel)
			case after.kind(vs.Name) == dto.MetricType_GAUGE:
			case !slices.ContainsFunc(series, func(s sample) bool { return s.value > 0 }):
				t.Errorf("%s: every series is 0 after traffic that should move it (%d series)", sel, len(series))
			}
			return nil
		})
	}
}

// refusing refuses every call with 400 until fixed, then takes them.
type refusing struct {
	mu    sync.Mutex
	fixed bool
	n     int
}

func (r *refusing) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.fixed {
		http.Error(w, "unknown field", http.StatusBadRequest)
		return
	}
	r.n++
	fmt.Fprint(w, `{"ok":true}`)
}

func (r *refusing) fix()       { r.mu.Lock(); r.fixed = true; r.mu.Unlock() }
func (r *refusing) count() int { r.mu.Lock(); defer r.mu.Unlock(); return r.n }

// sample is one series and its value (a histogram's count).
type sample struct {
	labels map[string]string
	value  float64
}

// samples are a registry's series by metric name (histograms as _bucket,
// _sum and _count), and their types.
type samples map[string][]sample

func gather(t *testing.T, reg interface {
	Gather() ([]*dto.MetricFamily, error)
}) samples {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := samples{}
	for _, f := range fams {
		out["#type:"+f.GetName()] = []sample{{value: float64(f.GetType())}}
		for _, m := range f.GetMetric() {
			ls := map[string]string{}
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[f.GetName()] = append(out[f.GetName()], sample{ls, m.GetCounter().GetValue()})
			case dto.MetricType_GAUGE:
				out[f.GetName()] = append(out[f.GetName()], sample{ls, m.GetGauge().GetValue()})
			case dto.MetricType_HISTOGRAM:
				n := float64(m.GetHistogram().GetSampleCount())
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					out[f.GetName()+suffix] = append(out[f.GetName()+suffix], sample{ls, n})
				}
			default:
				out[f.GetName()] = append(out[f.GetName()], sample{ls, m.GetUntyped().GetValue()})
			}
		}
	}
	return out
}

func (s samples) kind(name string) dto.MetricType {
	for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
		if t, ok := s["#type:"+strings.TrimSuffix(name, suffix)]; ok && (suffix == "" || strings.HasSuffix(name, suffix)) {
			return dto.MetricType(t[0].value)
		}
	}
	return dto.MetricType_UNTYPED
}

// value sums the series of name whose labels include want.
func (s samples) value(name string, want map[string]string) float64 {
	var sum float64
	for _, x := range s[name] {
		ok := true
		for k, v := range want {
			ok = ok && x.labels[k] == v
		}
		if ok {
			sum += x.value
		}
	}
	return sum
}

// has reports whether name has a series with exactly these labels.
func (s samples) has(name string, ls map[string]string) bool {
	return slices.ContainsFunc(s[name], func(x sample) bool { return fmt.Sprint(x.labels) == fmt.Sprint(ls) })
}

// matching returns the series a selector chooses, the scrape's own labels
// (instance, job) and the dashboard's variables left aside.
func (s samples) matching(vs *parser.VectorSelector) []sample {
	var out []sample
	for _, x := range s[vs.Name] {
		ok := true
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel || slices.Contains(scrapeLabels, m.Name) || m.Type == labels.MatchRegexp && m.Value == ".*" {
				continue
			}
			ok = ok && m.Matches(x.labels[m.Name])
		}
		if ok {
			out = append(out, x)
		}
	}
	return out
}

// selectorString writes a selector as faultOnly names it: the metric and
// its matchers, the scrape's and the dashboard's variables left aside.
func selectorString(vs *parser.VectorSelector) string {
	var ms []string
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel || slices.Contains(scrapeLabels, m.Name) || m.Type == labels.MatchRegexp && m.Value == ".*" {
			continue
		}
		ms = append(ms, m.String())
	}
	if len(ms) == 0 {
		return vs.Name
	}
	return vs.Name + "{" + strings.Join(ms, ",") + "}"
}

// ruleExprs returns the expressions of the rules file.
func ruleExprs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
		}
	}
	return out
}
