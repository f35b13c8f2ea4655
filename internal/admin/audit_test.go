package admin_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
)

// TestAuditDurable: the audit is a JetStream stream on disk: what it
// recorded (a redrive and a forget, each with who asked and what came of
// it) is there after the consumer stops and starts again on its data
// directory, and only the operations write it.
func TestAuditDurable(t *testing.T) {
	recv := &receiver{broken: true, byKey: map[string]int{}}
	hs := httptest.NewServer(recv)
	defer hs.Close()
	dir := filepath.Join(t.TempDir(), "data")
	cfg, err := config.Parse(fmt.Appendf(nil, ordersConfig, dir, hs.URL), "test")
	if err != nil {
		t.Fatal(err)
	}
	run := func() (*app.App, func()) {
		a, err := app.Start(ctx, cfg, app.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(rctx) }()
		wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
		defer wcancel()
		if err := a.WaitReady(wctx); err != nil {
			t.Fatal(err)
		}
		return a, func() { cancel(); <-done; a.Close() }
	}
	a, stop := run()
	f := &fixture{t: t, app: a, recv: recv}
	f.nc, f.js = natsConnect(t, a)
	key := f.publish("D-1", "first")
	f.dead(1)
	f.settled()
	if _, err := a.Admin.Redrive(ctx, admin.RedriveRequest{Yes: true, By: alice}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the redriven trigger failed again", func() bool {
		r := f.record(key)
		return r != nil && r.State == "failed"
	})
	if _, err := a.Admin.Forget(ctx, admin.ForgetRequest{Key: key, By: admin.Caller{Name: "test", User: "bob"}}); err != nil {
		t.Fatal(err)
	}
	f.nc.Close()
	stop()

	a, stop = run()
	defer stop()
	r, err := a.Admin.Audit(ctx, admin.AuditRequest{Key: key})
	if err != nil || len(r.Entries) != 2 {
		t.Fatalf("the audit after a restart = %+v, %v; want the redrive and the forget", r, err)
	}
	fg, rd := r.Entries[0], r.Entries[1]
	if fg.Action != admin.AuditForget || fg.Outcome != "cleared" || !strings.Contains(fg.By, "bob") ||
		rd.Action != admin.AuditRedrive || rd.Outcome != admin.OutcomeRedriven || !strings.Contains(rd.By, "alice") || rd.Letter == nil || rd.Letter.Seq != 1 {
		t.Errorf("the audit after a restart = %+v; want bob's forget (cleared), then alice's redrive of dead letter 1", r.Entries)
	}
}
