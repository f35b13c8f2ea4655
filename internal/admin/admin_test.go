package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/natsrun"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

var ctx = context.Background()

// receiver is an HTTP effect target that refuses every call with 400
// while broken, and counts the calls it accepts by Idempotency-Key.
type receiver struct {
	mu      sync.Mutex
	broken  bool
	refused int
	byKey   map[string]int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.broken {
		r.refused++
		http.Error(w, "unknown field", http.StatusBadRequest)
		return
	}
	k := req.Header.Get("Idempotency-Key")
	r.byKey[k]++
	fmt.Fprintf(w, `{"id":"r-%d"}`, len(r.byKey))
}

func (r *receiver) fix() {
	r.mu.Lock()
	r.broken = false
	r.mu.Unlock()
}

// effects returns how many calls the receiver took for key, and in all.
func (r *receiver) effects(key string) (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.byKey {
		n += c
	}
	return r.byKey[key], n
}

// fixture is a running consumer (in this process, on an embedded server)
// whose pipeline "orders" calls a receiver.
type fixture struct {
	t    *testing.T
	app  *app.App
	recv *receiver
	nc   *nats.Conn
	js   jetstream.JetStream
	stop func()
}

const ordersConfig = `
data_dir: %s
metrics: {listen: ""}
nats: {embedded: {listen: "127.0.0.1:0"}}
ledger: {lease: 2s}
pipelines:
  - name: orders
    subject: triggers.orders
    key: {fields: [/order]}
    effect: {sink: http, url: "%s"}
    ack_wait: 2s
    max_deliver: 3
`

func start(t *testing.T) *fixture { return startWith(t, ordersConfig) }

// startWith is start with another configuration: format takes the data
// directory and the receiver's URL.
func startWith(t *testing.T, format string) *fixture {
	t.Helper()
	recv := &receiver{broken: true, byKey: map[string]int{}}
	hs := httptest.NewServer(recv)
	t.Cleanup(hs.Close)
	cfg, err := config.Parse(fmt.Appendf(nil, format, filepath.Join(t.TempDir(), "data"), hs.URL), "test")
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.Start(ctx, cfg, app.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	f := &fixture{t: t, app: a, recv: recv}
	f.stop = sync.OnceFunc(func() {
		cancel()
		<-done
		a.Close()
	})
	t.Cleanup(f.stop)
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	if err := a.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	f.nc, f.js = natsConnect(t, a)
	return f
}

// natsConnect connects to a's embedded server.
func natsConnect(t *testing.T, a *app.App) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := natsrun.Connect(ctx, a.Embedded.ClientURL(), app.NATSOptions(a.Config.NATS, "test", nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	return nc, js
}

// publish publishes an order trigger and returns its intent key.
func (f *fixture) publish(order, note string) string {
	f.t.Helper()
	b, _ := json.Marshal(map[string]string{"order": order, "note": note})
	m := nats.NewMsg("triggers.orders")
	m.Data = b
	m.Header.Set("X-Custom", "kept")
	if _, err := f.js.PublishMsg(ctx, m); err != nil {
		f.t.Fatal(err)
	}
	p := &f.app.Config.Pipelines[0]
	k, err := dedupe.NewKeyer(consumer.KeySpec(p))
	if err != nil {
		f.t.Fatal(err)
	}
	in, err := k.Intent(b)
	if err != nil {
		f.t.Fatal(err)
	}
	return in.Key.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// settled waits until the pipeline holds no trigger unsettled.
func (f *fixture) settled() {
	f.t.Helper()
	waitFor(f.t, "every trigger settled", func() bool {
		n, err := f.app.Outstanding(ctx)
		return err == nil && n == 0
	})
}

// dead waits for n dead letters and returns them.
func (f *fixture) dead(n int) []admin.DeadLetter {
	f.t.Helper()
	var ls []admin.DeadLetter
	waitFor(f.t, fmt.Sprintf("%d dead letters", n), func() bool {
		r, err := f.app.Admin.Dead(ctx, admin.Selection{})
		ls = r.Letters
		return err == nil && len(ls) >= n
	})
	return ls
}

func (f *fixture) record(key string) *admin.Record {
	f.t.Helper()
	r, err := f.app.Admin.Record(ctx, admin.RecordRequest{Key: key})
	if err != nil {
		f.t.Fatal(err)
	}
	return r.Record
}

var alice = admin.Caller{Name: "test", User: "alice"}

// TestRedriveOnce: a receiver refuses an effect for good, the trigger is
// dead-lettered and its record failed; a republished trigger is
// dead-lettered at once. The receiver is fixed and the dead letter
// redriven: one effect, the record committed. Redriving it again does
// nothing; insisting finds the intent committed and sends nothing.
func TestRedriveOnce(t *testing.T) {
	f := start(t)
	key := f.publish("A-1", "first")
	d := f.dead(1)[0]
	if d.Reason != string(outcome.ReasonPermanentEffect) || d.Key != key || d.Subject != "triggers.orders" || d.Redriven != nil {
		t.Fatalf("dead letter = %+v; want permanent_effect of %s on triggers.orders, not redriven", d, key)
	}
	if rec := f.record(key); rec == nil || rec.State != "failed" {
		t.Fatalf("record = %+v; want failed", rec)
	}
	f.recv.fix()

	// A dry run changes nothing.
	r, err := f.app.Admin.Redrive(ctx, admin.RedriveRequest{By: alice})
	if err != nil || !r.DryRun || len(r.Results) != 1 || r.Results[0].Outcome != admin.OutcomeWouldRedrive {
		t.Fatalf("dry run = %+v, %v; want one %q", r, err, admin.OutcomeWouldRedrive)
	}
	if rec := f.record(key); rec.State != "failed" {
		t.Fatalf("record after a dry run = %s; want failed", rec.State)
	}

	r, err = f.app.Admin.Redrive(ctx, admin.RedriveRequest{Yes: true, By: alice})
	if err != nil || len(r.Results) != 1 || r.Results[0].Outcome != admin.OutcomeRedriven {
		t.Fatalf("Redrive = %+v, %v; want one %q", r, err, admin.OutcomeRedriven)
	}
	if m := r.Results[0].Mark; m == nil || m.Generation != 1 || !strings.Contains(m.By, "alice") || !strings.Contains(m.Ledger, "cleared") {
		t.Errorf("mark = %+v; want generation 1 by alice, ledger cleared", m)
	}
	// The republished trigger: the payload and headers that arrived, the
	// dead letter's own headers gone, a Nats-Msg-Id of the redrive's own.
	m := r.Results[0].Mark
	st, err := f.js.Stream(ctx, m.Stream)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := st.GetMsg(ctx, m.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Subject != "triggers.orders" || !strings.Contains(string(tr.Data), `"A-1"`) || tr.Header.Get("X-Custom") != "kept" ||
		tr.Header.Get(consumer.HeaderRedrive) != fmt.Sprint(d.Seq) || tr.Header.Get(consumer.HeaderReason) != "" ||
		tr.Header.Get(nats.MsgIdHdr) != consumer.RedriveID(d.Stream, d.Seq, 1) {
		t.Errorf("republished trigger on %s: headers %v, payload %s; want X-Custom kept, Oncegate-Redrive %d, no Oncegate-Reason, Nats-Msg-Id %s",
			tr.Subject, tr.Header, tr.Data, d.Seq, consumer.RedriveID(d.Stream, d.Seq, 1))
	}
	waitFor(t, "the redriven effect", func() bool { n, _ := f.recv.effects(key); return n >= 1 })
	f.settled()
	if rec := f.record(key); rec.State != "committed" {
		t.Errorf("record after the redrive = %+v; want committed", rec)
	}

	// Twice: the mark stops it. Again: the ledger does.
	r, err = f.app.Admin.Redrive(ctx, admin.RedriveRequest{Yes: true, By: alice})
	if err != nil || len(r.Results) != 1 || r.Results[0].Outcome != admin.OutcomeAlreadyRedriven {
		t.Fatalf("second Redrive = %+v, %v; want %q", r, err, admin.OutcomeAlreadyRedriven)
	}
	r, err = f.app.Admin.Redrive(ctx, admin.RedriveRequest{Yes: true, Again: true, By: alice})
	if err != nil || len(r.Results) != 1 || r.Results[0].Outcome != admin.OutcomeCommitted {
		t.Fatalf("Redrive again = %+v, %v; want %q", r, err, admin.OutcomeCommitted)
	}
	f.settled()
	if n, all := f.recv.effects(key); n != 1 || all != 1 {
		t.Errorf("receiver took %d effects of the key (%d in all); want 1", n, all)
	}
	if ls := f.dead(1); len(ls) != 1 || ls[0].Redriven == nil {
		t.Errorf("dead letters after = %+v; want the one, marked redriven", ls)
	}
}

// TestRedriveRacesDuplicate: a duplicate trigger of the intent arrives
// while a redrive is under way. Between the redrive's clear and its
// publish, the duplicate is done and committed: the redriven trigger finds
// it committed, one effect. Between its read and its clear, the failure is
// cleared by someone else and a duplicate commits: the redrive's clear is
// refused, it reads again, finds the intent committed and sends nothing.
func TestRedriveRacesDuplicate(t *testing.T) {
	for _, at := range []string{"after the clear", "before the clear"} {
		t.Run(at, func(t *testing.T) {
			f := start(t)
			key := f.publish("B-7", "first")
			d := f.dead(1)[0]
			f.recv.fix()
			k, _ := dedupe.ParseKey(key)
			duplicate := func(dedupe.Key) {
				f.publish("B-7", "a duplicate, reworded")
				waitFor(t, "the duplicate's effect committed", func() bool {
					rec, err := f.app.Ledger.Get(ctx, k)
					return err == nil && rec.State == ledger.StateCommitted
				})
			}
			clearAndCommit := func(k dedupe.Key) {
				rec, err := f.app.Ledger.Get(ctx, k)
				if err != nil {
					t.Error(err)
					return
				}
				if err := f.app.Ledger.Clear(ctx, k, rec.Token, "forgotten by bob"); err != nil {
					t.Error(err)
				}
				duplicate(k)
			}
			if at == "after the clear" {
				admin.SetTestHooks(f.app.Admin, nil, duplicate)
			} else {
				var once sync.Once
				admin.SetTestHooks(f.app.Admin, func(k dedupe.Key) { once.Do(func() { clearAndCommit(k) }) }, nil)
			}
			r, err := f.app.Admin.Redrive(ctx, admin.RedriveRequest{Selection: admin.Selection{Seqs: []admin.Range{{From: d.Seq, To: d.Seq}}}, Yes: true, By: alice})
			if err != nil || len(r.Results) != 1 {
				t.Fatalf("Redrive = %+v, %v", r, err)
			}
			want := admin.OutcomeRedriven
			if at == "before the clear" {
				want = admin.OutcomeCommitted
			}
			if got := r.Results[0].Outcome; got != want {
				t.Errorf("outcome = %q (%s); want %q", got, r.Results[0].Detail, want)
			}
			f.settled()
			if n, all := f.recv.effects(key); n != 1 || all != 1 {
				t.Errorf("receiver took %d effects of the key (%d in all); want 1", n, all)
			}
			if rec := f.record(key); rec.State != "committed" {
				t.Errorf("record = %s; want committed", rec.State)
			}
		})
	}
}

// TestRedriveUnknownOutcome: a dead letter whose effect's outcome is
// unknown is refused unless the caller states that the effect did not
// happen; with the statement it is redriven, once, and its mark keeps the
// statement.
func TestRedriveUnknownOutcome(t *testing.T) {
	f := start(t)
	f.recv.fix()
	// The work was begun and its holder stopped past the target's window:
	// the consumer failed it as unknown_outcome and dead-lettered it.
	payload := []byte(`{"order":"C-3","note":"first"}`)
	k := f.keyOf(payload)
	c, err := f.app.Ledger.Begin(ctx, k, ledger.BeginOptions{Owner: "gone", Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	why := "the work was begun 6m ago and its holder stopped"
	if err := f.app.Ledger.Fail(ctx, k, c.Lease.Token, string(outcome.ReasonUnknownOutcome)+": "+why); err != nil {
		t.Fatal(err)
	}
	dl := nats.NewMsg(f.app.Config.Stream.DeadLetter("orders"))
	dl.Data = payload
	for h, v := range map[string]string{
		consumer.HeaderReason: string(outcome.ReasonUnknownOutcome), consumer.HeaderDetail: why,
		consumer.HeaderPipeline: "orders", consumer.HeaderSubject: "triggers.orders", consumer.HeaderKey: k.String(),
		consumer.HeaderStream: "ONCEGATE", consumer.HeaderStreamSeq: "1", consumer.HeaderDeliveries: "2",
	} {
		dl.Header.Set(h, v)
	}
	if _, err := f.js.PublishMsg(ctx, dl); err != nil {
		t.Fatal(err)
	}
	f.dead(1)

	r, err := f.app.Admin.Redrive(ctx, admin.RedriveRequest{Yes: true, By: alice})
	if err != nil || len(r.Results) != 1 || r.Results[0].Outcome != admin.OutcomeRefused || !strings.Contains(r.Results[0].Detail, admin.StatementNotSent) {
		t.Fatalf("Redrive without the statement = %+v, %v; want refused, naming %s", r, err, admin.StatementNotSent)
	}
	if rec := f.record(k.String()); rec.State != "failed" {
		t.Fatalf("record after the refusal = %s; want failed", rec.State)
	}
	if _, err := f.app.Admin.Redrive(ctx, admin.RedriveRequest{Yes: true, UnknownOutcome: "sent", By: alice}); !errors.Is(err, admin.ErrBadRequest) {
		t.Errorf("Redrive with statement %q: %v; want ErrBadRequest", "sent", err)
	}
	r, err = f.app.Admin.Redrive(ctx, admin.RedriveRequest{Yes: true, UnknownOutcome: admin.StatementNotSent, By: alice})
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
	d, err := f.app.Admin.Show(ctx, admin.ShowRequest{Seq: r.Results[0].Seq})
	if err != nil || d.Redriven == nil || d.Redriven.Statement != admin.StatementNotSent || !strings.Contains(d.Redriven.By, "alice") {
		t.Errorf("Show = %+v, %v; want the mark with the statement, by alice", d.Redriven, err)
	}
}

func (f *fixture) keyOf(payload []byte) dedupe.Key {
	f.t.Helper()
	k, err := dedupe.NewKeyer(consumer.KeySpec(&f.app.Config.Pipelines[0]))
	if err != nil {
		f.t.Fatal(err)
	}
	in, err := k.Intent(payload)
	if err != nil {
		f.t.Fatal(err)
	}
	return in.Key
}

// TestForget: forget clears a failed record (the next trigger of the
// intent does its work) and refuses a committed or held one.
func TestForget(t *testing.T) {
	f := start(t)
	key := f.publish("D-1", "first")
	f.dead(1)
	f.recv.fix()
	r, err := f.app.Admin.Forget(ctx, admin.ForgetRequest{Key: key, By: alice})
	if err != nil || r.Outcome != "cleared" || r.Record == nil || r.Record.State != "cleared" || !strings.Contains(r.Record.Reason, "alice") {
		t.Fatalf("Forget = %+v, %v; want cleared, by alice", r, err)
	}
	if r, err = f.app.Admin.Forget(ctx, admin.ForgetRequest{Key: key, By: alice}); err != nil || r.Outcome != "already cleared" {
		t.Errorf("Forget again = %+v, %v; want already cleared", r, err)
	}
	f.publish("D-1", "again")
	waitFor(t, "the effect", func() bool { n, _ := f.recv.effects(key); return n == 1 })
	f.settled()
	if _, err := f.app.Admin.Forget(ctx, admin.ForgetRequest{Key: key, By: alice}); !errors.Is(err, admin.ErrRefused) || !strings.Contains(err.Error(), "committed") {
		t.Errorf("Forget of a committed record: %v; want refused, committed", err)
	}
	var held dedupe.Key
	held[0] = 0x42
	if _, err := f.app.Ledger.Begin(ctx, held, ledger.BeginOptions{Owner: "worker", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.Admin.Forget(ctx, admin.ForgetRequest{Key: held.String(), By: alice}); !errors.Is(err, admin.ErrRefused) || !strings.Contains(err.Error(), "in progress") {
		t.Errorf("Forget of a held record: %v; want refused, in progress", err)
	}
	var none dedupe.Key
	none[0] = 0x43
	if _, err := f.app.Admin.Forget(ctx, admin.ForgetRequest{Key: none.String(), By: alice}); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("Forget of no record: %v; want ErrNotFound", err)
	}
}

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// namedOneShotConfig is ordersConfig with the effect a named one-shot
// effect, sent through the outbox by the dispatcher.
const namedOneShotConfig = `
data_dir: %s
metrics: {listen: ""}
nats: {embedded: {listen: "127.0.0.1:0"}}
ledger: {lease: 2s}
pipelines:
  - name: orders
    subject: triggers.orders
    key: {fields: [/order]}
    effects:
      notify: {sink: http, url: "%s", class: one-shot}
    ack_wait: 2s
    max_deliver: 3
`

// TestRedriveNamedOneShot: a named one-shot effect refused for good is
// dead-lettered by the dispatcher from the outbox; once the receiver is
// fixed, its redrive clears the dispatch's failure and sends it, once, and
// a second redrive sends nothing.
func TestRedriveNamedOneShot(t *testing.T) {
	f := startWith(t, namedOneShotConfig)
	f.publish("N-1", "first")
	d := f.dead(1)[0]
	if d.Reason != string(outcome.ReasonPermanentEffect) {
		t.Fatalf("dead letter = %+v; want permanent_effect", d)
	}
	f.settled()
	f.recv.fix()
	r, err := f.app.Admin.Redrive(ctx, admin.RedriveRequest{Yes: true, By: alice})
	if err != nil || len(r.Results) != 1 || r.Results[0].Outcome != admin.OutcomeRedriven {
		t.Fatalf("Redrive = %+v, %v; want one redriven", r, err)
	}
	waitFor(t, "the redriven one-shot effect", func() bool { _, all := f.recv.effects(""); return all >= 1 })
	f.settled()
	r, err = f.app.Admin.Redrive(ctx, admin.RedriveRequest{Yes: true, By: alice})
	if err != nil || len(r.Results) != 1 || r.Results[0].Outcome != admin.OutcomeAlreadyRedriven {
		t.Fatalf("second Redrive = %+v, %v; want already redriven", r, err)
	}
	f.settled()
	if _, all := f.recv.effects(""); all != 1 {
		t.Errorf("the receiver took %d calls; want 1", all)
	}
	if r, err := f.app.Admin.Dead(ctx, admin.Selection{}); err != nil || len(r.Letters) != 1 {
		t.Errorf("dead letters after the redrive: %d, %v; want the one redriven, none new", len(r.Letters), err)
	}
}

// flakyJS answers its first fails stream lookups with the error a request
// gets while a node's JetStream comes back: no responders.
type flakyJS struct {
	jetstream.JetStream
	fails atomic.Int32
}

func (j *flakyJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if j.fails.Add(-1) >= 0 {
		return nil, nats.ErrNoResponders
	}
	return j.JetStream.Stream(ctx, name)
}

// TestRedriveThroughNoResponders: reading the dead letters, and so a
// redrive, gets past requests that find no responder for a while, as
// after a node restart; the cluster soak (seed 754056642) saw its last
// redrive fail four times running on "no responders".
func TestRedriveThroughNoResponders(t *testing.T) {
	f := start(t)
	key := f.publish("A-9", "first")
	f.dead(1)
	f.recv.fix()
	js := &flakyJS{}
	js.fails.Store(2)
	admin.WrapJetStream(f.app.Admin, func(inner jetstream.JetStream) jetstream.JetStream { js.JetStream = inner; return js })
	r, err := f.app.Admin.Redrive(ctx, admin.RedriveRequest{Yes: true, By: alice})
	if err != nil || len(r.Results) != 1 || r.Results[0].Outcome != admin.OutcomeRedriven {
		t.Fatalf("Redrive after two requests found no responders = %+v, %v; want one %q", r, err, admin.OutcomeRedriven)
	}
	if js.fails.Load() >= 0 {
		t.Fatalf("the flaky stream lookups were not all tried (%d left)", js.fails.Load())
	}
	waitFor(t, "the redriven order's effect", func() bool { ok, _ := f.recv.effects(key); return ok == 1 })

	// What does not pass by itself is not tried again.
	js.fails.Store(0)
	var calls atomic.Int32
	admin.WrapJetStream(f.app.Admin, func(inner jetstream.JetStream) jetstream.JetStream {
		return &refusingJS{JetStream: inner, calls: &calls}
	})
	if _, err := f.app.Admin.Dead(ctx, admin.Selection{}); err == nil || calls.Load() != 1 {
		t.Fatalf("Dead with a stream lookup refused for good: %v after %d lookups; want its error after one", err, calls.Load())
	}
}

// refusingJS refuses every stream lookup with an error that does not pass.
type refusingJS struct {
	jetstream.JetStream
	calls *atomic.Int32
}

func (j *refusingJS) Stream(context.Context, string) (jetstream.Stream, error) {
	j.calls.Add(1)
	return nil, jetstream.ErrStreamNotFound
}
