package admin_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/logbuf"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// failUnknown records the failure of payload's intent as the consumer
// records a holder that stopped mid-effect past the target's duplicate
// window: reason unknown_outcome.
func (f *fixture) failUnknown(payload string) dedupe.Key {
	f.t.Helper()
	k := f.keyOf([]byte(payload))
	c, err := f.app.Ledger.Begin(ctx, k, ledger.BeginOptions{Owner: "gone", Lease: time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.app.Ledger.Fail(ctx, k, c.Lease.Token, string(outcome.ReasonUnknownOutcome)+": the work was begun 6m ago and its holder stopped"); err != nil {
		f.t.Fatal(err)
	}
	return k
}

// TestForgetUnknownOutcome: forget holds the guard redrive holds. A
// failed record of reason unknown_outcome (its effect may have happened)
// is refused unless the caller states that the effect did not happen,
// here and through the service; with the statement it is cleared, and
// the statement is kept with who made it: in the record, the reply and
// the log line. The intent's next trigger then does its effect, once.
func TestForgetUnknownOutcome(t *testing.T) {
	f := start(t)
	f.recv.fix()
	var logs logbuf.Buffer
	logged, err := admin.New(admin.Options{Config: f.app.Config, Conn: f.nc, Ledger: f.app.Ledger, Logger: slogTo(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	apis := []struct {
		name string
		api  admin.API
	}{
		{"admin", logged},
		{"client", admin.NewClient(f.nc, admin.Prefix(f.app.Config.Admin.Subject, f.app.Config.Stream.Name))},
	}
	for i, x := range apis {
		t.Run(x.name, func(t *testing.T) {
			order := "U-" + string(rune('1'+i))
			k := f.failUnknown(`{"order":"` + order + `"}`)
			_, err := x.api.Forget(ctx, admin.ForgetRequest{Key: k.String(), By: alice})
			if !errors.Is(err, admin.ErrRefused) || !strings.Contains(err.Error(), admin.StatementNotSent) {
				t.Errorf("Forget of an unknown outcome without the statement: %v; want ErrRefused, naming %s", err, admin.StatementNotSent)
			}
			if rec := f.record(k.String()); rec == nil || rec.State != "failed" {
				t.Fatalf("record after the refusal = %+v; want failed", rec)
			}
			if _, err := x.api.Forget(ctx, admin.ForgetRequest{Key: k.String(), UnknownOutcome: "sent", By: alice}); !errors.Is(err, admin.ErrBadRequest) {
				t.Errorf("Forget with the statement %q: %v; want ErrBadRequest", "sent", err)
			}
			r, err := x.api.Forget(ctx, admin.ForgetRequest{Key: k.String(), UnknownOutcome: admin.StatementNotSent, By: alice})
			if err != nil || r.Outcome != "cleared" || r.Statement != admin.StatementNotSent || r.Record == nil ||
				!strings.Contains(r.Record.Reason, "alice") || !strings.Contains(r.Record.Reason, "stated that the effect was "+admin.StatementNotSent) {
				t.Fatalf("Forget with the statement = %+v, %v; want cleared, the statement kept, by alice", r, err)
			}
			f.publish(order, "again")
			waitFor(t, "the effect", func() bool { n, _ := f.recv.effects(k.String()); return n >= 1 })
			f.settled()
			if n, _ := f.recv.effects(k.String()); n != 1 {
				t.Errorf("%d effects after the forget; want 1", n)
			}
		})
	}
	if l := logs.String(); !strings.Contains(l, "statement="+admin.StatementNotSent) || !strings.Contains(l, `by="alice (test)"`) {
		t.Errorf("the forget's log line does not keep the statement and who made it:\n%s", l)
	}
}

// TestForgetOtherFailureNeedsNoStatement: a record failed for another
// reason (here permanent_effect) is forgotten without a statement, and
// none is recorded.
func TestForgetOtherFailureNeedsNoStatement(t *testing.T) {
	f := start(t)
	key := f.publish("P-1", "first")
	f.dead(1)
	r, err := f.app.Admin.Forget(ctx, admin.ForgetRequest{Key: key, By: alice})
	if err != nil || r.Outcome != "cleared" || r.Statement != "" || strings.Contains(r.Record.Reason, "stated") {
		t.Fatalf("Forget of a permanent_effect failure = %+v, %v; want cleared, no statement", r, err)
	}
}
