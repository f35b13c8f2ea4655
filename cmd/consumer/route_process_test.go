package main

import (
	"context"
	"encoding/json"
	"errors"
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

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/natstest"
)

// routeConfig routes orders of at least a threshold amount to effects.big,
// the others to effects.small, each with an audit call naming the route.
const routeConfig = `
data_dir: %s
metrics: {listen: ""}
log: {level: debug, format: text}
ledger: {lease: 2s}
stream: {duplicates: 30m}
pipelines:
  - name: orders
    subject: triggers.orders
    key: {fields: [/order]}
    effects:
      big: {sink: jetstream, subject: effects.big}
      small: {sink: jetstream, subject: effects.small}
      audit: {sink: http, url: "%s", body: '{"order":{{quote .trigger.order}},"route":{{quote .route}}}'}
    routes:
      - {name: big, when: 'trigger.amount >= %d', effects: [big, audit]}
      - {name: small, effects: [small, audit]}
    ack_wait: 1s
    max_deliver: 50
    concurrency: 1
`

// audit records each order's audit calls by Idempotency-Key, replaying a
// key's first answer as a provider that honours the key does.
type audit struct {
	mu     sync.Mutex
	routes map[string]string // key → route of the first call
	orders map[string]int    // order → distinct keys
}

func (a *audit) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct{ Order, Route string }
	b, _ := io.ReadAll(r.Body)
	json.Unmarshal(b, &body)
	key := r.Header.Get("Idempotency-Key")
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.routes[key]; !ok {
		a.routes[key] = body.Route
		a.orders[body.Order]++
	}
	w.Write([]byte(`{"ok":true}`))
}

// TestRouteSurvivesKill kills the consumer right after it recorded the
// route of the first order (ONCEGATE_CRASH_AT=after-route:1), before any
// effect, and restarts it with a configuration under which that order
// would take the other route: the redelivery takes the route recorded,
// and every order gets exactly one effect, on one route.
func TestRouteSurvivesKill(t *testing.T) {
	consumerBinary(t)
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv)
	au := &audit{routes: map[string]string{}, orders: map[string]int{}}
	hs := httptest.NewServer(au)
	t.Cleanup(hs.Close)
	dir := t.TempDir()
	write := func(threshold int) string {
		f := filepath.Join(dir, fmt.Sprintf("oncegate-%d.yaml", threshold))
		if err := os.WriteFile(f, []byte(fmt.Sprintf(routeConfig, filepath.Join(dir, "data"), hs.URL, threshold)), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	// Every order is big under the first configuration, small under the
	// second.
	first := startChild(t, []string{"ONCEGATE_CRASH_AT=after-route:1"}, "run", "-config", write(100), "-nats-url", srv.ClientURL())
	waitFor(t, 20*time.Second, "the durable consumer", func() bool {
		_, err := js.Consumer(context.Background(), "ONCEGATE", consumer.Durable("orders"))
		return err == nil
	})
	const n = 6
	for i := range n {
		publishJSON(t, js, "triggers.orders", map[string]any{"order": fmt.Sprintf("O-%d", i), "amount": 500})
	}
	select {
	case err := <-first.done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL || !strings.Contains(first.stderr.String(), "SIGKILL at after-route") {
			t.Fatalf("first consumer ended with %v; want SIGKILL at after-route; stderr:\n%s", err, first.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the consumer did not reach after-route; stderr:\n%s", first.stderr.String())
	}
	if c := streamCount(t, js, "ONCEGATE_EFFECTS"); c != 0 {
		t.Fatalf("%d effects before the restart; want none (killed after the route decision, before the effects)", c)
	}

	second := startChild(t, nil, "run", "-config", write(1000), "-nats-url", srv.ClientURL())
	waitFor(t, 30*time.Second, "every order settled", func() bool { return settledAll(t, js, "orders") })
	second.stop(t)

	big := streamSubject(t, js, "ONCEGATE_EFFECTS", "effects.big")
	small := streamSubject(t, js, "ONCEGATE_EFFECTS", "effects.small")
	if len(big) != 1 || len(small) != n-1 {
		t.Fatalf("effects.big holds %d, effects.small %d; want 1 (the order whose route was recorded before the kill) and %d", len(big), len(small), n-1)
	}
	seen := map[string]int{}
	for _, m := range append(big, small...) {
		var o struct{ Order string }
		json.Unmarshal(m.Data(), &o)
		seen[o.Order]++
	}
	au.mu.Lock()
	defer au.mu.Unlock()
	bigRoutes := 0
	for _, r := range au.routes {
		if r == "big" {
			bigRoutes++
		}
	}
	for i := range n {
		o := fmt.Sprintf("O-%d", i)
		if seen[o] != 1 || au.orders[o] != 1 {
			t.Errorf("order %s: %d effects, %d audit keys; want 1 and 1", o, seen[o], au.orders[o])
		}
	}
	if bigRoutes != 1 {
		t.Errorf("%d audits of the big route; want 1", bigRoutes)
	}
}
