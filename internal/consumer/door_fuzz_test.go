package consumer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/standin"
)

// FuzzTriggerDoor is the NATS bus's threat line for triggers, tried as
// anyone who may publish on a trigger subject would: any bytes, with a
// header of any name and value, to the built-in alerts pipeline (a key
// spec, a condition, a model step through the stand-in, an effect) of a
// real consumer. Every trigger reaches a verdict — an effect, a
// duplicate, filtered, or a dead letter — within its deadline, and the
// consumer stays ready: nothing is lost, nothing wedges it. A dead letter
// carries a reason Oncegate knows, and never "panic": no payload makes the
// work panic.
func FuzzTriggerDoor(f *testing.F) {
	for _, s := range []struct{ payload, name, value string }{
		{string(alert("fp-1", 1, 0)), "", ""},
		{string(alert("fp-1", 1, 1)), "Oncegate-Reply", "_INBOX.x"},
		{`{"alert":{"fingerprint":"x","occurrence":1},"status":"resolved"}`, "Oncegate-Reply", "effects.alerts"},
		{`{"alert":{"fingerprint":"x","fingerprint":"y","occurrence":1}}`, "Oncegate-Key", "00000000000000000000000000000000"},
		{`{"alert":{"fingerprint":["a",{"b":null}],"occurrence":1e308}}`, "Oncegate-Redrive", "1"},
		{`{"alert":{"fingerprint":"\ud800","occurrence":-0}}`, "Oncegate-Reason", "poison"},
		{`[]`, "Oncegate-Tenant", "../.."},
		{strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200), "Traceparent", "00-zz-zz-01"},
		{"not json", "Oncegate-Event", "push"},
		{"", "", ""},
	} {
		f.Add([]byte(s.payload), s.name, s.value)
	}
	// A resolve waits for its firing up to key.resolve_wait (a minute by
	// default): a second keeps its verdict within the deadline.
	fx := start(f, func(c *config.Config) { c.Pipelines[0].Key.ResolveWait = time.Second }, standin.Options{})
	dead := make(chan *nats.Msg, 64)
	sub, err := fx.nc.ChanSubscribe("oncegate.dead.>", dead)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { sub.Unsubscribe() })
	verdicts := func() int64 { s := fx.stats("alerts"); return settled(s) + s.Filtered }

	f.Fuzz(func(t *testing.T, payload []byte, name, value string) {
		m := nats.NewMsg("triggers.alerts")
		m.Data = payload
		if name != "" {
			if strings.HasPrefix(strings.ToLower(name), "nats-") {
				t.Skip("Nats-* headers are the server's: a Nats-Msg-Id makes a publish the stream's duplicate, never delivered")
			}
			m.Header.Set(name, value)
		}
		before := verdicts()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := fx.js.PublishMsg(ctx, m); err != nil {
			t.Skipf("not publishable: %v", err) // a header NATS cannot carry
		}
		deadline := time.Now().Add(30 * time.Second)
		for verdicts() == before {
			if time.Now().After(deadline) {
				t.Fatalf("no verdict within 30s for %q with %s: %q; stats %+v", payload, name, value, fx.stats("alerts"))
			}
			time.Sleep(2 * time.Millisecond)
		}
		if err := fx.c.Ready(); err != nil {
			t.Fatalf("not ready after %q: %v", payload, err)
		}
		for {
			select {
			case d := <-dead:
				r := outcome.Reason(d.Header.Get(consumer.HeaderReason))
				if !r.Valid() || r == outcome.ReasonPanic {
					t.Fatalf("dead letter of %q with reason %q (%s)", d.Data, r, d.Header.Get(consumer.HeaderDetail))
				}
			default:
				return
			}
		}
	})
}
