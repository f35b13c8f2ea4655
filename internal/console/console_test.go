package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/console"
	"github.com/oncegate/oncegate/internal/natsrun"
)

var ctx = context.Background()

// token is the console's token in the tests: a lone token in its file.
const token = "console-test-token-0123456789"

// receiver refuses every call with 400 while broken, and counts the calls
// it takes.
type receiver struct {
	mu     sync.Mutex
	broken bool
	calls  int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.broken {
		http.Error(w, "unknown field customer_ref", http.StatusBadRequest)
		return
	}
	r.calls++
	fmt.Fprint(w, `{"ok":true}`)
}

func (r *receiver) set(broken bool) { r.mu.Lock(); r.broken = broken; r.mu.Unlock() }

func (r *receiver) count() int { r.mu.Lock(); defer r.mu.Unlock(); return r.calls }

const ordersConfig = `
data_dir: %s
metrics: {listen: ""}
nats: {embedded: {listen: "127.0.0.1:0"}}
console: {listen: "127.0.0.1:0", token_file: %s}
pipelines:
  - name: orders
    subject: triggers.orders
    key: {fields: [/order]}
    effect: {sink: http, url: "%s"}
    ack_wait: 2s
    max_deliver: 3
`

type fixture struct {
	app  *app.App
	recv *receiver
	js   jetstream.JetStream
	base string
}

// start runs a consumer with its console, and one trigger dead-lettered
// because the receiver refused it; it returns once the dead letter is kept.
func start(t *testing.T) *fixture { return startTokens(t, token+"\n") }

// startTokens is start with tokens as the console's token file.
func startTokens(t *testing.T, tokens string) *fixture {
	t.Helper()
	dir := t.TempDir()
	tf := filepath.Join(dir, "token")
	if err := os.WriteFile(tf, []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	recv := &receiver{broken: true}
	hs := httptest.NewServer(recv)
	t.Cleanup(hs.Close)
	cfg, err := config.Parse(fmt.Appendf(nil, ordersConfig, filepath.Join(dir, "data"), tf, hs.URL), "test")
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.Start(ctx, cfg, app.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done; a.Close() })
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	if err := a.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	nc, err := natsrun.Connect(ctx, a.Embedded.ClientURL(), app.NATSOptions(cfg.NATS, "test", nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	b, _ := json.Marshal(map[string]string{"order": "O-1", "customer_ref": "c-77"})
	if _, err := js.Publish(ctx, "triggers.orders", b); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dead letter", func() bool {
		r, err := a.Admin.Dead(ctx, admin.Selection{})
		return err == nil && len(r.Letters) == 1
	})
	return &fixture{app: a, recv: recv, js: js, base: "http://" + a.ConsoleAddr}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// TestConsoleRefusesChanges: reading needs nothing; a change needs a
// session opened with the token, and the session's CSRF token; a
// cross-site POST is refused whatever it carries.
func TestConsoleRefusesChanges(t *testing.T) {
	f := start(t)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := c.Get(f.base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	post := func(path string, form url.Values, hdr ...string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, f.base+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, p := range []string{"/", "/dead", "/dead/1", "/key", "/pending"} {
		if code, body := get(p); code != http.StatusOK || !strings.Contains(body, "Oncegate") {
			t.Errorf("GET %s = %d; want 200", p, code)
		}
	}
	if code, body := get("/dead/1"); !strings.Contains(body, "permanent_effect") || !strings.Contains(body, "customer_ref") || strings.Contains(body, `id="redrive"`) {
		t.Errorf("GET /dead/1 signed out = %d: want the reason and payload, and no redrive button", code)
	}
	if code := post("/dead/1/redrive", url.Values{}); code != http.StatusForbidden {
		t.Errorf("redrive without a session = %d; want 403", code)
	}
	if code := post("/login", url.Values{"token": {"wrong"}}); code != http.StatusForbidden {
		t.Errorf("sign-in with a wrong token = %d; want 403", code)
	}
	if code := post("/login", url.Values{"token": {token}}); code != http.StatusSeeOther {
		t.Fatalf("sign-in = %d; want 303", code)
	}
	_, body := get("/dead/1")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil || !strings.Contains(body, `id="redrive"`) {
		t.Fatalf("signed in, /dead/1 has no redrive form with a CSRF token")
	}
	if code := post("/dead/1/redrive", url.Values{"csrf": {"0000"}}); code != http.StatusForbidden {
		t.Errorf("redrive with a wrong CSRF token = %d; want 403", code)
	}
	if code := post("/dead/1/redrive", url.Values{"csrf": {m[1]}}, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Errorf("cross-site redrive = %d; want 403", code)
	}
	if code := post("/dead/1/redrive", url.Values{"csrf": {m[1]}}, "Origin", "http://evil.example"); code != http.StatusForbidden {
		t.Errorf("redrive from another origin = %d; want 403", code)
	}
	if r, _ := f.app.Admin.Dead(ctx, admin.Selection{}); r.Letters[0].Redriven != nil {
		t.Fatalf("a refused request redrove the dead letter")
	}
	// The real thing, with the receiver still broken: redriven, and
	// dead-lettered again.
	if code := post("/dead/1/redrive", url.Values{"csrf": {m[1]}}); code != http.StatusSeeOther {
		t.Errorf("redrive = %d; want 303", code)
	}
	if r, _ := f.app.Admin.Dead(ctx, admin.Selection{}); r.Letters[0].Redriven == nil || r.Letters[0].Redriven.By != console.LoneOperator+" (console)" {
		t.Errorf("after the redrive, mark = %+v; want one by %s (console): the lone token's operator", r.Letters[0].Redriven, console.LoneOperator)
	}
}

// regexpAll returns the first group of every match of expr in s, once each.
func regexpAll(expr, s string) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(expr).FindAllStringSubmatch(s, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			out = append(out, m[1])
		}
	}
	return out
}
