package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// TestForgetCommandUnknownOutcome: "forget" refuses a failed record of
// reason unknown_outcome (its effect may have happened) unless
// -unknown-outcome=not-sent states that it did not.
func TestForgetCommandUnknownOutcome(t *testing.T) {
	recv := &switchable{calls: map[string]int{}}
	hs := httptest.NewServer(recv)
	defer hs.Close()
	cfgPath := writeConfig(t, ordersConfig, "", hs.URL)
	key := orderKey(t, cfgPath, "U-1")
	// A consumer recorded the intent's failure as unknown_outcome, and
	// stopped.
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.Start(context.Background(), cfg, app.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := dedupe.ParseKey(key)
	c, err := a.Ledger.Begin(context.Background(), k, ledger.BeginOptions{Owner: "gone", Lease: time.Second})
	if err == nil {
		err = a.Ledger.Fail(context.Background(), k, c.Lease.Token, string(outcome.ReasonUnknownOutcome)+": the dispatcher stopped mid-send")
	}
	a.Close()
	if err != nil {
		t.Fatal(err)
	}

	_, _, err = runCmd(t, "", "forget", key, "-config", cfgPath)
	if err == nil || !strings.Contains(err.Error(), "-unknown-outcome="+admin.StatementNotSent) {
		t.Fatalf("forget of an unknown outcome: %v; want refused, naming -unknown-outcome=%s", err, admin.StatementNotSent)
	}
	if _, _, err := runCmd(t, "", "forget", key, "-unknown-outcome=sent", "-config", cfgPath); err == nil || !strings.Contains(err.Error(), "the one statement") {
		t.Errorf("forget -unknown-outcome=sent: %v; want a usage error", err)
	}
	out, _, err := runCmd(t, "", "forget", key, "-unknown-outcome="+admin.StatementNotSent, "-json", "-config", cfgPath)
	var r admin.ForgetReply
	if err == nil {
		err = json.Unmarshal([]byte(out), &r)
	}
	if err != nil || r.Outcome != "cleared" || r.Statement != admin.StatementNotSent || r.Record == nil ||
		!strings.Contains(r.Record.Reason, "stated that the effect was "+admin.StatementNotSent) {
		t.Fatalf("forget -unknown-outcome=not-sent: %+v, %v\n%s; want cleared, the statement kept", r, err, out)
	}
}
