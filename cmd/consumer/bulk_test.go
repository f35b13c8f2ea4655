package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/admin"
)

// keyedReceiver is an HTTP effect target that refuses every call with 400
// while broken, and otherwise honours Idempotency-Key as payment
// providers do: the first call of a key is the effect, a later one a
// replay.
type keyedReceiver struct {
	mu      sync.Mutex
	broken  bool
	effects map[string]int // per key: the calls that acted (must be 1)
	calls   int
}

func newKeyedReceiver() *keyedReceiver {
	return &keyedReceiver{broken: true, effects: map[string]int{}}
}

func (k *keyedReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.broken {
		http.Error(w, "unknown field customer_ref", http.StatusBadRequest)
		return
	}
	k.calls++
	key := r.Header.Get("Idempotency-Key")
	if k.effects[key] > 0 {
		w.Header().Set("Idempotent-Replayed", "true")
	} else {
		k.effects[key]++
	}
	fmt.Fprint(w, `{"ok":true}`)
}

func (k *keyedReceiver) fix() { k.mu.Lock(); k.broken = false; k.mu.Unlock() }

// done returns how many keys got their effect, and the most effects one
// key got.
func (k *keyedReceiver) done() (keys, most int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, n := range k.effects {
		most = max(most, n)
	}
	return len(k.effects), most
}

func (k *keyedReceiver) of(key string) int { k.mu.Lock(); defer k.mu.Unlock(); return k.effects[key] }

// slackOrdersConfig is ordersConfig with a named one-shot effect of the
// slack preset (through the outbox), as the alerts recipe has it.
const slackOrdersConfig = `
data_dir: %s
metrics: {listen: ""}
nats: {embedded: {listen: "127.0.0.1:0"}}
ledger: {lease: 2s}
pipelines:
  - name: orders
    subject: triggers.orders
    key: {fields: [/order]}
    effects:
      notify: {preset: slack, url: "%s", text: "order {{.trigger.order}}"}
    ack_wait: 2s
    max_deliver: 3
`

// TestOneKeyEverywhere: a one-shot Slack message refused for good is
// dead-lettered by the dispatcher; the key "dead" shows is the intent's
// (what "consumer key" derives from the payload), and every command takes
// it: inspect record shows the trigger committed and the message's
// dispatch failed, forget clears that dispatch, the redrive sends the
// message once, and inspect record, and inspect key from the payload,
// then tell the whole story in order: trigger committed, dispatch failed,
// redriven, sent. (Before, dead named the key the message is sent under:
// forget and inspect record said "no ledger record" for it, and inspect
// key said committed for a message never sent.)
func TestOneKeyEverywhere(t *testing.T) {
	recv := newKeyedReceiver()
	hs := httptest.NewServer(recv)
	defer hs.Close()
	cfg := writeConfig(t, slackOrdersConfig, hs.URL)
	c, js := running(t, cfg)
	defer c.stop(t)
	publishJSON(t, js, "triggers.orders", map[string]any{"order": "S-1"})
	var d admin.DeadReply
	waitFor(t, 30*time.Second, "the dead letter", func() bool { d = deadJSON(t, "-config", cfg); return len(d.Letters) == 1 })
	key := orderKey(t, cfg, "S-1")
	if got := d.Letters[0].Key; got != key {
		t.Errorf("dead shows key %s; want the intent's %s", got, key)
	}
	out, _, err := runCmd(t, "", "inspect", "record", d.Letters[0].Key, "-config", cfg)
	if err != nil || !strings.Contains(out, "ledger:      committed") || !strings.Contains(out, "effect notify (slack)") || !strings.Contains(out, "dispatch:    failed") {
		t.Errorf("inspect record of the dead letter's key: %v\n%s\nwant the trigger committed and notify's dispatch failed", err, out)
	}
	out, _, err = runCmd(t, "", "forget", d.Letters[0].Key, "-config", cfg)
	if err != nil || !strings.Contains(out, "cleared") || !strings.Contains(out, "notify") {
		t.Errorf("forget of the dead letter's key: %v\n%s\nwant notify's failed dispatch cleared", err, out)
	}
	recv.fix()
	out, _, err = runCmd(t, "", "redrive", "-yes", "-config", cfg)
	if err != nil || !strings.Contains(out, admin.OutcomeRedriven) {
		t.Fatalf("redrive -yes: %v\n%s", err, out)
	}
	waitFor(t, 30*time.Second, "the message", func() bool { n, _ := recv.done(); return n == 1 })
	waitFor(t, 30*time.Second, "the dispatch settled", func() bool { return settledDispatch(t, js, "orders") })
	for _, inspect := range [][]string{{"inspect", "record", key}, {"inspect", "key", "-pipeline", "orders"}} {
		out, _, err = runCmd(t, `{"order":"S-1"}`, append(inspect, "-config", cfg)...)
		if err != nil {
			t.Fatalf("%s: %v", strings.Join(inspect[:2], " "), err)
		}
		story := out[strings.Index(out, "story:")+1:]
		at := -1
		for _, step := range []string{"trigger committed", "dispatch failed (notify)", "redriven", "sent (notify)"} {
			i := strings.Index(story, step)
			if i <= at {
				t.Errorf("%s: the story does not say %q after what came before:\n%s", strings.Join(inspect[:2], " "), step, out)
				break
			}
			at = i
		}
	}
	if keys, most := recv.done(); keys != 1 || most != 1 {
		t.Errorf("the receiver took %d messages (at most %d for a key); want one", keys, most)
	}
}

const bulkOrdersConfig = `
data_dir: %s
metrics: {listen: ""}
nats: {embedded: {listen: "127.0.0.1:0"}}
ledger: {lease: 2s}
pipelines:
  - name: orders
    subject: triggers.orders
    key: {fields: [/order]}
    effect: {sink: http, url: "%s"}
    ack_wait: 2s
    max_deliver: 3
`

// refuseOrders publishes n orders to a consumer whose receiver refuses
// them, waits until they are all dead-lettered, and returns their keys.
func refuseOrders(t *testing.T, cfg string, js interface{}, n int, publish func(order string)) []string {
	t.Helper()
	var keys []string
	for i := range n {
		order := fmt.Sprintf("K-%03d", i)
		publish(order)
		keys = append(keys, orderKey(t, cfg, order))
	}
	waitFor(t, 60*time.Second, fmt.Sprintf("%d dead letters", n), func() bool {
		return len(deadJSON(t, "-config", cfg, "-limit", "500").Letters) == n
	})
	return keys
}

// TestRedriveFilterPreview: the command line's bulk redrive. Six orders
// are refused for good, the receiver is fixed; "redrive -filter …
// -preview" says, per letter and in all, that each will fire the http
// effect, changing nothing, in text and in JSON; "-yes" runs it as a job
// and follows it to its summary: six redriven, one effect each.
func TestRedriveFilterPreview(t *testing.T) {
	recv := newKeyedReceiver()
	hs := httptest.NewServer(recv)
	defer hs.Close()
	cfg := writeConfig(t, bulkOrdersConfig, hs.URL)
	c, js := running(t, cfg)
	defer c.stop(t)
	keys := refuseOrders(t, cfg, js, 6, func(o string) { publishJSON(t, js, "triggers.orders", map[string]any{"order": o}) })
	recv.fix()
	filter := "reason=permanent_effect status=4xx effect=http"
	out, _, err := runCmd(t, "", "redrive", "-filter", filter, "-preview", "-config", cfg)
	if err != nil || !strings.Contains(out, "6 letters; would redrive: 6") || !strings.Contains(out, "would fire: http 6") || strings.Count(out, "would redrive") != 7 {
		t.Fatalf("redrive -filter … -preview: %v\n%s\nwant 6 letters, each would redrive, firing http", err, out)
	}
	out, _, err = runCmd(t, "", "redrive", "-filter", filter, "-preview", "-json", "-config", cfg)
	var p admin.PreviewReply
	if err != nil || json.Unmarshal([]byte(out), &p) != nil || p.Job.Preview.Letters != 6 || len(p.Rows) != 6 || p.Job.State != admin.JobPreviewed {
		t.Fatalf("redrive -preview -json: %v\n%s", err, out)
	}
	if n, _ := recv.done(); n != 0 {
		t.Fatalf("a preview sent %d effects", n)
	}
	out, _, err = runCmd(t, "", "redrive", "-filter", filter, "-yes", "-json", "-config", cfg)
	var j admin.Job
	if err != nil || json.Unmarshal([]byte(out), &j) != nil || j.State != admin.JobDone || j.Progress.ByOutcome[admin.OutcomeRedriven] != 6 {
		t.Fatalf("redrive -filter … -yes -json: %v\n%s\nwant the job done, 6 redriven", err, out)
	}
	waitFor(t, 30*time.Second, "six effects", func() bool { n, _ := recv.done(); return n == 6 })
	waitFor(t, 30*time.Second, "every trigger settled", func() bool { return settledAll(t, js, "orders") })
	for _, k := range keys {
		if n := recv.of(k); n != 1 {
			t.Errorf("order %s: %d effects; want 1", k, n)
		}
	}
}

// TestBulkRedriveSurvivesKill: a bulk redrive of 40 dead letters, at five
// a second, runs in the consumer; the consumer is SIGKILLed half-way.
// Started again on its data directory, it takes the job over where it got
// to (its lease ran out), and finishes it: every order ends with exactly
// one effect, none with two, and the job's summary counts all 40.
func TestBulkRedriveSurvivesKill(t *testing.T) {
	recv := newKeyedReceiver()
	hs := httptest.NewServer(recv)
	defer hs.Close()
	cfg := writeConfig(t, bulkOrdersConfig, hs.URL)
	c, js := running(t, cfg)
	keys := refuseOrders(t, cfg, js, 40, func(o string) { publishJSON(t, js, "triggers.orders", map[string]any{"order": o}) })
	recv.fix()
	out, _, err := runCmd(t, "", "redrive", "-filter", "reason=permanent_effect", "-yes", "-detach", "-rate", "5", "-config", cfg)
	if err != nil {
		t.Fatalf("redrive -yes -detach: %v\n%s", err, out)
	}
	id := strings.TrimSpace(out)
	job := func() admin.Job {
		t.Helper()
		out, _, err := runCmd(t, "", "redrive", "-job", id, "-json", "-config", cfg)
		var j admin.Job
		if err != nil || json.Unmarshal([]byte(out), &j) != nil {
			t.Fatalf("redrive -job %s: %v\n%s", id, err, out)
		}
		return j
	}
	waitFor(t, 60*time.Second, "the job half-way", func() bool { j := job(); return j.Progress.Letters >= 10 })
	if j := job(); j.State != admin.JobRunning || j.Progress.Letters >= 40 {
		t.Fatalf("the job before the kill: %s, %d letters; want running, not done", j.State, j.Progress.Letters)
	}
	kill(t, c)
	c, js = running(t, cfg)
	defer c.stop(t)
	var j admin.Job
	waitFor(t, 90*time.Second, "the job taken over and done", func() bool { j = job(); return j.State == admin.JobDone })
	waitFor(t, 60*time.Second, "forty effects", func() bool { n, _ := recv.done(); return n == 40 })
	waitFor(t, 60*time.Second, "every trigger settled", func() bool { return settledAll(t, js, "orders") })
	if j.Resumed < 1 || j.Progress.Letters != 40 || j.Progress.ByOutcome[admin.OutcomeRedriven] != 40 {
		t.Errorf("the job after the kill: resumed %d, progress %+v; want taken over, 40 redriven", j.Resumed, j.Progress)
	}
	for _, k := range keys {
		if n := recv.of(k); n != 1 {
			t.Errorf("order %s: %d effects; want exactly 1", k, n)
		}
	}
	if _, most := recv.done(); most != 1 {
		t.Errorf("an order got %d effects; want 1", most)
	}
}

// TestAuditCommand: every change made through the commands is in the
// audit, with who made it and what came of it: a redrive (each dead
// letter), a forget refused (committed) and one done; "audit -key" lists
// one intent's, "audit -action" one action's.
func TestAuditCommand(t *testing.T) {
	recv := newKeyedReceiver()
	hs := httptest.NewServer(recv)
	defer hs.Close()
	cfg := writeConfig(t, bulkOrdersConfig, hs.URL)
	c, js := running(t, cfg)
	defer c.stop(t)
	keys := refuseOrders(t, cfg, js, 2, func(o string) { publishJSON(t, js, "triggers.orders", map[string]any{"order": o}) })
	recv.fix()
	if _, _, err := runCmd(t, "", "redrive", "-key", keys[0], "-yes", "-config", cfg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the effect", func() bool { return recv.of(keys[0]) == 1 })
	waitFor(t, 30*time.Second, "every trigger settled", func() bool { return settledAll(t, js, "orders") })
	if _, _, err := runCmd(t, "", "forget", keys[0], "-config", cfg); err == nil {
		t.Fatal("forget of a committed record was not refused")
	}
	if _, _, err := runCmd(t, "", "forget", keys[1], "-config", cfg); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCmd(t, "", "audit", "-json", "-config", cfg)
	var r admin.AuditReply
	if err != nil || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("audit -json: %v\n%s", err, out)
	}
	var got []string
	for _, e := range r.Entries {
		got = append(got, e.Action+" "+e.Outcome)
		if !strings.Contains(e.By, "oncegate ") || e.Key == "" || e.At.IsZero() {
			t.Errorf("audit entry %+v: want who (the command), the key and when", e)
		}
	}
	if want := []string{"forget cleared", "forget refused", "redrive redriven"}; strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("audit = %q; want %q, newest first", got, want)
	}
	out, _, err = runCmd(t, "", "audit", "-key", keys[0], "-config", cfg)
	if err != nil || !strings.Contains(out, "redrive") || !strings.Contains(out, "refused") || strings.Contains(out, keys[1]) || !strings.Contains(out, "2 changes") {
		t.Errorf("audit -key: %v\n%s\nwant its redrive and its refused forget", err, out)
	}
	out, _, err = runCmd(t, "", "audit", "-action", "forget", "-config", cfg)
	if err != nil || !strings.Contains(out, "2 changes") || strings.Contains(out, " redrive ") {
		t.Errorf("audit -action forget: %v\n%s", err, out)
	}
}
