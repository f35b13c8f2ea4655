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
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/natsrun"
)

const approvalsConfig = `
data_dir: %s
metrics: {listen: ""}
nats: {embedded: {listen: "127.0.0.1:0"}}
console: {listen: "127.0.0.1:0", token_file: %s}
pipelines:
  - name: pages
    subject: triggers.pages
    key: {fields: [/page]}
    effect: {sink: http, url: "%s", class: one-shot, approval_subject: approvals.pages}
    ack_wait: 2s
`

// TestConsoleApprovesAndCancels: one-shot effects waiting for an approval
// are listed on the Pending page with approve and cancel buttons; approve
// sends one, cancel drops the other.
func TestConsoleApprovesAndCancels(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "token")
	if err := os.WriteFile(tf, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	recv := &receiver{}
	hs := httptest.NewServer(recv)
	defer hs.Close()
	cfg, err := config.Parse(fmt.Appendf(nil, approvalsConfig, filepath.Join(dir, "data"), tf, hs.URL), "test")
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
	defer func() { cancel(); <-done; a.Close() }()
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	if err := a.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	nc, err := natsrun.Connect(ctx, a.Embedded.ClientURL(), app.NATSOptions(cfg.NATS, "test", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for _, p := range []string{"P-1", "P-2"} {
		b, _ := json.Marshal(map[string]string{"page": p})
		if _, err := js.Publish(ctx, "triggers.pages", b); err != nil {
			t.Fatal(err)
		}
	}

	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	base := "http://" + a.ConsoleAddr
	get := func(path string) string {
		t.Helper()
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	post := func(path string, form url.Values) string {
		t.Helper()
		resp, err := c.PostForm(base+path, form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s = %d\n%s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	post("/login", url.Values{"token": {token}})
	var page string
	waitFor(t, "two entries waiting for an approval", func() bool {
		page = get("/pending")
		return strings.Count(page, `action="/outbox/approve"`) == 2
	})
	keys := regexpAll(`name="key" value="([0-9a-f]{32})"`, page)
	csrf := csrfRE.FindStringSubmatch(page)
	if len(keys) < 2 || csrf == nil {
		t.Fatalf("the Pending page lacks keys or a CSRF token:\n%s", page)
	}
	out := post("/outbox/approve", url.Values{"csrf": {csrf[1]}, "pipeline": {"pages"}, "key": {keys[0]}})
	if !strings.Contains(out, "approve "+keys[0]) {
		t.Errorf("after Approve the page says:\n%s", out)
	}
	waitFor(t, "the approved effect", func() bool { return recv.count() == 1 })
	out = post("/outbox/cancel", url.Values{"csrf": {csrf[1]}, "pipeline": {"pages"}, "key": {keys[len(keys)-1]}})
	if !strings.Contains(out, "cancelled") {
		t.Errorf("after Cancel the page says:\n%s", out)
	}
	waitFor(t, "nothing waiting", func() bool { return !strings.Contains(get("/pending"), `action="/outbox/cancel"`) })
	if n := recv.count(); n != 1 {
		t.Errorf("the receiver took %d effects; want 1 (one approved, one cancelled)", n)
	}
	// Both in the audit, by the operator who signed in.
	audit := get("/audit")
	for _, want := range []string{`class="action">approve<`, `class="action">cancel<`, keys[0], keys[len(keys)-1], "operator (console)"} {
		if !strings.Contains(audit, want) {
			t.Errorf("the audit page has no %q:\n%s", want, audit)
		}
	}
}
