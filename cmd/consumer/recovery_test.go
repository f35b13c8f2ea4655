package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// switchable is an HTTP effect target that answers 400 while broken and
// counts the calls it takes per Idempotency-Key.
type switchable struct {
	mu     sync.Mutex
	broken bool
	calls  map[string]int
}

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken {
		http.Error(w, "unknown field customer_ref", http.StatusBadRequest)
		return
	}
	s.calls[r.Header.Get("Idempotency-Key")]++
	fmt.Fprint(w, `{"ok":true}`)
}

func (s *switchable) set(broken bool) {
	s.mu.Lock()
	s.broken = broken
	s.mu.Unlock()
}

func (s *switchable) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[key]
}

const ordersConfig = `
data_dir: %s
metrics: {listen: ""}
nats: {embedded: {listen: "127.0.0.1:0"}%s}
ledger: {lease: 2s}
pipelines:
  - name: orders
    subject: triggers.orders
    key: {fields: [/order]}
    effect: {sink: http, url: "%s"}
    ack_wait: 2s
    max_deliver: 3
`

// running starts a consumer process on cfgPath's data directory and
// returns it with a connection to its embedded server.
func running(t *testing.T, cfgPath string, env ...string) (*child, jetstream.JetStream) {
	t.Helper()
	c := startChild(t, env, "run", "-config", cfgPath)
	waitFor(t, 30*time.Second, "the consumer consuming", func() bool { return strings.Contains(c.stderr.String(), "msg=consuming") })
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(cfg.DataDir, app.URLFile))
	if err != nil {
		t.Fatalf("the consumer left no URL in its data directory: %v", err)
	}
	nc, err := nats.Connect(strings.TrimSpace(string(b)), nats.Token(os.Getenv("ONCEGATE_NATS_TOKEN")))
	if tok := tokenFromEnv(env); tok != "" {
		nc, err = nats.Connect(strings.TrimSpace(string(b)), nats.Token(tok))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	return c, js
}

func tokenFromEnv(env []string) string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "ONCEGATE_NATS_TOKEN="); ok {
			return v
		}
	}
	return ""
}

func orderKey(t *testing.T, cfgPath, order string) string {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	k, err := dedupe.NewKeyer(consumer.KeySpec(&cfg.Pipelines[0]))
	if err != nil {
		t.Fatal(err)
	}
	in, err := k.Intent(fmt.Appendf(nil, `{"order":%q}`, order))
	if err != nil {
		t.Fatal(err)
	}
	return in.Key.String()
}

func deadJSON(t *testing.T, args ...string) admin.DeadReply {
	t.Helper()
	out, stderr, err := runCmd(t, "", append([]string{"dead", "-json"}, args...)...)
	if err != nil {
		t.Fatalf("consumer dead: %v\n%s", err, stderr)
	}
	var r admin.DeadReply
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("dead -json: %v\n%s", err, out)
	}
	return r
}

// TestRedriveCommand: with a consumer running, a permanent failure shows
// in "dead", "redrive" (a dry run, then -yes) brings exactly one effect
// and the record committed, and a second redrive does nothing. With the
// consumer stopped, "dead" answers the same from the stores, a redrive
// made then is carried out when the consumer comes back, and "forget"
// refuses a committed record. Flags after the arguments count. (Before,
// there was no command to redrive, clear or list: a republished trigger
// was dead-lettered again at once.)
func TestRedriveCommand(t *testing.T) {
	recv := &switchable{broken: true, calls: map[string]int{}}
	hs := httptest.NewServer(recv)
	defer hs.Close()
	cfg := writeConfig(t, ordersConfig, "", hs.URL)
	c, js := running(t, cfg)
	publishJSON(t, js, "triggers.orders", map[string]any{"order": "X-1"})
	publishJSON(t, js, "triggers.orders", map[string]any{"order": "Y-2"})
	var d admin.DeadReply
	waitFor(t, 30*time.Second, "two dead letters", func() bool { d = deadJSON(t, "-config", cfg); return len(d.Letters) == 2 })
	x, y := orderKey(t, cfg, "X-1"), orderKey(t, cfg, "Y-2")
	dx := d.Letters[0]
	if dx.Key != x {
		dx = d.Letters[1]
	}
	if dx.Key != x || dx.Reason != "permanent_effect" || !strings.Contains(dx.Detail, "400") {
		t.Fatalf("dead letters = %+v; want X-1's, permanent_effect, 400", d.Letters)
	}
	seqX := fmt.Sprint(dx.Seq)
	out, _, err := runCmd(t, "", "dead", "show", seqX, "-config", cfg)
	if err != nil || !strings.Contains(out, `"order":"X-1"`) || !strings.Contains(out, "Oncegate-Reason: permanent_effect") {
		t.Fatalf("dead show %s -config: %v\n%s", seqX, err, out)
	}
	recv.set(false)

	out, _, err = runCmd(t, "", "redrive", seqX, "-config", cfg)
	if err != nil || !strings.Contains(out, admin.OutcomeWouldRedrive) || !strings.Contains(out, "dry run") {
		t.Fatalf("redrive (dry run): %v\n%s", err, out)
	}
	out, _, err = runCmd(t, "", "redrive", seqX, "-yes", "-config", cfg)
	if err != nil || !strings.Contains(out, admin.OutcomeRedriven) {
		t.Fatalf("redrive -yes: %v\n%s", err, out)
	}
	waitFor(t, 30*time.Second, "X-1's effect", func() bool { return recv.count(x) == 1 })
	waitFor(t, 30*time.Second, "every trigger settled", func() bool { return settledAll(t, js, "orders") })
	out, _, err = runCmd(t, "", "redrive", seqX, "-yes", "-config", cfg)
	if err != nil || !strings.Contains(out, admin.OutcomeAlreadyRedriven) {
		t.Fatalf("second redrive -yes: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, "", "inspect", "record", x, "-config", cfg)
	if err != nil || !strings.Contains(out, "ledger:      committed") {
		t.Fatalf("inspect record: %v\n%s", err, out)
	}
	remote := deadJSON(t, "-config", cfg)
	c.stop(t)

	// No consumer: the same answers from the stores.
	if local := deadJSON(t, "-config", cfg); !jsonEqual(t, local, remote) {
		t.Errorf("dead -json with the consumer stopped differs:\n%+v\nwhile it ran:\n%+v", local, remote)
	}
	if _, _, err := runCmd(t, "", "forget", x, "-config", cfg); err == nil || !strings.Contains(err.Error(), "committed") {
		t.Errorf("forget of a committed key: %v; want refused, committed", err)
	}
	out, _, err = runCmd(t, "", "redrive", "-key", y, "-yes", "-config", cfg)
	if err != nil || !strings.Contains(out, admin.OutcomeRedriven) {
		t.Fatalf("redrive -key Y -yes with no consumer: %v\n%s", err, out)
	}
	c, js = running(t, cfg)
	waitFor(t, 30*time.Second, "Y-2's effect", func() bool { return recv.count(y) == 1 })
	waitFor(t, 30*time.Second, "every trigger settled", func() bool { return settledAll(t, js, "orders") })
	c.stop(t)
	if nx, ny := recv.count(x), recv.count(y); nx != 1 || ny != 1 {
		t.Errorf("effects: X-1 %d, Y-2 %d; want 1 each", nx, ny)
	}
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// TestAdminNeedsSecret: with the embedded server's secret set, the admin
// commands of a client that has it are answered, and one without it is
// refused by the server before it reaches the service.
func TestAdminNeedsSecret(t *testing.T) {
	hs := httptest.NewServer(&switchable{calls: map[string]int{}})
	defer hs.Close()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-admin-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	with := writeConfig(t, ordersConfig, ", token_file: "+tokenFile, hs.URL)
	c, _ := running(t, with, "ONCEGATE_NATS_TOKEN=s3cret-admin-token")
	defer c.stop(t)
	if _, _, err := runCmd(t, "", "dead", "-config", with); err != nil {
		t.Fatalf("dead with the secret: %v", err)
	}
	// The same data directory, no secret.
	cfg, err := config.Load(with)
	if err != nil {
		t.Fatal(err)
	}
	without := filepath.Join(dir, "without.yaml")
	if err := os.WriteFile(without, fmt.Appendf(nil, ordersConfig, cfg.DataDir, "", hs.URL), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"dead"}, {"redrive", "-yes"}, {"forget", strings.Repeat("ab", 16)}, {"inspect", "pending"}} {
		_, _, err := runCmd(t, "", append(args, "-config", without)...)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Errorf("consumer %s without the secret: %v; want an authorization error", strings.Join(args, " "), err)
		}
	}
	_ = context.Background
}
