package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/natstest"
)

const replicaConfig = `
data_dir: %s
metrics: {listen: ""}
nats: {url: "%s"}
ledger: {store: kv, lease: 2s}
pipelines:
  - name: orders
    subject: triggers.orders
    key: {fields: [/order]}
    effect: {sink: http, url: "%s"}
    ack_wait: 2s
    max_deliver: 3
`

// lockedLog collects log lines from several goroutines.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// redrivenTotal sums oncegate_redriven_total{pipeline,reason} over apps.
func redrivenTotal(t *testing.T, pipeline, reason string, apps ...*app.App) float64 {
	t.Helper()
	var sum float64
	for _, a := range apps {
		mfs, err := a.Metrics.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "oncegate_redriven_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["pipeline"] == pipeline && labels["reason"] == reason {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// TestReplicasShareRedrive: two consumer replicas on one NATS server and
// one KV ledger both serve the admin service (nats micro sees two
// instances of it); a request goes to one of them. A redrive through the
// service is marked where both see it: the same redrive retried on the
// other replica, as a client does after a lost answer, publishes nothing,
// and insisting finds the intent committed. One effect; the redrive is
// counted once and logged with who asked.
func TestReplicasShareRedrive(t *testing.T) {
	srv := natstest.RunServer(t)
	recv := &receiver{broken: true, byKey: map[string]int{}}
	hs := httptest.NewServer(recv)
	defer hs.Close()
	var log lockedLog
	var apps []*app.App
	for i := range 2 {
		cfg, err := config.Parse(fmt.Appendf(nil, replicaConfig, filepath.Join(t.TempDir(), fmt.Sprint("data", i)), srv.ClientURL(), hs.URL), "test")
		if err != nil {
			t.Fatal(err)
		}
		a, err := app.Start(ctx, cfg, app.Options{Logger: slogTo(&log)})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(rctx) }()
		t.Cleanup(func() { cancel(); <-done; a.Close() })
		wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
		if err := a.WaitReady(wctx); err != nil {
			t.Fatal(err)
		}
		wcancel()
		apps = append(apps, a)
	}
	nc, js := natstest.Connect(t, srv)
	b, _ := json.Marshal(map[string]string{"order": "R-9"})
	if _, err := js.Publish(ctx, "triggers.orders", b); err != nil {
		t.Fatal(err)
	}
	var d admin.DeadLetter
	waitFor(t, "the dead letter", func() bool {
		r, err := apps[1].Admin.Dead(ctx, admin.Selection{})
		if err == nil && len(r.Letters) == 1 {
			d = r.Letters[0]
		}
		return d.Seq != 0
	})
	recv.fix()

	// nats micro ls: both instances answer PING.
	inbox := nats.NewInbox()
	pings := make(chan *nats.Msg, 8)
	sub, err := nc.ChanSubscribe(inbox, pings)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	ping, _ := micro.ControlSubject(micro.PingVerb, admin.ServiceName, "")
	if err := nc.PublishRequest(ping, inbox, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		select {
		case m := <-pings:
			var p micro.Ping
			if err := json.Unmarshal(m.Data, &p); err != nil || p.Name != admin.ServiceName {
				t.Errorf("PING answer %d = %s, %v", i, m.Data, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 2 instances answered PING", i)
		}
	}

	client := admin.NewClient(nc, admin.Prefix("", "ONCEGATE"))
	req := admin.RedriveRequest{Selection: admin.Selection{Key: d.Key}, Yes: true, By: alice}
	r, err := client.Redrive(ctx, req)
	if err != nil || len(r.Results) != 1 || r.Results[0].Outcome != admin.OutcomeRedriven {
		t.Fatalf("Redrive through the service = %+v, %v; want redriven", r, err)
	}
	for _, a := range apps { // a retry, wherever it lands
		r, err = a.Admin.Redrive(ctx, req)
		if err != nil || len(r.Results) != 1 || r.Results[0].Outcome != admin.OutcomeAlreadyRedriven {
			t.Errorf("the same redrive again = %+v, %v; want %q", r, err, admin.OutcomeAlreadyRedriven)
		}
	}
	waitFor(t, "the effect", func() bool { n, _ := recv.effects(d.Key); return n == 1 })
	waitFor(t, "every trigger settled", func() bool { n, err := apps[0].Outstanding(ctx); return err == nil && n == 0 })
	req.Again = true
	r, err = client.Redrive(ctx, req)
	if err != nil || len(r.Results) != 1 || r.Results[0].Outcome != admin.OutcomeCommitted {
		t.Errorf("redrive again = %+v, %v; want %q", r, err, admin.OutcomeCommitted)
	}
	if n, all := recv.effects(d.Key); n != 1 || all != 1 {
		t.Errorf("%d effects of the key (%d in all); want 1", n, all)
	}
	if got := redrivenTotal(t, "orders", "permanent_effect", apps...); got != 1 {
		t.Errorf("oncegate_redriven_total = %v over the replicas; want 1", got)
	}
	if l := log.String(); !strings.Contains(l, "msg=redriven") || !strings.Contains(l, `by="alice (test)"`) {
		t.Errorf("the redrive is not logged with who asked:\n%s", l)
	}
}
