package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
)

// The files under test, relative to this directory.
const (
	rulesFile     = "oncegate.rules.yml"
	dashboardFile = "grafana/oncegate.json"
	composeFile   = "../docker-compose.yml"
)

// series is one exposed metric name (histograms expanded to _bucket, _sum
// and _count) with the label names it carries and each label's values.
type series map[string]map[string]map[string]bool // name → label → values

// scrapeLabels are the labels Prometheus adds to every scraped series.
var scrapeLabels = []string{"instance", "job"}

// external are the series a query may name that Prometheus makes itself,
// not the consumer: up{job="oncegate"} is 0 when a scrape fails.
var external = series{"up": {"instance": nil, "job": {"oncegate": true}}}

var (
	liveOnce sync.Once
	live     series
	liveErr  error
)

// liveSeries runs a real consumer (embedded NATS, Badger ledger and cache,
// the stand-in model) through an alert, its retry, a webhook and a payload
// that is not JSON, and returns what its registry exposes.
func liveSeries(t *testing.T) series {
	t.Helper()
	liveOnce.Do(func() { live, liveErr = runConsumer() })
	if liveErr != nil {
		t.Fatal(liveErr)
	}
	return live
}

func runConsumer() (series, error) {
	dir, err := os.MkdirTemp("", "oncegate-deploy-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cfg := config.Default()
	cfg.DataDir = dir
	cfg.NATS.URL = ""
	cfg.NATS.Embedded.Listen = "127.0.0.1:0"
	cfg.NATS.Embedded.StoreDir = filepath.Join(dir, "nats")
	cfg.LLM.BaseURL, cfg.LLM.Standin = "", true
	// The webhook ingress and the model rate limit on, so that their
	// series are exposed; its sources' secrets left unset (optional:
	// they answer 503), so that those series are too.
	cfg.Ingress.Listen = "127.0.0.1:0"
	for i := range cfg.Ingress.Sources {
		cfg.Ingress.Sources[i].Optional = true
	}
	cfg.LLM.RateLimit.RequestsPerMinute = 6000
	// And the proxy, with a client key under a spend limit, which makes
	// a call.
	const proxyKey = "sk-team-a-0123456789abcdefghij"
	keys := filepath.Join(dir, "proxy-keys")
	if err := os.WriteFile(keys, []byte("team-a "+proxyKey+"\n"), 0o600); err != nil {
		return nil, err
	}
	cfg.Proxy.Listen, cfg.Proxy.KeysFile = "127.0.0.1:0", keys
	cfg.Proxy.MaxBudget, cfg.Proxy.BudgetDuration = 5, config.Period(24*time.Hour)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := app.Start(ctx, cfg, app.Options{
		NoOps: true, Logger: slog.New(slog.DiscardHandler), Getenv: func(string) string { return "" },
	})
	if err != nil {
		return nil, err
	}
	defer a.Close()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	defer func() { stop(); <-done }()
	if err := waitFor(ctx, func() bool { return a.Consumer.Ready() == nil }); err != nil {
		return nil, fmt.Errorf("the consumer did not become ready: %w", err)
	}

	nc, err := nats.Connect(a.Embedded.ClientURL())
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	alert, err := os.ReadFile("../examples/alert.json")
	if err != nil {
		return nil, err
	}
	retry, err := os.ReadFile("../examples/alert-retry.json")
	if err != nil {
		return nil, err
	}
	hook, err := os.ReadFile("../examples/github-push.json")
	if err != nil {
		return nil, err
	}
	for _, m := range []struct {
		subject string
		data    []byte
	}{
		{"triggers.alerts", alert},
		{"triggers.alerts", retry},
		{"triggers.alerts", []byte("not json")},
		{"triggers.webhooks", hook},
		{"triggers.nobody", alert}, // a subject no pipeline reads
	} {
		if _, err := js.Publish(ctx, m.subject, m.data); err != nil {
			return nil, fmt.Errorf("publish %s: %w", m.subject, err)
		}
	}
	call, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+a.ProxyAddr+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Disk full on db-2"}]}`))
	if err != nil {
		return nil, err
	}
	call.Header.Set("Authorization", "Bearer "+proxyKey)
	call.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(call)
	if err != nil {
		return nil, fmt.Errorf("proxy call: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("proxy call: %s", resp.Status)
	}
	reg := a.Metrics.Registry()
	settled := func() bool {
		fams, err := reg.Gather()
		if err != nil {
			return false
		}
		var acks, dead float64
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				switch f.GetName() {
				case "oncegate_acks_total":
					acks += m.GetCounter().GetValue()
				case "oncegate_dead_letters_total":
					dead += m.GetCounter().GetValue()
				}
			}
		}
		return acks >= 3 && dead >= 1
	}
	if err := waitFor(ctx, settled); err != nil {
		return nil, fmt.Errorf("the triggers were not settled: %w", err)
	}
	// The backlog and the unrouted trigger, measured now rather than at
	// the next poll.
	if err := a.StreamWatch.Poll(ctx); err != nil {
		return nil, fmt.Errorf("streamwatch: %w", err)
	}
	fams, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	out := series{}
	add := func(name string, m *dto.Metric, extra ...string) {
		ls := out[name]
		if ls == nil {
			ls = map[string]map[string]bool{}
			out[name] = ls
		}
		for _, lp := range m.GetLabel() {
			if ls[lp.GetName()] == nil {
				ls[lp.GetName()] = map[string]bool{}
			}
			ls[lp.GetName()][lp.GetValue()] = true
		}
		for _, l := range extra {
			if ls[l] == nil {
				ls[l] = map[string]bool{}
			}
		}
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if f.GetType() == dto.MetricType_HISTOGRAM {
				add(f.GetName()+"_bucket", m, "le")
				add(f.GetName()+"_sum", m)
				add(f.GetName()+"_count", m)
				continue
			}
			add(f.GetName(), m)
		}
	}
	return out, nil
}

// waitFor polls cond every 20ms until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

var promql = parser.NewParser(parser.Options{})

// wordList matches a label regexp that lists values: a|b|c.
var wordList = regexp.MustCompile(`^[a-z0-9_]+(\|[a-z0-9_]+)+$`)

// grafanaVars replaces the dashboard's variables with what Grafana would
// put there, so that a query parses as PromQL.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m", "${__rate_interval}", "5m",
	"$__interval", "1m", "${__interval}", "1m",
	"$__range", "1h", "${__range}", "1h",
	"$instance", ".*", "${instance}", ".*",
	"$pipeline", ".*", "${pipeline}", ".*",
)

// check parses expr and returns a problem for each selector that names a
// metric the consumer does not expose, a label it does not carry, or a
// label value none of its series has.
func check(expr string, have series) (names []string, problems []string) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, []string{fmt.Sprintf("does not parse: %v", err)}
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			problems = append(problems, fmt.Sprintf("selector %s names no metric", vs))
			return nil
		}
		names = append(names, name)
		ls, ok := have[name]
		if !ok {
			ls, ok = external[name]
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("metric %s is not exposed by the consumer", name))
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel {
				continue
			}
			values, known := ls[m.Name]
			if !known && !slices.Contains(scrapeLabels, m.Name) {
				problems = append(problems, fmt.Sprintf("%s has no label %q", name, m.Name))
				continue
			}
			if m.Type == labels.MatchEqual && m.Value != "" && values != nil && !values[m.Value] {
				problems = append(problems, fmt.Sprintf("%s{%s=%q}: no such series (values %v)", name, m.Name, m.Value, slices.Sorted(maps.Keys(values))))
			}
			// A regexp that is a list of words (a|b|c) names values too.
			if m.Type == labels.MatchRegexp && values != nil && wordList.MatchString(m.Value) {
				for _, v := range strings.Split(m.Value, "|") {
					if !values[v] {
						problems = append(problems, fmt.Sprintf("%s{%s=~%q}: no series has %q (values %v)", name, m.Name, m.Value, v, slices.Sorted(maps.Keys(values))))
					}
				}
			}
		}
		return nil
	})
	return names, problems
}

// TestAlertRules: the rules file passes Prometheus's own rule validation
// (PromQL, templates, durations), every alert has a severity and a
// summary, and every metric, label and label value it names is one a
// running consumer exposes.
func TestAlertRules(t *testing.T) {
	have := liveSeries(t)
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(data, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("%s: %v", rulesFile, err)
	}
	if groups == nil || len(groups.Groups) == 0 {
		t.Fatalf("%s: no rule groups", rulesFile)
	}
	alerts := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			what := r.Alert + r.Record
			alerts[r.Alert] = true
			if r.Alert != "" {
				if sev := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, sev) {
					t.Errorf("%s: severity %q; want critical, warning or info", what, sev)
				}
				if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					t.Errorf("%s: want a summary and a description annotation", what)
				}
			}
			_, problems := check(r.Expr, have)
			for _, p := range problems {
				t.Errorf("%s: %s\n\t%s", what, p, r.Expr)
			}
		}
	}
	for _, want := range []string{"OncegateDown", "OncegateNotReady", "OncegateDeadLettersRising", "OncegateUnknownOutcome",
		"OncegateLeasesStuck", "OncegateModelErrors", "OncegateBacklogGrowing", "OncegateTriggerNearMaxAge",
		"OncegateUnroutedTriggers", "OncegateWebhookUnauthorized", "OncegateModelRateLimited"} {
		if !alerts[want] {
			t.Errorf("%s: no alert %s", rulesFile, want)
		}
	}
}

// dashboardQueries returns every PromQL query in the dashboard: the
// panels' targets (with Grafana's variables substituted) and the
// selectors of the variables' label_values queries.
func dashboardQueries(t *testing.T, dash map[string]any) []string {
	t.Helper()
	var out []string
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_]+\)$`)
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				walk(c, k)
			}
		case []any:
			for _, c := range v {
				walk(c, key)
			}
		case string:
			switch key {
			case "expr":
				out = append(out, grafanaVars.Replace(v))
			case "definition":
				m := labelValues.FindStringSubmatch(v)
				if m == nil {
					t.Errorf("variable query %q: want label_values(selector, label)", v)
					return
				}
				out = append(out, grafanaVars.Replace(m[1]))
			}
		}
	}
	walk(dash, "")
	return out
}

func loadDashboard(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return dash
}

// TestDashboard: every query of the dashboard parses as PromQL and names
// only metrics, labels and label values a running consumer exposes, and
// the dashboard shows what an operator looks for first.
func TestDashboard(t *testing.T) {
	have := liveSeries(t)
	dash := loadDashboard(t)
	if dash["uid"] != "oncegate" || dash["title"] == "" {
		t.Errorf("uid %v, title %v; want uid oncegate (docker-compose.yml and docs/operations.md link /d/oncegate)", dash["uid"], dash["title"])
	}
	queries := dashboardQueries(t, dash)
	if len(queries) == 0 {
		t.Fatalf("%s: no queries", dashboardFile)
	}
	used := map[string]bool{}
	for _, q := range queries {
		names, problems := check(q, have)
		for _, n := range names {
			used[n] = true
		}
		for _, p := range problems {
			t.Errorf("%s: %s\n\t%s", dashboardFile, p, q)
		}
	}
	for _, want := range []string{
		"oncegate_build_info", "oncegate_ready", "oncegate_duplicates_total", "oncegate_effects_total",
		"oncegate_effect_seconds_bucket", "oncegate_settle_seconds_bucket", "oncegate_dead_letters_total", "oncegate_pending_leases",
		"oncegate_acks_total", "oncegate_llm_cost_spent_usd_total", "oncegate_llm_tokens_spent_total",
		"oncegate_step_seconds_bucket", "oncegate_llm_upstream_errors_total",
		"oncegate_backlog_pending", "oncegate_backlog_ack_pending", "oncegate_backlog_oldest_age_seconds",
		"oncegate_backlog_max_age_seconds", "oncegate_unrouted_total",
		"oncegate_ingress_requests_total", "oncegate_ingress_request_duration_seconds_bucket",
		"oncegate_llm_rate_limit_wait_seconds_bucket", "oncegate_llm_rate_limited_total",
		"oncegate_proxy_requests_total", "oncegate_proxy_request_seconds_bucket", "oncegate_proxy_cost_usd_total",
		"oncegate_proxy_spend_usd", "oncegate_proxy_spend_limit_usd",
	} {
		if !used[want] {
			t.Errorf("%s: no panel shows %s", dashboardFile, want)
		}
	}

	// Panels: unique ids, a place on the grid, the data source variable.
	ids := map[float64]bool{}
	panels, _ := dash["panels"].([]any)
	for _, p := range panels {
		p := p.(map[string]any)
		id, _ := p["id"].(float64)
		if ids[id] {
			t.Errorf("panel %q: id %v is used twice", p["title"], id)
		}
		ids[id] = true
		if _, ok := p["gridPos"].(map[string]any); !ok {
			t.Errorf("panel %q: no gridPos", p["title"])
		}
		if p["type"] == "row" {
			continue
		}
		if ds, _ := p["datasource"].(map[string]any); ds["uid"] != "${datasource}" {
			t.Errorf("panel %q: data source %v; want the ${datasource} variable", p["title"], p["datasource"])
		}
	}
}

// TestCheckCatchesUnknownNames: the check is not one that passes whatever
// the files say.
func TestCheckCatchesUnknownNames(t *testing.T) {
	have := liveSeries(t)
	for _, q := range []string{
		`rate(oncegate_duplicate_total[5m])`,                                 // a misspelt metric
		`oncegate_dead_letters_total{cause="poison"}`,                        // a label it does not have
		`oncegate_dead_letters_total{reason="unknown_outcom"}`,               // a reason that is never counted
		`sum by (guard) (rate(oncegate_duplicates_total[5m])`,                // does not parse
		`oncegate_effect_seconds`,                                            // a histogram is exposed as _bucket, _sum and _count
		`oncegate_ingress_requests_total{outcome=~"bad_signature|unsigned"}`, // an outcome in a list that is never counted
	} {
		if _, problems := check(q, have); len(problems) == 0 {
			t.Errorf("check(%q) found nothing wrong", q)
		}
	}
	for _, q := range []string{
		`histogram_quantile(0.99, sum by (le) (rate(oncegate_effect_seconds_bucket{pipeline=~".*"}[5m])))`,
		`oncegate_dead_letters_total{reason="unknown_outcome", job="oncegate"}`,
	} {
		if _, problems := check(q, have); len(problems) != 0 {
			t.Errorf("check(%q) = %v; want no problem", q, problems)
		}
	}
}

// compose is the part of docker-compose.yml these tests read.
type compose struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Volumes     []string          `yaml:"volumes"`
		Ports       []string          `yaml:"ports"`
		Environment map[string]string `yaml:"environment"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

func loadCompose(t *testing.T) *compose {
	t.Helper()
	data, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return &c
}

// mounted returns the host file a service bind-mounts at target.
func mounted(t *testing.T, c *compose, service, target string) string {
	t.Helper()
	for _, v := range c.Services[service].Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == target {
			if !strings.HasPrefix(parts[0], "./") {
				t.Errorf("%s: %s is not a bind mount of a repository file", service, v)
				return ""
			}
			p := filepath.Join("..", parts[0])
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s: %s: %v", service, v, err)
			}
			return p
		}
	}
	t.Errorf("%s: nothing is mounted at %s (volumes %q)", service, target, c.Services[service].Volumes)
	return ""
}

// TestComposeNATSVersion: the nats image runs the version of the
// nats-server the tests embed, so that what compose runs is what was
// tested.
func TestComposeNATSVersion(t *testing.T) {
	c := loadCompose(t)
	image := c.Services["nats"].Image
	m := regexp.MustCompile(`^nats:(\d+\.\d+\.\d+)(?:-[a-z0-9]+)?(?:@sha256:[0-9a-f]{64})?$`).FindStringSubmatch(image)
	if m == nil {
		t.Fatalf("nats image %q: want nats:MAJOR.MINOR.PATCH[-variant][@sha256:…]", image)
	}
	if m[1] != server.VERSION {
		t.Errorf("nats image %s; the embedded nats-server is %s: want nats:%s-alpine", image, server.VERSION, server.VERSION)
	}
}

// TestComposeProvisionsRulesAndDashboard: Prometheus loads the rules
// file, and Grafana the dashboard with a Prometheus data source at the
// prometheus service.
func TestComposeProvisionsRulesAndDashboard(t *testing.T) {
	c := loadCompose(t)
	for _, s := range []string{"prometheus", "grafana"} {
		if _, ok := c.Services[s]; !ok {
			t.Fatalf("%s: no %s service", composeFile, s)
		}
		for _, p := range c.Services[s].Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s: port %q; want it on 127.0.0.1 only", s, p)
			}
		}
	}

	// Prometheus: its configuration names the rules file where compose
	// mounts ours.
	promConf := mounted(t, c, "prometheus", "/etc/prometheus/prometheus.yml")
	var pc struct {
		RuleFiles []string `yaml:"rule_files"`
	}
	if data, err := os.ReadFile(promConf); err != nil {
		t.Fatal(err)
	} else if err := yaml.Unmarshal(data, &pc); err != nil {
		t.Fatalf("%s: %v", promConf, err)
	}
	if len(pc.RuleFiles) != 1 {
		t.Fatalf("%s: rule_files %q; want the one rules file", promConf, pc.RuleFiles)
	}
	if got := mounted(t, c, "prometheus", pc.RuleFiles[0]); got != "" && !samePath(got, rulesFile) {
		t.Errorf("prometheus: %s mounts %s; want deploy/%s", pc.RuleFiles[0], got, rulesFile)
	}

	// Grafana: a data source at the prometheus service, and a dashboard
	// provider whose path holds our dashboard.
	var ds struct {
		Datasources []struct {
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, mounted(t, c, "grafana", "/etc/grafana/provisioning/datasources/oncegate.yml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("grafana data sources %+v; want prometheus at http://prometheus:9090", ds.Datasources)
	}
	var dp struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, mounted(t, c, "grafana", "/etc/grafana/provisioning/dashboards/oncegate.yml"), &dp)
	if len(dp.Providers) != 1 || dp.Providers[0].Type != "file" {
		t.Fatalf("grafana dashboard providers %+v; want one file provider", dp.Providers)
	}
	target := dp.Providers[0].Options.Path + "/oncegate.json"
	if got := mounted(t, c, "grafana", target); got != "" && !samePath(got, dashboardFile) {
		t.Errorf("grafana: %s mounts %s; want deploy/%s", target, got, dashboardFile)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	if path == "" {
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// samePath reports whether two paths relative to this directory name the
// same file.
func samePath(a, b string) bool {
	x, err1 := filepath.Abs(a)
	y, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && x == y
}
