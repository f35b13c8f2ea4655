package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/internal/outcome"
)

// Recovery after a real consumer process is killed: a crash on the last
// delivery, a key reused after a crash, and a redo that would land past
// the effect stream's duplicate window.

// keyedTarget is an HTTP effect target with the Idempotency-Key semantics
// of the IETF draft: the same key with the same body is a replay, with
// another body a 422. Until opened, it answers 503 to the first failFirst
// calls and then holds every call until release is closed.
type keyedTarget struct {
	mu        sync.Mutex
	calls     int
	failFirst int
	hold      bool
	held      chan struct{} // a call is being held
	release   chan struct{}
	bodies    map[string]string
}

func newKeyedTarget() *keyedTarget {
	return &keyedTarget{held: make(chan struct{}, 16), release: make(chan struct{}), bodies: map[string]string{}}
}

func (k *keyedTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	k.mu.Lock()
	k.calls++
	fail, hold := k.calls <= k.failFirst, k.hold && k.calls > k.failFirst
	k.mu.Unlock()
	switch {
	case fail:
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case hold:
		k.held <- struct{}{}
		<-k.release
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if prev, ok := k.bodies[key]; ok {
		if prev != string(b) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		w.Header().Set("Idempotent-Replayed", "true")
	}
	k.bodies[key] = string(b)
	fmt.Fprintf(w, `{"id":"tkt_%d"}`, len(k.bodies))
}

func (k *keyedTarget) open() {
	k.mu.Lock()
	k.hold, k.failFirst = false, 0
	k.mu.Unlock()
}

func (k *keyedTarget) effects() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.bodies)
}

const ticketsConfig = `
data_dir: %s
metrics: {listen: ""}
log: {level: debug, format: text}
ledger: {lease: 2s}
pipelines:
  - name: tickets
    subject: triggers.tickets
    key: {fields: [/ticket]}
    effect: {sink: http, url: "%s"}
    ack_wait: %s
    max_deliver: %d
`

func writeConfig(t *testing.T, format string, args ...any) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "oncegate.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, format, append([]any{filepath.Join(dir, "data")}, args...)...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func waitDurable(t *testing.T, js jetstream.JetStream, c *child, pipeline string) {
	t.Helper()
	waitFor(t, 30*time.Second, "the durable consumer of "+pipeline, func() bool {
		_, err := js.Consumer(context.Background(), "ONCEGATE", consumer.Durable(pipeline))
		return err == nil
	})
	waitFor(t, 30*time.Second, "the consumer consuming", func() bool { return strings.Contains(c.stderr.String(), "msg=consuming") })
}

func consumerInfo(t *testing.T, js jetstream.JetStream, pipeline string) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := js.Consumer(context.Background(), "ONCEGATE", consumer.Durable(pipeline))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func kill(t *testing.T, c *child) {
	t.Helper()
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// TestLastDeliveryCrash: a trigger fails on its first delivery,
// and its process dies during its last one, after a duplicate of it was
// acked because the work was held. The server would not deliver it again
// and nothing dead-lettered it: the work vanished. Oncegate now counts the
// tries itself (the server's consumer has no limit), and a duplicate of
// held work waits instead of being acked: both come back, and the intent
// is dead-lettered as exhausted.
func TestLastDeliveryCrash(t *testing.T) {
	consumerBinary(t)
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv)
	target := newKeyedTarget()
	target.failFirst, target.hold = 5, true // delivery 1: five attempts, all 503; delivery 2 hangs
	hs := httptest.NewServer(target)
	defer hs.Close()
	defer close(target.release)
	cfg := writeConfig(t, ticketsConfig, hs.URL, "1s", 2)
	args := []string{"run", "-config", cfg, "-nats-url", srv.ClientURL()}

	first := startChild(t, nil, args...)
	waitDurable(t, js, first, "tickets")
	publishJSON(t, js, "triggers.tickets", map[string]any{"ticket": "T-1", "delivery": 1})
	select {
	case <-target.held: // the last delivery holds the work
	case <-time.After(30 * time.Second):
		t.Fatalf("the last delivery never reached the target; stderr:\n%s", first.stderr.String())
	}
	publishJSON(t, js, "triggers.tickets", map[string]any{"ticket": "T-1", "delivery": 2})
	waitFor(t, 20*time.Second, "the duplicate delivered and waiting while the work is held", func() bool {
		info := consumerInfo(t, js, "tickets")
		return info.NumPending == 0 && info.NumAckPending == 2 && info.Delivered.Consumer >= 3
	})
	kill(t, first)
	target.open()

	second := startChild(t, nil, args...)
	waitDurable(t, js, second, "tickets")
	waitFor(t, 30*time.Second, "the intent done or dead-lettered", func() bool {
		return target.effects()+int(streamCount(t, js, "ONCEGATE_DEAD")) >= 1
	})
	second.stop(t)
	if n := target.effects(); n > 1 {
		t.Errorf("%d effects; want at most one", n)
	}
	if target.effects() == 0 {
		var reasons []string
		for _, d := range streamSubject(t, js, "ONCEGATE_DEAD", "oncegate.dead.tickets") {
			reasons = append(reasons, d.Headers().Get(consumer.HeaderReason))
		}
		if !slices.Contains(reasons, string(outcome.ReasonExhausted)) {
			t.Errorf("dead letter reasons %v; want one %s", reasons, outcome.ReasonExhausted)
		}
	}
}

// TestKeyReusedAfterCrash: the process dies after the effect and
// before the commit; a reworded duplicate then sends its own body under
// the key, and the target answers 422 (key used with another body). That
// answer means the effect exists: the intent is committed, and neither
// trigger is dead-lettered (a person replaying the dead letters would
// have done the effect twice).
func TestKeyReusedAfterCrash(t *testing.T) {
	consumerBinary(t)
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv)
	target := newKeyedTarget()
	hs := httptest.NewServer(target)
	defer hs.Close()
	defer close(target.release)
	cfg := writeConfig(t, ticketsConfig, hs.URL, "5s", 5)
	args := []string{"run", "-config", cfg, "-nats-url", srv.ClientURL()}

	first := startChild(t, []string{"ONCEGATE_CRASH_AT=after-effect:1"}, args...)
	waitDurable(t, js, first, "tickets")
	publishJSON(t, js, "triggers.tickets", map[string]any{"ticket": "T-1", "title": "Disk full on db-1"})
	select {
	case <-first.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the consumer did not crash after the effect; stderr:\n%s", first.stderr.String())
	}
	// The reworded duplicate comes in while the first trigger waits out
	// its ack wait: it reaches the target first.
	publishJSON(t, js, "triggers.tickets", map[string]any{"ticket": "T-1", "title": "db-1: disk is full"})
	second := startChild(t, nil, args...)
	waitDurable(t, js, second, "tickets")
	waitFor(t, 30*time.Second, "both triggers settled", func() bool { return settledAll(t, js, "tickets") })
	second.stop(t)
	if n := streamCount(t, js, "ONCEGATE_DEAD"); n != 0 {
		for _, m := range streamSubject(t, js, "ONCEGATE_DEAD", "oncegate.dead.tickets") {
			t.Logf("dead letter: %s: %s", m.Headers().Get(consumer.HeaderReason), m.Headers().Get(consumer.HeaderDetail))
		}
		t.Errorf("%d dead letters; want none: the effect exists", n)
	}
	if n := target.effects(); n != 1 {
		t.Errorf("%d effects at the target; want 1", n)
	}
}

const hooksConfig = `
data_dir: %s
metrics: {listen: ""}
log: {level: debug, format: text}
ledger: {lease: 1s}
stream: {duplicates: 2s}
pipelines:
  - name: hooks
    subject: triggers.hooks
    key: {fields: [/hook]}
    effect: {sink: jetstream, subject: effects.hooks}
    ack_wait: 3s
    max_deliver: 3
`

// TestRedoPastDuplicateWindow: a process dies after publishing an
// effect and before committing it; the redelivery, paced by the ack wait,
// redoes the effect after the effect stream's duplicate window has passed,
// and the stream keeps both. Such a configuration (a redelivery horizon
// longer than the duplicate window) is now refused at start.
func TestRedoPastDuplicateWindow(t *testing.T) {
	consumerBinary(t)
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv)
	cfg := writeConfig(t, hooksConfig)
	args := []string{"run", "-config", cfg, "-nats-url", srv.ClientURL()}

	first := startChild(t, []string{"ONCEGATE_CRASH_AT=after-effect:1"}, args...)
	started := make(chan struct{})
	go func() {
		for !strings.Contains(first.stderr.String(), "msg=consuming") {
			select {
			case <-first.done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		close(started)
	}()
	select {
	case err := <-first.done:
		// Refused: the configuration cannot keep the promise.
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !strings.Contains(first.stderr.String(), "duplicate window") {
			t.Fatalf("consumer ended with %v; want a refusal naming the duplicate window; stderr:\n%s", err, first.stderr.String())
		}
		return
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatalf("the consumer neither started nor refused; stderr:\n%s", first.stderr.String())
	}
	publishJSON(t, js, "triggers.hooks", map[string]any{"hook": "H-1"})
	<-first.done
	second := startChild(t, nil, args...)
	waitFor(t, 30*time.Second, "the hook settled", func() bool { return settledAll(t, js, "hooks") })
	second.stop(t)
	msgs := streamSubject(t, js, "ONCEGATE_EFFECTS", "effects.hooks")
	keys := map[string]int{}
	for _, m := range msgs {
		keys[m.Headers().Get(nats.MsgIdHdr)]++
	}
	for k, n := range keys {
		if n > 1 {
			t.Errorf("key %s: %d effects; want 1 (the redo landed past the duplicate window)", k, n)
		}
	}
}
