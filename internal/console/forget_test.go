package console_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// unknownOutcome records the failure of payload's intent as the consumer
// records a holder that stopped mid-effect (reason unknown_outcome), and
// dead-letters it so; it returns the key and the dead letter's sequence.
func unknownOutcome(t *testing.T, f *fixture, payload string) (string, uint64) {
	t.Helper()
	keyer, err := dedupe.NewKeyer(consumer.KeySpec(&f.app.Config.Pipelines[0]))
	if err != nil {
		t.Fatal(err)
	}
	in, err := keyer.Intent([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	k := in.Key
	c, err := f.app.Ledger.Begin(ctx, k, ledger.BeginOptions{Owner: "gone", Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	why := "the work was begun 6m ago and its holder stopped"
	if err := f.app.Ledger.Fail(ctx, k, c.Lease.Token, string(outcome.ReasonUnknownOutcome)+": "+why); err != nil {
		t.Fatal(err)
	}
	dl := nats.NewMsg(f.app.Config.Stream.DeadLetter("orders"))
	dl.Data = []byte(payload)
	for h, v := range map[string]string{
		consumer.HeaderReason: string(outcome.ReasonUnknownOutcome), consumer.HeaderDetail: why,
		consumer.HeaderPipeline: "orders", consumer.HeaderSubject: "triggers.orders", consumer.HeaderKey: k.String(),
		consumer.HeaderStream: "ONCEGATE", consumer.HeaderStreamSeq: "9", consumer.HeaderDeliveries: "2",
	} {
		dl.Header.Set(h, v)
	}
	if _, err := f.js.PublishMsg(ctx, dl); err != nil {
		t.Fatal(err)
	}
	var seq uint64
	waitFor(t, "the unknown outcome's dead letter", func() bool {
		r, err := f.app.Admin.Dead(ctx, admin.Selection{Key: k.String()})
		if err == nil && len(r.Letters) == 1 {
			seq = r.Letters[0].Seq
		}
		return seq != 0
	})
	return k.String(), seq
}

// TestConsoleForgetUnknownOutcome: the Forget button of a dead letter
// whose effect's outcome is unknown clears nothing unless the operator
// ticks that the effect did not happen (the dead letter's page and the
// key page show the box); then the record is cleared, and the statement
// is recorded with who made it.
func TestConsoleForgetUnknownOutcome(t *testing.T) {
	f := start(t)
	key, seq := unknownOutcome(t, f, `{"order":"U-1"}`)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	form := func(path string, v url.Values) string {
		t.Helper()
		resp, err := c.PostForm(f.base+path, v)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	form("/login", url.Values{"token": {token}})
	resp, err := c.Get(f.base + "/dead/" + itoa(seq))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := csrfRE.FindStringSubmatch(string(b))
	if m == nil || !strings.Contains(string(b), `id="forget-not-sent"`) {
		t.Fatalf("signed in, the dead letter's page has no CSRF token, or no box to state the effect did not happen:\n%s", b)
	}
	page := form("/forget", url.Values{"csrf": {m[1]}, "key": {key}, "back": {"/dead/" + itoa(seq)}})
	r, err := f.app.Admin.Record(ctx, admin.RecordRequest{Key: key})
	if err != nil || r.Record == nil || r.Record.State != "failed" {
		t.Fatalf("after Forget without the statement, the record is %+v (%v); want failed, left alone", r.Record, err)
	}
	if !strings.Contains(page, "forget refused") {
		t.Errorf("after Forget without the statement the page does not say it was refused:\n%s", page)
	}
	resp, err = c.Get(f.base + "/key?key=" + key)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `name="not_sent"`) {
		t.Errorf("the key page's Forget of the unknown outcome has no box to state the effect did not happen:\n%s", b)
	}
	page = form("/forget", url.Values{"csrf": {m[1]}, "key": {key}, "not_sent": {"on"}, "back": {"/dead/" + itoa(seq)}})
	r, err = f.app.Admin.Record(ctx, admin.RecordRequest{Key: key})
	if err != nil || r.Record == nil || r.Record.State != "cleared" ||
		!strings.Contains(r.Record.Reason, "forgotten by operator (console), who stated that the effect was "+admin.StatementNotSent) {
		t.Fatalf("after Forget with the statement, the record is %+v (%v); want cleared, the statement kept with who made it", r.Record, err)
	}
	if !strings.Contains(page, "stated: "+admin.StatementNotSent) {
		t.Errorf("after Forget with the statement the page does not say it was kept:\n%s", page)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
