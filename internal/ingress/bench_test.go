package ingress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/ingress"
)

// BenchmarkHandler compares one request through the ingress's handler with
// one through a bare handler that reads the body and publishes it with the
// same Nats-Msg-Id, waiting for the PubAck: the same JetStream stream, no
// HTTP client, one request at a time.
func BenchmarkHandler(b *testing.B) {
	e := newEnv(b, nil)
	body := fixture(b, "github-push.json")
	raw := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if _, err := e.js.PublishMsg(ctx, &nats.Msg{Subject: "triggers.raw", Data: data,
			Header: nats.Header{nats.MsgIdHdr: {r.Header.Get(ingress.HeaderGitHubDelivery)}}}); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	for _, c := range []struct {
		name string
		h    http.Handler
		path string
	}{{"raw", raw, "/"}, {"ingress", e.srv, "/hooks/github"}} {
		b.Run(c.name, func(b *testing.B) {
			// Past the first 1024 iterations the ids repeat: both handlers
			// then publish duplicates, which the stream acknowledges as such.
			reqs := make([]*http.Request, 0, 1024)
			for i := range cap(reqs) {
				h := e.sign("github", body, fmt.Sprintf("%s-%d-%d", c.name, b.N, i), "push")
				r := httptest.NewRequest(http.MethodPost, c.path, nil)
				r.Header = h
				reqs = append(reqs, r)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := reqs[i%len(reqs)].Clone(context.Background())
				r.Body = io.NopCloser(bytes.NewReader(body))
				w := httptest.NewRecorder()
				c.h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", c.name, w.Code, w.Body)
				}
				i++
			}
		})
	}
}

// BenchmarkGroup compares one Alertmanager notification of 10 alerts
// through the ingress's handler with one through a bare handler that
// decodes it and publishes each alert at once, waiting for every PubAck:
// the same stream, the same number of triggers.
func BenchmarkGroup(b *testing.B) {
	e := newEnv(b, nil)
	raw := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n struct {
			Alerts []json.RawMessage `json:"alerts"`
		}
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fs := make([]jetstream.PubAckFuture, 0, len(n.Alerts))
		for _, a := range n.Alerts {
			var id struct{ Fingerprint, StartsAt, Status string }
			json.Unmarshal(a, &id)
			f, err := e.js.PublishMsgAsync(&nats.Msg{Subject: "triggers.raw", Data: a,
				Header: nats.Header{nats.MsgIdHdr: {id.Fingerprint + "/" + id.StartsAt + "/" + id.Status}}})
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			fs = append(fs, f)
		}
		for _, f := range fs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	})
	for _, c := range []struct {
		name string
		h    http.Handler
		path string
	}{{"raw", raw, "/"}, {"ingress", e.srv, "/hooks/alertmanager"}} {
		b.Run(c.name, func(b *testing.B) {
			bodies := make([][]byte, 256)
			for i := range bodies {
				bodies[i] = alertGroup(10, i+1000*len(c.name))
			}
			h := e.sign("alertmanager", bodies[0], "", "")
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, c.path, bytes.NewReader(bodies[i%len(bodies)]))
				r.Header = h
				w := httptest.NewRecorder()
				c.h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", c.name, w.Code, w.Body)
				}
				i++
			}
		})
	}
}
