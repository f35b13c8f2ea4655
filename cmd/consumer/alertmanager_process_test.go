package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ingress"
	"github.com/oncegate/oncegate/internal/receiver"
	"github.com/oncegate/oncegate/internal/standin"
)

// The Alertmanager recipe behind a real Alertmanager HA pair: two
// clustered processes of Debian's prometheus-alertmanager (0.25), which CI
// installs, receiving alerts as Prometheus posts them (to both), and
// notifying the consumer's ingress with the recipe's webhook receiver.

var amAlerts = flag.Int("alertmanager.alerts", 9, "alerts in TestRecipeRealAlertmanager (a third of them info); more for a longer run")

// alertmanagerBinary returns the Alertmanager binary, or skips the test.
func alertmanagerBinary(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"prometheus-alertmanager", "alertmanager"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("Alertmanager is not installed (Debian's prometheus-alertmanager; .ci/run installs it): the real-Alertmanager test is skipped")
	return ""
}

// alertmanagerPeer is one process of the HA pair.
type alertmanagerPeer struct {
	api string // http://127.0.0.1:port
	cmd *exec.Cmd
	log *lockedBuffer
}

// startAlertmanagers starts two clustered Alertmanagers that notify url
// with bearer token (from a credentials file) and send resolves.
func startAlertmanagers(t *testing.T, bin, url, token string) []*alertmanagerPeer {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "oncegate-token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, `
route:
  receiver: oncegate
  group_by: [alertname]
  group_wait: 1s
  group_interval: 2s
  repeat_interval: 1h
receivers:
  - name: oncegate
    webhook_configs:
      - url: %s
        send_resolved: true
        http_config:
          authorization:
            credentials_file: %s
`, url, tokenFile), 0o600); err != nil {
		t.Fatal(err)
	}
	web := []int{freePort(t), freePort(t)}
	cluster := []int{freePort(t), freePort(t)}
	var peers []*alertmanagerPeer
	for i := range 2 {
		p := &alertmanagerPeer{api: fmt.Sprintf("http://127.0.0.1:%d", web[i]), log: &lockedBuffer{}}
		p.cmd = exec.Command(bin,
			"--config.file="+conf,
			"--storage.path="+filepath.Join(dir, fmt.Sprint("data", i)),
			fmt.Sprintf("--web.listen-address=127.0.0.1:%d", web[i]),
			fmt.Sprintf("--cluster.listen-address=127.0.0.1:%d", cluster[i]),
			fmt.Sprintf("--cluster.peer=127.0.0.1:%d", cluster[1-i]),
			"--cluster.peer-timeout=1s", "--cluster.settle-timeout=2s", "--cluster.gossip-interval=100ms",
			"--cluster.pushpull-interval=2s", "--log.level=debug",
		)
		p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				p.cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("alertmanager %d:\n%s", i, tail(p.log.String(), 4000))
			}
		})
		peers = append(peers, p)
	}
	waitFor(t, 30*time.Second, "both Alertmanagers ready and clustered", func() bool {
		for _, p := range peers {
			resp, err := http.Get(p.api + "/api/v2/status")
			if err != nil {
				return false
			}
			var st struct {
				Cluster struct {
					Status string
					Peers  []any
				}
			}
			json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if st.Cluster.Status != "ready" || len(st.Cluster.Peers) != 2 {
				return false
			}
		}
		return true
	})
	return peers
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// promAlert is an alert as Prometheus posts it to /api/v2/alerts.
type promAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL"`
}

// postAlerts posts alerts to every Alertmanager, as Prometheus does.
func postAlerts(t *testing.T, peers []*alertmanagerPeer, alerts []promAlert) {
	t.Helper()
	b, _ := json.Marshal(alerts)
	for _, p := range peers {
		resp, err := http.Post(p.api+"/api/v2/alerts", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /api/v2/alerts answered %d: %s", resp.StatusCode, body)
		}
	}
}

// pageKeys records the dedup_key of every PagerDuty event tried, and
// forwards it.
type pageKeys struct {
	next http.Handler
	mu   sync.Mutex
	keys map[string]bool
}

func (p *pageKeys) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var ev struct {
		DedupKey string `json:"dedup_key"`
	}
	if json.Unmarshal(body, &ev) == nil && ev.DedupKey != "" {
		p.mu.Lock()
		if p.keys == nil {
			p.keys = map[string]bool{}
		}
		p.keys[ev.DedupKey] = true
		p.mu.Unlock()
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	p.next.ServeHTTP(w, r)
}

// count returns how many alerts' pages were tried.
func (p *pageKeys) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.keys)
}

// hookCounter counts the notifications Alertmanager sent to the ingress,
// and forwards them.
type hookCounter struct {
	next  http.Handler
	mu    sync.Mutex
	posts int
	slow  time.Duration // how long the ingress seems to take to answer
}

func (h *hookCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.posts++
	slow := h.slow
	h.mu.Unlock()
	// A slow answer keeps the first Alertmanager from recording its
	// notification, and telling its peer, before the peer's turn comes
	// (--cluster.peer-timeout): both notify, as an HA pair does when its
	// gossip lags.
	time.Sleep(slow)
	h.next.ServeHTTP(w, r)
}

// TestRecipeRealAlertmanager runs the Alertmanager recipe behind a real
// Alertmanager HA pair, with PagerDuty down (500) when the alerts fire and
// the consumer killed (SIGKILL) while the pages fail, then restarted: one
// model call per alert, one page (with the triage's severity) or one Slack
// message per firing, every HA and repeat duplicate dropped, each resolve
// where its firing went (one PagerDuty resolve per page, one Slack note
// per Slack message), no page after its resolve, every incident closed.
// The receivers check PagerDuty's and Slack's request schemas. The delay
// of the pages after the outage is reported. -alertmanager.alerts sets the
// size of the run.
func TestRecipeRealAlertmanager(t *testing.T) {
	amBin := alertmanagerBinary(t)
	consumerBinary(t) // startChild runs it
	const token, routingKey, slackPath = "am-t0ken-real", "Rreal0123456789abcdef0123456789a", "/services/TREAL/BREAL/real0s3cret0path0123"
	pd := receiver.NewPagerDuty(routingKey)
	slack := receiver.NewSlack(slackPath)
	tried := &pageKeys{next: pd}
	pdURL, slackURL := serve(t, tried), serve(t, slack)
	model, err := standin.New(standin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	modelURL, stopModel, err := model.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopModel() })

	// The consumer's ingress, behind a counting proxy on a fixed port, so
	// that Alertmanager keeps one URL across the consumer's restart.
	ingressPort := freePort(t)
	proxy := &hookCounter{next: &httputilProxy{target: fmt.Sprintf("http://127.0.0.1:%d", ingressPort)}, slow: 1500 * time.Millisecond}
	hooks := httptest.NewServer(proxy)
	t.Cleanup(hooks.Close)

	dataDir := t.TempDir()
	env := []string{
		"ALERTMANAGER_WEBHOOK_TOKEN=" + token, "PAGERDUTY_ROUTING_KEY=" + routingKey, "SLACK_WEBHOOK_URL=" + slackURL + slackPath,
		"ONCEGATE_PIPELINES_ALERTS_EFFECTS_PAGERDUTY_URL=" + pdURL + "/v2/enqueue",
		"ONCEGATE_LLM_BASE_URL=" + modelURL, "OPENAI_API_KEY=sk-test",
		// A killed process's work comes back within seconds, not the
		// defaults' 30s, so that the test stays short.
		"ONCEGATE_PIPELINES_ALERTS_ACK_WAIT=2s", "ONCEGATE_LEDGER_LEASE=2s",
	}
	args := []string{"run", "-config", "../../examples/recipes/alertmanager.yaml", "-data", dataDir,
		"-listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "-metrics", "off", "-ingress", fmt.Sprintf("127.0.0.1:%d", ingressPort)}
	ready := func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", ingressPort, ingress.PathPrefix+"alertmanager"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}
	oncegate := startChild(t, env, args...)
	waitFor(t, 30*time.Second, "the consumer's ingress", ready)

	peers := startAlertmanagers(t, amBin, hooks.URL+ingress.PathPrefix+"alertmanager", token)

	n := *amAlerts
	start := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	alerts := make([]promAlert, n)
	wantModel := 0
	for i := range alerts {
		sev := []string{"page", "warning", "info"}[i%3]
		if sev != "info" {
			wantModel++
		}
		alerts[i] = promAlert{
			Labels:       map[string]string{"alertname": "DiskAlmostFull", "instance": fmt.Sprintf("db-%d:9100", i), "severity": sev},
			Annotations:  map[string]string{"summary": fmt.Sprintf("Disk %d is 93%% full", i), "runbook": "https://runbooks.example/disk"},
			StartsAt:     start,
			EndsAt:       time.Now().Add(time.Hour).UTC(),
			GeneratorURL: "http://prometheus.example:9090/graph",
		}
	}

	// PagerDuty is down when the alerts fire; the consumer is killed once
	// every alert's triage has reached its effect (a page tried, or a Slack
	// message sent), while the pages fail. The model answering is not
	// enough: an answer killed on its way to the cache is asked for again,
	// as it must be.
	pd.FailFor(time.Hour, http.StatusInternalServerError)
	postAlerts(t, peers, alerts)
	waitFor(t, 60*time.Second, "every firing triaged", func() bool { return int(model.Stats().Completions) >= wantModel })
	waitFor(t, 60*time.Second, "every triage at its effect, the pages failing", func() bool {
		return pd.Faulted() > 0 && tried.count()+len(slack.Messages()) >= wantModel
	})
	oncegate.cmd.Process.Kill()
	<-oncegate.done
	postAlerts(t, peers, alerts) // Prometheus's resend, while the consumer is down
	oncegate = startChild(t, env, args...)
	waitFor(t, 30*time.Second, "the consumer's ingress again", ready)
	pd.FailFor(0, 0)
	back := time.Now()

	waitFor(t, 90*time.Second, "every firing at its receiver", func() bool {
		return len(pd.Events())+len(slack.Messages()) >= wantModel
	})
	pages := pd.Events()
	var lastPage time.Time
	for _, e := range pages {
		if e.At.After(lastPage) {
			lastPage = e.At
		}
	}
	firingsAtSlack := len(slack.Messages())

	// Resolve them all, as Prometheus does: endsAt now.
	for i := range alerts {
		alerts[i].EndsAt = time.Now().UTC()
	}
	postAlerts(t, peers, alerts)
	waitFor(t, 90*time.Second, "every resolve where its firing went", func() bool {
		st := pd.Stats()
		return st.Resolves >= st.Triggers && len(slack.Messages()) >= 2*firingsAtSlack
	})
	// Give a stray message (a duplicate, a resolve to the wrong receiver)
	// a moment to show before counting: Alertmanager's peer and group
	// intervals.
	time.Sleep(3 * time.Second)
	oncegate.stop(t)

	st := pd.Stats()
	t.Logf("%d alerts (%d info) through 2 clustered Alertmanagers: %d notifications posted to the ingress; %d model calls; PagerDuty %+v; Slack %d messages; the last page arrived %v after PagerDuty was back (the consumer killed meanwhile and restarted)",
		n, n-wantModel, proxy.posts, model.Stats().Completions, st, len(slack.Messages()), lastPage.Sub(back).Round(10*time.Millisecond))
	if got := int(model.Stats().Completions); got != wantModel {
		t.Errorf("model calls %d; want %d, one per alert not info", got, wantModel)
	}
	if st.Triggers+firingsAtSlack != wantModel || st.Opened != st.Triggers {
		t.Errorf("%d pages and %d Slack messages for %d alerts; want one message per alert, at the receiver its triage chose", st.Triggers, firingsAtSlack, wantModel)
	}
	for _, e := range pages {
		if e.Severity != "critical" {
			t.Errorf("page %s severity %q; want critical, the triage's", e.DedupKey, e.Severity)
		}
	}
	notes := 0
	for _, m := range slack.Messages() {
		if strings.Contains(m.Text, "Resolved:") {
			notes++
		}
	}
	if st.Resolves != st.Triggers || st.Resolved != st.Opened || st.Open != 0 || st.Dropped != 0 || st.AfterResolve != 0 || st.Refused != 0 {
		t.Errorf("PagerDuty %+v; want one resolve per page closing it, no resolve of an alert never paged, no page after its resolve, none refused", st)
	}
	if notes != firingsAtSlack || len(slack.Refused()) != 0 {
		t.Errorf("%d Slack resolve notes for %d Slack firings, refused %v; want one each, none refused", notes, firingsAtSlack, slack.Refused())
	}
}

// httputilProxy forwards requests to target; a request that finds it
// down is answered 503, as a load balancer with no backend would.
type httputilProxy struct{ target string }

func (p *httputilProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, "the consumer is down", http.StatusServiceUnavailable)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}
