package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/oncegate/oncegate/internal/natstest"
)

// TestTracingExportsOTLP: with tracing.otlp_endpoint set (here from the
// environment), "consumer run" sends its spans over OTLP/HTTP, and the
// trace of a trigger continues the traceparent it came with.
func TestTracingExportsOTLP(t *testing.T) {
	var mu sync.Mutex
	spans := map[string]string{} // span name → trace id
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					spans[s.Name] = string(s.TraceId)
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(nil)
	}))
	defer collector.Close()

	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv)
	c := startChild(t, append([]string{"NATS_URL=" + srv.ClientURL(), "ONCEGATE_TRACING_OTLP_ENDPOINT=" + collector.URL}, standinEnv...),
		"run", "-data", filepath.Join(t.TempDir(), "data"), "-metrics", "off")
	m := nats.NewMsg("triggers.webhooks")
	m.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	m.Data = []byte(`{"event":"push","delivery_id":"d1"}`)
	waitFor(t, 30*time.Second, "the trigger stored", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.PublishMsg(ctx, m)
		return err == nil
	})
	waitFor(t, 30*time.Second, "the trigger's effect", func() bool {
		st, err := js.Stream(context.Background(), "ONCEGATE_EFFECTS")
		if err != nil {
			return false
		}
		info, err := st.Info(context.Background())
		return err == nil && info.State.Msgs == 1
	})
	c.stop(t) // the exporter flushes at shutdown
	mu.Lock()
	defer mu.Unlock()
	want := string([]byte{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c})
	for _, name := range []string{"oncegate.trigger webhooks", "oncegate.ledger.claim", "oncegate.effect", "oncegate.settle"} {
		id, ok := spans[name]
		switch {
		case !ok:
			t.Errorf("the collector got no %q span; got %d names: %v; the consumer's log:\n%s", name, len(spans), spans, c.stderr.String())
		case id != want:
			t.Errorf("span %q is in trace %x, want the traceparent's 0af7651916cd43dd8448eb211c80319c", name, id)
		}
	}
}
