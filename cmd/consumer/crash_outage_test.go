package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/faults"
	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/internal/outcome"
)

// A real consumer process killed around a ledger outage, and by a poison
// trigger: the redo past the duplicate window is refused, and the kills a
// poison causes are bounded by max_deliver.

const outageConfig = `
data_dir: %s
metrics: {listen: ""}
log: {level: debug, format: text}
ledger: {lease: 1s}
stream: {duplicates: 6s}
pipelines:
  - name: hooks
    subject: triggers.hooks
    key: {fields: [/hook]}
    effect: {sink: jetstream, subject: effects.hooks}
    ack_wait: 1s
    max_deliver: 3
`

// TestOutagePastDuplicateWindow: the process dies after the
// effect's PubAck and before the commit, and comes back after longer than
// the effect stream's duplicate window (a crash-looping pod's back-off).
// The claim was volatile, kept in memory only, so the redelivery found the
// key new and published the effect again, past the window: two effects, no
// dead letter. The claim now survives the process (written, not synced):
// the redelivery takes it over at once, sees that it was begun longer ago
// than the window, and dead-letters it unknown_outcome instead of redoing
// it.
func TestOutagePastDuplicateWindow(t *testing.T) {
	consumerBinary(t)
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv)
	cfg := writeConfig(t, outageConfig)
	args := []string{"run", "-config", cfg, "-nats-url", srv.ClientURL()}

	first := startChild(t, []string{"ONCEGATE_CRASH_AT=after-effect:1"}, args...)
	waitDurable(t, js, first, "hooks")
	publishJSON(t, js, "triggers.hooks", map[string]any{"hook": "H-1"})
	select {
	case <-first.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the consumer did not die after the effect; stderr:\n%s", first.stderr.String())
	}
	effects := streamSubject(t, js, "ONCEGATE_EFFECTS", "effects.hooks")
	if len(effects) != 1 {
		t.Fatalf("%d effects before the restart; want 1", len(effects))
	}
	meta, err := effects[0].Metadata()
	if err != nil {
		t.Fatal(err)
	}
	// The outage: until the effect stream would no longer drop a repeat.
	waitFor(t, 30*time.Second, "the effect older than the duplicate window", func() bool {
		return time.Since(meta.Timestamp) > 6*time.Second+500*time.Millisecond
	})

	second := startChild(t, nil, args...)
	waitDurable(t, js, second, "hooks")
	waitFor(t, 30*time.Second, "the hook settled", func() bool { return settledAll(t, js, "hooks") })
	second.stop(t)
	if n := len(streamSubject(t, js, "ONCEGATE_EFFECTS", "effects.hooks")); n != 1 {
		t.Errorf("%d effects; want 1 (the redo landed past the duplicate window)", n)
	}
	var reasons []string
	for _, d := range streamSubject(t, js, "ONCEGATE_DEAD", "oncegate.dead.hooks") {
		reasons = append(reasons, d.Headers().Get(consumer.HeaderReason))
	}
	if len(reasons) != 1 || reasons[0] != string(outcome.ReasonUnknownOutcome) {
		t.Errorf("dead letters %v; want one %s", reasons, outcome.ReasonUnknownOutcome)
	}
}

const poisonConfig = `
data_dir: %s
metrics: {listen: ""}
log: {level: debug, format: text}
ledger: {lease: 2s}
pipelines:
  - name: tickets
    subject: triggers.tickets
    key: {fields: [/ticket]}
    effect: {sink: http, url: "%s"}
    ack_wait: 2s
    max_deliver: 2
  - name: orders
    subject: triggers.orders
    key: {fields: [/order]}
    effect: {sink: http, url: "%[2]s"}
    ack_wait: 2s
    max_deliver: 5
`

// TestPoisonKillIsBounded: a trigger whose work kills its
// process (here SIGKILL, as an out-of-memory kill would) with max_deliver
// 2. Its claim was volatile: the record died with the process, its
// attempts started again at 1 on every restart, and the server, which
// delivers without limit, brought it back for ever: a crash loop that took
// every pipeline of the process down with it. The claim now survives the
// process, the takeover counts the try, and after max_deliver crashes the
// trigger is dead-lettered exhausted; the process stays up and the other
// pipeline's triggers go through. (A trigger of the poison's own pipeline
// in flight at both crashes would be exhausted too: its tries died with
// the process as well.)
func TestPoisonKillIsBounded(t *testing.T) {
	consumerBinary(t)
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv)
	target := newKeyedTarget()
	hs := httptest.NewServer(target)
	defer hs.Close()
	defer close(target.release)
	cfg := writeConfig(t, poisonConfig, hs.URL)
	args := []string{"run", "-config", cfg, "-nats-url", srv.ClientURL()}

	first := startChild(t, nil, args...)
	waitDurable(t, js, first, "tickets")
	waitDurable(t, js, first, "orders")
	poison := nats.NewMsg("triggers.tickets")
	poison.Data = []byte(`{"ticket":"T-poison"}`)
	poison.Header.Set(faults.HeaderFault, "kill")
	if _, err := js.PublishMsg(context.Background(), poison); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		publishJSON(t, js, "triggers.orders", map[string]any{"order": fmt.Sprintf("O-%d", i)})
	}
	// A supervisor: restart the process each time it dies, as a pod's
	// restart policy would, up to a bound that a crash loop exceeds.
	const maxRestarts = 6
	crashes := 0
	cur := first
	deadline := time.Now().Add(90 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("not settled after %d crashes; stderr:\n%s", crashes, cur.stderr.String())
		}
		select {
		case <-cur.done:
			if !strings.Contains(cur.stderr.String(), "SIGKILL by poison trigger") {
				t.Fatalf("the consumer died, not by the poison; stderr:\n%s", cur.stderr.String())
			}
			crashes++
			if crashes > maxRestarts {
				t.Fatalf("%d crashes: a crash loop (max_deliver 2)", crashes)
			}
			cur = startChild(t, nil, args...)
			continue
		case <-time.After(100 * time.Millisecond):
		}
		if settledAll(t, js, "tickets", "orders") && streamCount(t, js, "ONCEGATE_DEAD") == 1 && target.effects() == 3 {
			break
		}
	}
	cur.stop(t)
	if crashes > 2 {
		t.Errorf("%d crashes; want at most max_deliver (2)", crashes)
	}
	dead := streamSubject(t, js, "ONCEGATE_DEAD", "oncegate.dead.tickets")
	if len(dead) != 1 || dead[0].Headers().Get(consumer.HeaderReason) != string(outcome.ReasonExhausted) {
		t.Fatalf("dead letters %d; want one, exhausted", len(dead))
	}
	if d := dead[0].Headers().Get(consumer.HeaderDetail); !strings.Contains(d, "begun 2 times") {
		t.Errorf("dead letter detail %q; want the tries counted", d)
	}
	if n := target.effects(); n != 3 {
		t.Errorf("%d effects; want the 3 orders", n)
	}
}
