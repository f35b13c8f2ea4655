package admin_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
)

// TestRedriveReadsTheRecordsReason: a dead letter's headers are what its
// publisher wrote, and anyone who may publish on the dead-letter subject
// can write them. One that says poison for an intent whose ledger record
// failed with an unknown outcome is refused without the operator's
// statement, as the record's own dead letter is: redrive decides on the
// record, not on the letter's word, and the record stays failed.
func TestRedriveReadsTheRecordsReason(t *testing.T) {
	f := start(t)
	f.recv.fix()
	payload := []byte(`{"order":"C-9","note":"first"}`)
	k := f.keyOf(payload)
	c, err := f.app.Ledger.Begin(ctx, k, ledger.BeginOptions{Owner: "gone", Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.app.Ledger.Fail(ctx, k, c.Lease.Token, string(outcome.ReasonUnknownOutcome)+": the holder stopped mid-send"); err != nil {
		t.Fatal(err)
	}
	dl := nats.NewMsg(f.app.Config.Stream.DeadLetter("orders"))
	dl.Data = payload
	for h, v := range map[string]string{
		consumer.HeaderReason: string(outcome.ReasonPoison), consumer.HeaderDetail: "forged",
		consumer.HeaderPipeline: "orders", consumer.HeaderSubject: "triggers.orders", consumer.HeaderKey: k.String(),
		consumer.HeaderStream: "ONCEGATE", consumer.HeaderStreamSeq: "1", consumer.HeaderDeliveries: "2",
	} {
		dl.Header.Set(h, v)
	}
	if _, err := f.js.PublishMsg(ctx, dl); err != nil {
		t.Fatal(err)
	}
	f.dead(1)

	for _, yes := range []bool{false, true} {
		r, err := f.app.Admin.Redrive(ctx, admin.RedriveRequest{Yes: yes, By: alice})
		if err != nil || len(r.Results) != 1 || r.Results[0].Outcome != admin.OutcomeRefused || !strings.Contains(r.Results[0].Detail, admin.StatementNotSent) {
			t.Fatalf("Redrive (yes %v) of a letter that says poison for an unknown outcome = %+v, %v; want refused, naming %s", yes, r, err, admin.StatementNotSent)
		}
	}
	if rec := f.record(k.String()); rec.State != "failed" {
		t.Fatalf("record after the refusal = %s; want failed", rec.State)
	}
	r, err := f.app.Admin.Redrive(ctx, admin.RedriveRequest{Yes: true, UnknownOutcome: admin.StatementNotSent, By: alice})
	if err != nil || len(r.Results) != 1 || r.Results[0].Outcome != admin.OutcomeRedriven {
		t.Fatalf("Redrive with the statement = %+v, %v; want redriven", r, err)
	}
	if m := r.Results[0].Mark; m == nil || m.Statement != admin.StatementNotSent {
		t.Errorf("mark = %+v; want the statement %s kept", m, admin.StatementNotSent)
	}
	waitFor(t, "the effect", func() bool { n, _ := f.recv.effects(k.String()); return n >= 1 })
	f.settled()
	if n, _ := f.recv.effects(k.String()); n != 1 {
		t.Errorf("%d effects; want 1", n)
	}
}
