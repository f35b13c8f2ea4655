package admin_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/admin"
)

// slackConfig is ordersConfig with the effect a named one-shot effect of
// the slack preset (through the outbox, sent by the dispatcher), as the
// alerts recipe has it.
const slackConfig = `
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

// TestOneKeyPerDeadLetter: the Slack message of a one-shot effect is
// refused for good and its outbox entry dead-lettered by the dispatcher.
// The key the dead letter names is the intent's, the one the trigger's
// payload derives, and every operation speaks of the same record with it:
// Record finds the intent (its trigger committed), Forget clears the
// failed dispatch (before, both said "no ledger record": the letter named
// the key the effect was sent under, which has no record of its own), and
// the redrive sends the message once.
func TestOneKeyPerDeadLetter(t *testing.T) {
	f := startWith(t, slackConfig)
	key := f.publish("S-1", "first")
	d := f.dead(1)[0]
	f.settled()
	if d.Key != key {
		t.Errorf("the dead letter names key %s; want the intent's, %s, which every command takes", d.Key, key)
	}
	rec, err := f.app.Admin.Record(ctx, admin.RecordRequest{Key: d.Key})
	if err != nil || rec.Record == nil || rec.Record.State != "committed" {
		t.Errorf("Record(the dead letter's key) = %+v, %v; want the intent's record, committed (the trigger's work: the outbox entry)", rec.Record, err)
	}
	fr, err := f.app.Admin.Forget(ctx, admin.ForgetRequest{Key: d.Key, By: alice})
	if err != nil || fr.Outcome != "cleared" || fr.Record == nil || fr.Record.State != "cleared" || !strings.Contains(fr.Record.Reason, "alice") {
		t.Errorf("Forget(the dead letter's key) = %+v, %v; want the failed dispatch cleared, by alice", fr, err)
	}
	if _, err := f.app.Admin.Forget(ctx, admin.ForgetRequest{Key: d.Key, By: alice}); err != nil && !errors.Is(err, admin.ErrRefused) {
		t.Errorf("Forget again: %v; want already cleared, or a refusal", err)
	}
	f.recv.fix()
	r, err := f.app.Admin.Redrive(ctx, admin.RedriveRequest{Yes: true, By: alice})
	if err != nil || len(r.Results) != 1 || r.Results[0].Outcome != admin.OutcomeRedriven || r.Results[0].Key != key {
		t.Fatalf("Redrive = %+v, %v; want one redriven, naming the intent's key", r, err)
	}
	waitFor(t, "the Slack message", func() bool { _, all := f.recv.effects(""); return all >= 1 })
	f.settled()
	if _, all := f.recv.effects(""); all != 1 {
		t.Errorf("the receiver took %d messages; want 1", all)
	}
	rec, err = f.app.Admin.Record(ctx, admin.RecordRequest{Key: key})
	if err != nil || rec.Record == nil || rec.Record.State != "committed" {
		t.Errorf("Record after the redrive = %+v, %v; want the intent committed", rec.Record, err)
	}
	if _, err := f.app.Admin.Forget(ctx, admin.ForgetRequest{Key: key, By: alice}); !errors.Is(err, admin.ErrRefused) {
		t.Errorf("Forget once the message went out: %v; want refused", err)
	}
}
