package ingress_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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
