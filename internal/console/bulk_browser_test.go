package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/oncegate/oncegate/internal/admin"
)

// TestBulkRedriveInBrowser drives a bulk redrive in headless Chromium, as
// a person in an incident would, with no JavaScript on the page: twelve
// orders were refused for good (the receiver broken), and a duplicate of
// one of them too; the receiver is fixed, and someone redrove that
// order's first dead letter. Filter the dead letters (reason, then
// effect, as a person narrows them; the redriven one is hidden), sign
// in, preview the redrive of the twelve shown: it says eleven will fire
// the http effect and the duplicate's is skipped, committed meanwhile,
// and it sends nothing. Confirm at two letters a second: the page
// shows the job running and its progress, then, done, its summary: eleven
// redriven, one committed, and the receiver took exactly one effect per
// order. Screenshots of the list, the preview and the summary are kept
// under the test's artifacts (go test -artifacts keeps them).
func TestBulkRedriveInBrowser(t *testing.T) {
	exe := chromium(t)
	f := start(t) // one order dead-lettered: O-1
	for i := range 11 {
		b, _ := json.Marshal(map[string]string{"order": fmt.Sprintf("O-%d", i+2)})
		if _, err := f.js.Publish(ctx, "triggers.orders", b); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "twelve dead letters", func() bool {
		st, err := f.js.Stream(ctx, "ONCEGATE_DEAD")
		return err == nil && st.CachedInfo().State.Msgs == 12
	})
	waitFor(t, "every trigger settled", func() bool { n, err := f.app.Outstanding(ctx); return err == nil && n == 0 })
	// O-5 again, while its record is failed: dead-lettered again at once.
	if _, err := f.js.Publish(ctx, "triggers.orders", []byte(`{"order":"O-5","note":"a duplicate"}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "thirteen dead letters", func() bool {
		st, err := f.js.Stream(ctx, "ONCEGATE_DEAD")
		return err == nil && st.CachedInfo().State.Msgs == 13
	})
	waitFor(t, "every trigger settled", func() bool { n, err := f.app.Outstanding(ctx); return err == nil && n == 0 })
	f.recv.set(false)
	// Someone redrives O-5's first dead letter: its duplicate's is then
	// one whose intent was committed meanwhile.
	all, err := f.app.Admin.Dead(ctx, admin.Selection{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	var first5 uint64
	for _, d := range all.Letters {
		if sh, err := f.app.Admin.Show(ctx, admin.ShowRequest{Seq: d.Seq}); err == nil && strings.Contains(string(sh.Payload), `"O-5"`) && first5 == 0 {
			first5 = d.Seq
		}
	}
	r, err := f.app.Admin.Redrive(ctx, admin.RedriveRequest{Selection: admin.Selection{Seqs: []admin.Range{{From: first5, To: first5}}}, Yes: true, By: admin.Caller{User: "bob"}})
	if err != nil || len(r.Results) != 1 || r.Results[0].Outcome != admin.OutcomeRedriven {
		t.Fatalf("redriving O-5's first dead letter (%d): %+v, %v", first5, r, err)
	}
	waitFor(t, "O-5's effect", func() bool { return f.recv.count() == 1 })
	waitFor(t, "every trigger settled", func() bool { n, err := f.app.Outstanding(ctx); return err == nil && n == 0 })

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	bctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		return v
	}
	shot := func(name string) {
		t.Helper()
		b, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		path := filepath.Join(t.ArtifactDir(), name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}

	// Filter: the permanent refusals, then the http effect's.
	err = chromedp.Do(bctx,
		chromedp.Navigate(f.base+"/login?back=/dead"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#filter")),
		chromedp.SetValue(chromedp.CSS(`select[name="reason"]`), "permanent_effect"),
		chromedp.SendKeys(chromedp.CSS("#f-effect"), "http"),
		chromedp.Click(chromedp.CSS("#show")),
		// The filtered page: only it has a filter line (the unfiltered
		// page, loaded before, has none).
		chromedp.WaitVisible(chromedp.CSS("#filter-line")),
		chromedp.WaitVisible(chromedp.CSS("#letters")),
	)
	if err != nil {
		t.Fatalf("filtering the dead letters: %v", err)
	}
	if total := text("#total"); total != "12" {
		t.Errorf("the filtered list's total = %q; want 12", total)
	}
	if line := text("#filter-line"); !strings.Contains(line, "reason=permanent_effect") || !strings.Contains(line, "effect=http") {
		t.Errorf("the filter line = %q; want reason=permanent_effect effect=http", line)
	}
	shot("console-dead-letters.png")

	// Preview.
	err = chromedp.Do(bctx,
		chromedp.SetValue(chromedp.CSS(`input[name="rate"]`), "2"),
		chromedp.Click(chromedp.CSS("#preview")),
		chromedp.WaitVisible(chromedp.CSS("#preview-totals")),
	)
	if err != nil {
		t.Fatalf("previewing: %v", err)
	}
	totals := text("#preview-totals")
	for _, want := range []string{"12 letters", "fire its effect (would redrive): 11", "skip: committed meanwhile: 1", "fires http: 11"} {
		if !strings.Contains(totals, want) {
			t.Errorf("the preview's totals %q: no %q", totals, want)
		}
	}
	if rows := text("#preview-rows"); strings.Count(rows, "would redrive") != 11 || !strings.Contains(rows, "committed meanwhile") {
		t.Errorf("the preview's rows do not say per letter what will happen:\n%s", rows)
	}
	jobPage, err := chromedp.Run(bctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if n := f.recv.count(); n != 1 {
		t.Fatalf("the preview changed something: the receiver took %d effects; want the duplicate's 1", n)
	}
	shot("console-preview.png")

	// Confirm, and watch it run.
	err = chromedp.Do(bctx, chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#progress")))
	if err != nil {
		t.Fatalf("confirming: %v", err)
	}
	if state, progress := text("#job-state"), text("#progress"); state != "running" || !strings.Contains(progress, "of 12 letters taken") {
		t.Errorf("right after Confirm: state %q, progress %q; want running, and how far it got", state, progress)
	}
	// The page reloads itself every second while the job runs: read it
	// until it says done (a read that meets a reload is made again).
	deadline := time.Now().Add(60 * time.Second)
	for {
		state, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#job-state")))
		if err == nil && state == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bulk redrive was not done within 60s: state %q, %v", state, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(jobPage), chromedp.WaitVisible(chromedp.CSS("#summary-totals"))); err != nil {
		t.Fatal(err)
	}
	summary := text("#summary-totals")
	for _, want := range []string{"12 letters", "fire its effect (redriven): 11", "skip: committed meanwhile: 1"} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary %q: no %q", summary, want)
		}
	}
	shot("console-summary.png")
	waitFor(t, "eleven effects more", func() bool { return f.recv.count() == 12 })
	waitFor(t, "every trigger settled", func() bool { n, err := f.app.Outstanding(ctx); return err == nil && n == 0 })
	if n := f.recv.count(); n != 12 {
		t.Errorf("the receiver took %d effects; want 12, one per order", n)
	}
}
