package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/console"
)

// chromium returns the path of a headless-capable Chromium, or skips.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium to drive the console in: install Debian's package (apt-get install -y chromium) to run this test")
	return ""
}

// TestConsoleInBrowser drives the console in headless Chromium, as a
// person would, with no JavaScript on the page: a receiver refused an
// effect and the trigger was dead-lettered; the receiver is fixed; sign
// in, open the dead letter, click Redrive, and see it redriven by the
// operator who signed in and the record committed, with exactly one
// effect at the receiver. It saves a screenshot of the dead letter's page
// under the test's artifacts (go test -artifacts keeps them).
func TestConsoleInBrowser(t *testing.T) {
	exe := chromium(t)
	f := start(t)
	f.recv.set(false)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	bctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()

	text := func(id string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Text(chromedp.ID(id)))
		if err != nil {
			t.Fatalf("reading #%s: %v", id, err)
		}
		return v
	}
	err := chromedp.Do(bctx,
		chromedp.Navigate(f.base+"/dead"),
		chromedp.WaitVisible(chromedp.ID("letters")),
		chromedp.Click(chromedp.CSS(`a[href="/dead/1"]`)),
		chromedp.WaitVisible(chromedp.ID("payload")),
	)
	if err != nil {
		t.Fatalf("opening the dead letter: %v", err)
	}
	if payload := text("payload"); !strings.Contains(payload, "customer_ref") {
		t.Errorf("the dead letter's page shows payload %q; want the trigger's", payload)
	}
	err = chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(`a[href^="/login"]`)),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("redrive")),
		chromedp.Click(chromedp.ID("redrive")),
		chromedp.WaitVisible(chromedp.ID("flash")),
	)
	if err != nil {
		t.Fatalf("signing in and redriving: %v", err)
	}
	flash, redriven, operator := text("flash"), text("redriven"), text("operator")
	if !strings.HasPrefix(flash, admin.OutcomeRedriven) || !strings.HasPrefix(redriven, "yes") || !strings.Contains(redriven, console.LoneOperator+" (console)") || operator != console.LoneOperator {
		t.Errorf("after Redrive: flash %q, redriven %q, signed in as %q; want redriven, by %s (console), the lone token's operator", flash, redriven, operator, console.LoneOperator)
	}
	waitFor(t, "the effect", func() bool { return f.recv.count() == 1 })
	waitFor(t, "every trigger settled", func() bool { n, err := f.app.Outstanding(ctx); return err == nil && n == 0 })
	// Reload: the record is committed; clicking Redrive again does nothing.
	err = chromedp.Do(bctx,
		chromedp.Navigate(f.base+"/dead/1"),
		chromedp.WaitVisible(chromedp.ID("state")),
	)
	if err != nil {
		t.Fatalf("reloading: %v", err)
	}
	state := text("state")
	err = chromedp.Do(bctx, chromedp.Click(chromedp.ID("redrive")), chromedp.WaitVisible(chromedp.ID("flash")))
	if err != nil {
		t.Fatalf("redriving again: %v", err)
	}
	flash = text("flash")
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if state != "committed" || !strings.HasPrefix(flash, admin.OutcomeAlreadyRedriven) {
		t.Errorf("after the effect: record %q, second redrive %q; want committed, %s", state, flash, admin.OutcomeAlreadyRedriven)
	}
	if n := f.recv.count(); n != 1 {
		t.Errorf("the receiver took %d effects; want 1", n)
	}
	path := filepath.Join(t.ArtifactDir(), "console-dead-letter.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
