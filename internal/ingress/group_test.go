package ingress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/ingress"
)

// recordingJS is the real JetStream, noting how many publishes were
// issued when the ingress first waited for a PubAck.
type recordingJS struct {
	jetstream.JetStream
	mu        sync.Mutex
	published int
	waits     []int // published, at each wait for a PubAck
}

func (r *recordingJS) note(publish bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if publish {
		r.published++
	} else {
		r.waits = append(r.waits, r.published)
	}
}

func (r *recordingJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	r.note(true)
	r.note(false)
	return r.JetStream.PublishMsg(ctx, m, opts...)
}

func (r *recordingJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	r.note(true)
	f, err := r.JetStream.PublishMsgAsync(m, opts...)
	if err != nil {
		return nil, err
	}
	return &recordingFuture{f, r}, nil
}

type recordingFuture struct {
	jetstream.PubAckFuture
	r *recordingJS
}

func (f *recordingFuture) Ok() <-chan *jetstream.PubAck {
	f.r.note(false)
	return f.PubAckFuture.Ok()
}

// alertGroup is an Alertmanager notification of n firing alerts.
func alertGroup(n, seq int) []byte {
	alerts := make([]map[string]any, n)
	for i := range alerts {
		alerts[i] = map[string]any{
			"status":      "firing",
			"labels":      map[string]string{"alertname": "DiskAlmostFull", "instance": fmt.Sprintf("db-%d:9100", i), "job": "node", "severity": "page"},
			"annotations": map[string]string{"summary": "Disk /var/lib/postgresql is 93% full"},
			"startsAt":    fmt.Sprintf("2026-11-29T07:%02d:03.118Z", seq%60),
			"endsAt":      "0001-01-01T00:00:00Z",
			"fingerprint": fmt.Sprintf("%08x%08x", seq, i),
		}
	}
	b, _ := json.Marshal(map[string]any{
		"version": "4", "status": "firing", "receiver": "oncegate", "groupKey": `{}/{severity="page"}:{alertname="DiskAlmostFull"}`,
		"groupLabels": map[string]string{"alertname": "DiskAlmostFull"}, "commonLabels": map[string]string{"alertname": "DiskAlmostFull"},
		"externalURL": "http://alertmanager.example:9093", "truncatedAlerts": 0, "alerts": alerts,
	})
	return b
}

// TestGroupPublishedAtOnce: the alerts of an Alertmanager group are all
// published before the ingress waits for the first PubAck, and every one
// of them is in the stream when the 200 comes.
func TestGroupPublishedAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	rec := &recordingJS{JetStream: e.js}
	srv, err := ingress.New(e.options(ingress.Options{JetStream: rec, Getenv: func(k string) string { return secrets[k] }}))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	e.url = hs.URL
	body := alertGroup(10, 1)
	status, _, answer := e.post("alertmanager", e.sign("alertmanager", body, "", ""), body)
	if status != http.StatusOK || !strings.Contains(answer, `"stored":10`) {
		t.Fatalf("a group of 10: %d %s; want 200 with 10 stored", status, answer)
	}
	if n := len(e.messages()); n != 10 {
		t.Fatalf("after the 200 the stream holds %d triggers; want 10", n)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.waits) == 0 || rec.waits[0] != 10 {
		t.Errorf("the ingress first waited for a PubAck after %v publishes; want all 10 published first (waits: %v)", first(rec.waits), rec.waits)
	}
}

func first(xs []int) any {
	if len(xs) == 0 {
		return "no"
	}
	return xs[0]
}
