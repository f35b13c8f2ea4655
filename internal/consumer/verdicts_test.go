package consumer_test

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/standin"
)

// The verdicts the gate reaches and how settle carries them out: one
// acker, dead letters named apart, a reused key, a key conflict at the
// target, a reply to another payload.

// TestSettleIsTheOnlyAcker: acks, naks, terms and in-progress marks are
// made in settle.go alone, so that every path ends in one decision.
func TestSettleIsTheOnlyAcker(t *testing.T) {
	acks := []string{"Ack", "DoubleAck", "Nak", "NakWithDelay", "Term", "TermWithReason", "InProgress"}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	found := map[string][]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && slices.Contains(acks, sel.Sel.Name) {
				found[name] = append(found[name], fset.Position(call.Pos()).String()+" "+sel.Sel.Name)
			}
			return true
		})
	}
	for name, calls := range found {
		if name != "settle.go" {
			t.Errorf("%s settles messages; only settle.go may: %v", name, calls)
		}
	}
	if len(found["settle.go"]) == 0 {
		t.Error("settle.go settles nothing: the check looks at the wrong files")
	}
}

// TestDeadLetterIDsDoNotCollide: a trigger and an outbox entry of
// one pipeline that share a stream sequence number are both dead-lettered.
// Their Nats-Msg-Ids once named only the pipeline and the sequence, so the
// second was dropped as a duplicate of the first, and its message termed.
func TestDeadLetterIDsDoNotCollide(t *testing.T) {
	target := &oneShot{calls: map[string]int{}, at: map[string]time.Time{}}
	hs := httptest.NewServer(target)
	defer hs.Close()
	f := start(t, withOneShot(hs.URL, 0, ""), standin.Options{})
	// Trigger stream sequence 1: not JSON, dead-lettered.
	f.publish("triggers.messages", []byte("not json"))
	waitFor(t, 10*time.Second, "the bad trigger dead-lettered", func() bool { return f.subjectCount("ONCEGATE_DEAD", "oncegate.dead.messages") == 1 }, f)
	// Outbox sequence 1: its dispatch was claimed by a dispatcher that
	// died, so it is dead-lettered as an unknown outcome.
	payload := message("m-1", 0)
	if _, err := f.ledger.Begin(context.Background(), consumer.DispatchKey(f.keyOf("messages", payload)), ledger.BeginOptions{Owner: "dead-dispatcher", Lease: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	f.publish("triggers.messages", payload)
	waitFor(t, 20*time.Second, "both dead letters", func() bool { return f.subjectCount("ONCEGATE_DEAD", "oncegate.dead.messages") == 2 }, f)
	reasons := map[string]bool{}
	for _, m := range f.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.messages") {
		reasons[m.Headers().Get(consumer.HeaderReason)+" from "+m.Headers().Get(consumer.HeaderStream)] = true
	}
	if !reasons["invalid_json from ONCEGATE"] || !reasons["unknown_outcome from ONCEGATE_OUTBOX"] {
		t.Errorf("dead letters: %v; want the bad trigger's and the outbox entry's", reasons)
	}
}

// TestMismatchRejectBypassesNoWindow: under ledger.mismatch:
// reject, the same key with another payload is dead-lettered even while
// the window remembers the key; the window once acked it as a duplicate.
func TestMismatchRejectBypassesNoWindow(t *testing.T) {
	f := start(t, func(c *config.Config) {
		c.Ledger.Mismatch = config.MismatchReject
		p := c.Pipelines[1]
		p.Name, p.Subject = "invoices", "triggers.invoices"
		p.Key = config.Key{Fields: []string{"/invoice/id"}}
		p.Effect = config.Effect{Sink: config.SinkJetStream, Subject: "effects.invoices", Class: config.ClassReplayable}
		c.Pipelines = append(c.Pipelines, p)
	}, standin.Options{})
	first := []byte(`{"invoice":{"id":"in_1","amount":100}}`)
	again := first
	other := []byte(`{"invoice":{"id":"in_1","amount":999}}`) // the same key, another payload
	f.publish("triggers.invoices", first)
	waitFor(t, 10*time.Second, "the first invoice", func() bool { return f.stats("invoices").Effects == 1 }, f)
	f.publish("triggers.invoices", again)
	waitFor(t, 10*time.Second, "the repeat", func() bool { return f.stats("invoices").DuplicatesWindow == 1 }, f)
	f.publish("triggers.invoices", other)
	waitFor(t, 10*time.Second, "the reused key settled", func() bool { return settled(f.stats("invoices")) == 3 }, f)
	if s := f.stats("invoices"); s.DeadLetters != 1 || s.Effects != 1 {
		t.Fatalf("stats %+v; want the reused key dead-lettered", s)
	}
	dead := f.streamMsgs("ONCEGATE_DEAD", "oncegate.dead.invoices")
	if len(dead) != 1 || dead[0].Headers().Get(consumer.HeaderReason) != string(outcome.ReasonMismatch) {
		t.Errorf("%d dead letters; want one with reason mismatch", len(dead))
	}
}

// TestFileKeyConflictIsDone (the file sink): a file already
// written for the key with other content means the intent's effect
// exists. It is recorded as done, never failed and dead-lettered.
func TestFileKeyConflictIsDone(t *testing.T) {
	dir := t.TempDir()
	f := start(t, func(c *config.Config) {
		p := c.Pipelines[1]
		p.Name, p.Subject = "files", "triggers.files"
		p.Key = config.Key{Fields: []string{"/doc"}}
		p.Effect = config.Effect{Sink: config.SinkFile, Dir: dir, Class: config.ClassReplayable}
		c.Pipelines = append(c.Pipelines, p)
	}, standin.Options{})
	payload := []byte(`{"doc":"d-1","text":"reworded"}`)
	k := f.keyOf("files", payload)
	if err := os.WriteFile(filepath.Join(dir, k.String()+".json"), []byte(`{"doc":"d-1","text":"first wording"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f.publish("triggers.files", payload)
	waitFor(t, 10*time.Second, "the trigger settled", func() bool { return settled(f.stats("files")) == 1 }, f)
	if s := f.stats("files"); s.DeadLetters != 0 || s.Effects != 1 {
		t.Errorf("stats %+v; want the effect recorded as done", s)
	}
	if rec, err := f.ledger.Get(context.Background(), k); err != nil || rec.State.String() != "committed" {
		t.Errorf("record %v (%v); want committed", rec.State, err)
	}
}

// TestReplyToAnotherPayload: a publisher who knows only an
// alert's key fields (fingerprint, occurrence) sends them with
// Oncegate-Reply once the window has forgotten the key. The reply carried
// the first trigger's whole payload (the effect body embeds it) and the
// model's answer. A duplicate whose payload differs from the one the work
// was done for now gets the status and key only; the same payload still
// gets the stored response.
func TestReplyToAnotherPayload(t *testing.T) {
	f := start(t, func(c *config.Config) {
		c.Pipelines[0].Window.TTL = 200 * time.Millisecond // the window forgets soon: the ledger answers
	}, standin.Options{})
	// forgotten waits until the alerts window holds no key.
	forgotten := func() {
		waitFor(t, 10*time.Second, "the window to forget the key", func() bool {
			for _, w := range f.c.WindowStats() {
				if w.Pipeline == "alerts" {
					return w.Live == 0
				}
			}
			return false
		}, f)
	}
	replies := make(chan *nats.Msg, 4)
	sub, err := f.nc.ChanSubscribe("_INBOX.probe", replies)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	send := func(data []byte) *nats.Msg {
		m := nats.NewMsg("triggers.alerts")
		m.Data = data
		m.Header.Set(consumer.HeaderReply, "_INBOX.probe")
		if _, err := f.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-replies:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no reply")
		}
		return nil
	}
	secret := alert("fp-secret", 1, 0) // its annotations are the victim's
	first := send(secret)
	if !strings.Contains(string(first.Data), "runbooks.example") {
		t.Fatalf("the first reply %s; want the effect body", first.Data)
	}
	forgotten()
	probe := send([]byte(`{"alert":{"fingerprint":"fp-secret","occurrence":1}}`))
	if strings.Contains(string(probe.Data), "runbooks.example") || strings.Contains(string(probe.Data), standin.Label) {
		t.Errorf("the reply to another payload discloses the first trigger's: %s", probe.Data)
	}
	var st struct {
		Key, Status string
		Mismatch    bool
	}
	if err := json.Unmarshal(probe.Data, &st); err != nil || st.Status != "committed" || !st.Mismatch || st.Key == "" {
		t.Errorf("the reply to another payload %s; want its key, status committed and mismatch", probe.Data)
	}
	// The same payload again gets the stored response.
	forgotten()
	if again := send(secret); string(again.Data) != string(first.Data) {
		t.Errorf("the reply to the same payload %s; want the stored response %s", again.Data, first.Data)
	}
}
