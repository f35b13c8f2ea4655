package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ingress"
)

// The demo's webhook sources and their secrets, which it passes to the
// ingress as if they were in the environment.
var demoSecrets = map[string]string{
	"GITHUB_WEBHOOK_SECRET":      "demo-github-secret",
	"ALERTMANAGER_WEBHOOK_TOKEN": "demo-alertmanager-token",
	"STRIPE_WEBHOOK_SECRET":      "whsec_demo_stripe",
}

// demoIngress turns the ingress on, on a free loopback port, with the
// built-in github and alertmanager sources and a stripe source.
func demoIngress(cfg *config.Config) {
	cfg.Ingress.Listen = "127.0.0.1:0"
	cfg.Ingress.Sources = append(cfg.Ingress.Sources, config.Source{
		Name: "stripe", Kind: config.KindStripe, Subject: "triggers.webhooks", SecretEnv: "STRIPE_WEBHOOK_SECRET",
	})
}

func demoGetenv(k string) string {
	if v, ok := demoSecrets[k]; ok {
		return v
	}
	return os.Getenv(k)
}

// ingressTally is what the demo sent through the ingress.
type ingressTally struct {
	requests, retries, pings int
	github, groups, stripe   int
}

// driveIngress posts provider-shaped webhooks to the ingress, signed as
// each provider signs them: GitHub push deliveries and a ping, Alertmanager
// notifications of two alerts each, Stripe events; about a third of them
// are re-sent as the provider retries (same delivery id, re-signed). Every
// request must be answered 200; the triggers stored and the duplicates the
// stream dropped are added to w.
func driveIngress(ctx context.Context, base string, cfg *config.Config, rng *rand.Rand, w *demoWorkload, hooks, alerts int) (ingressTally, error) {
	var t ingressTally
	src := map[string]config.Source{}
	for _, s := range cfg.Ingress.Sources {
		src[s.Name] = s
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	post := func(source, id, event string, body []byte) error {
		s := src[source]
		h, err := ingress.Sign(s, []byte(demoGetenv(s.SecretEnv)), body, time.Now(), id, event)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+ingress.PathPrefix+source, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header = h
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("demo: webhook to %s: %w", source, err)
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("demo: webhook to %s answered %d: %s", source, resp.StatusCode, answer)
		}
		t.requests++
		var a struct{ Stored, Duplicates int }
		if event == "ping" {
			return nil
		}
		if err := json.Unmarshal(answer, &a); err != nil {
			return fmt.Errorf("demo: webhook to %s: answer %q: %w", source, answer, err)
		}
		w.inStream += a.Stored
		w.ingestDups += a.Duplicates
		w.viaIngress += a.Stored + a.Duplicates
		return nil
	}
	// Each delivery is sent once, and retried by its provider a third of
	// the time.
	send := func(source, id, event string, body []byte) error {
		for range 1 + rng.IntN(3)/2 {
			if err := post(source, id, event, body); err != nil {
				return err
			}
		}
		return nil
	}
	before := t.requests

	if err := post("github", fmt.Sprintf("%08x-0000-4000-8000-000000000000", rng.Uint32()), "ping",
		[]byte(`{"zen":"Anything added dilutes everything else.","hook_id":30,"hook":{"type":"Repository","id":30,"events":["push"]}}`)); err != nil {
		return t, err
	}
	t.pings++
	for i := range hooks {
		sha := fmt.Sprintf("%040x", uint64(i+1)*0x9e3779b97f4a7c15)
		body, _ := json.Marshal(map[string]any{
			"ref": "refs/heads/main", "before": fmt.Sprintf("%040x", i), "after": sha,
			"repository": map[string]any{"id": 1296269, "full_name": "octo-org/octo-repo", "default_branch": "main"},
			"pusher":     map[string]any{"name": "octocat", "email": "mona@github.com"},
			"sender":     map[string]any{"login": "octocat", "id": 583231},
			"commits": []any{map[string]any{"id": sha, "message": fmt.Sprintf("Fix flaky test #%d", i),
				"author": map[string]any{"name": "Mona Octocat", "username": "octocat"}, "modified": []string{"README.md"}}},
			"head_commit": map[string]any{"id": sha, "message": fmt.Sprintf("Fix flaky test #%d", i)},
		})
		if err := send("github", fmt.Sprintf("%08x-cc78-11e3-81ab-%012x", i, rng.Uint64()>>16), "push", body); err != nil {
			return t, err
		}
		t.github++
		w.hookKeys++
	}
	for i := range hooks {
		body, _ := json.Marshal(map[string]any{
			"id": fmt.Sprintf("evt_demo%08d", i), "object": "event", "api_version": "2024-06-20", "created": 1764570000 + i,
			"type": "invoice.paid", "livemode": false, "pending_webhooks": 1,
			"data": map[string]any{"object": map[string]any{"id": fmt.Sprintf("in_demo%08d", i), "object": "invoice",
				"amount_paid": 1200 + 10*i, "currency": "eur", "status": "paid"}},
		})
		if err := send("stripe", "", "", body); err != nil {
			return t, err
		}
		t.stripe++
		w.hookKeys++
	}
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for g := range alerts {
		var as []any
		for j := range 2 {
			inst := fmt.Sprintf("web-%d-%d:9100", g, j)
			as = append(as, map[string]any{
				"status": "firing", "fingerprint": fmt.Sprintf("%016x", uint64(g*2+j+1)*0xbf58476d1ce4e5b9),
				"labels":      map[string]string{"alertname": "HighLatency", "instance": inst, "job": "web", "severity": "page"},
				"annotations": map[string]string{"summary": "p99 latency on " + inst + " is 2.4s", "runbook": "https://runbooks.example/highlatency"},
				"startsAt":    t0.Add(time.Duration(g) * time.Minute).Format(time.RFC3339Nano), "endsAt": "0001-01-01T00:00:00Z",
				"generatorURL": "http://prometheus.example:9090/graph?g0.expr=latency",
			})
		}
		body, _ := json.Marshal(map[string]any{
			"version": "4", "groupKey": fmt.Sprintf(`{}:{alertname="HighLatency", group="%d"}`, g), "truncatedAlerts": 0,
			"status": "firing", "receiver": "oncegate", "groupLabels": map[string]string{"alertname": "HighLatency"},
			"commonLabels": map[string]string{"alertname": "HighLatency", "job": "web"}, "commonAnnotations": map[string]string{},
			"externalURL": "http://alertmanager.example:9093", "alerts": as,
		})
		if err := send("alertmanager", "", "", body); err != nil {
			return t, err
		}
		t.groups++
		w.alertKeys += 2
	}
	t.retries = t.requests - before - t.pings - t.github - t.stripe - t.groups
	return t, nil
}
