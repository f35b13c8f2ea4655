package wmonce_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/contrib/watermill/internal/wmtest"
	"github.com/oncegate/oncegate/contrib/watermill/wmonce"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
)

// fixture is a JetStream server with the stream "orders" and a Badger
// ledger.
type fixture struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	pub    message.Publisher
	ledger *badgerledger.Ledger
}

func newFixture(t *testing.T) *fixture { return newFixtureIn(t, t.TempDir()) }

// newFixtureIn is newFixture with the ledger in dir.
func newFixtureIn(t *testing.T, dir string) *fixture {
	t.Helper()
	s, stop, err := wmtest.StartServer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, topic := range []string{"orders", "receipts"} {
		if err := wmtest.Setup(ctx, js, topic, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	pub, err := wmtest.Publisher(nc)
	if err != nil {
		t.Fatal(err)
	}
	l, err := badgerledger.Open(dir, badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &fixture{nc: nc, js: js, pub: pub, ledger: l}
}

// run routes "orders" through the middleware (with opts) to h, publishing
// what h produces to "receipts", until the test ends.
func (f *fixture) run(t *testing.T, opts wmonce.Options, h message.HandlerFunc) {
	t.Helper()
	sub, err := wmtest.Subscriber(f.nc, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	once, err := wmonce.Middleware(f.ledger, opts)
	if err != nil {
		t.Fatal(err)
	}
	r.AddHandler("orders", "orders", sub, "receipts", f.pub, h)
	r.AddMiddleware(once)
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	<-r.Running()
	t.Cleanup(func() {
		r.Close()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
	})
}

func (f *fixture) publish(t *testing.T, payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		if err := f.pub.Publish("orders", message.NewMessage(watermill.NewUUID(), []byte(p))); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *fixture) waitSettled(t *testing.T, topic string) {
	t.Helper()
	err := wmtest.WaitFor(15*time.Second, topic+" settled", func() (bool, error) {
		return wmtest.Settled(context.Background(), f.js, topic)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// counter counts the handler's runs per payload.
type counter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *counter) add(p string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[string]int{}
	}
	c.runs[p]++
}

func (c *counter) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.runs {
		out[k] = v
	}
	return out
}

// TestOncePerIntent: three deliveries of one order (each its own Watermill
// message, with its own UUID), two of another written with its members in
// another order, and a third order: the handler runs once per order, every
// message is acked, and each duplicate republishes the receipt the first
// run produced, with its UUID.
func TestOncePerIntent(t *testing.T) {
	f := newFixture(t)
	var c counter
	f.run(t, wmonce.Options{}, func(msg *message.Message) ([]*message.Message, error) {
		c.add(string(msg.Payload))
		return []*message.Message{message.NewMessage(watermill.NewUUID(), msg.Payload)}, nil
	})
	f.publish(t, `{"order":1}`, `{"order":1}`, `{"order":1}`, `{"order":2,"sku":"a"}`, `{"sku":"a","order":2}`, `{"order":3}`)
	f.waitSettled(t, "orders")

	got := c.get()
	if len(got) != 3 || got[`{"order":1}`] != 1 || got[`{"order":2,"sku":"a"}`]+got[`{"sku":"a","order":2}`] != 1 || got[`{"order":3}`] != 1 {
		t.Errorf("handler runs per payload = %v; want one per order", got)
	}

	// Every delivery produced a receipt; the duplicates' receipts are the
	// stored ones, with the first run's UUID.
	cons, err := f.js.Consumer(context.Background(), "receipts", wmtest.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(6, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	uuids := map[string]int{}
	n := 0
	for m := range batch.Messages() {
		uuids[m.Headers().Get("_watermill_message_uuid")]++
		n++
		m.Ack()
	}
	if n != 6 || len(uuids) != 3 {
		t.Errorf("receipts: %d messages with %d distinct UUIDs; want 6 with 3", n, len(uuids))
	}
}

// TestIntentOnContext: the handler finds its message's intent on the
// message's context, to send its key downstream.
func TestIntentOnContext(t *testing.T) {
	f := newFixture(t)
	k, err := dedupe.NewKeyer(dedupe.KeySpec{Pipeline: "watermill", Step: "handler"})
	if err != nil {
		t.Fatal(err)
	}
	const payload = `{"order":11}`
	want, err := k.Intent([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan dedupe.Intent, 1)
	f.run(t, wmonce.Options{}, func(msg *message.Message) ([]*message.Message, error) {
		in, _ := dedupe.IntentFrom(msg.Context())
		got <- in
		return nil, nil
	})
	f.publish(t, payload)
	select {
	case in := <-got:
		if in != want {
			t.Errorf("IntentFrom(msg.Context()) = %v; want %v", in, want)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the handler did not run")
	}
	f.waitSettled(t, "orders")
}

// TestHeldThenTakenOver: a key a worker claimed before its process died is
// taken over by the next process on the ledger's directory at once, not
// after the dead worker's lease (the directory's lock proves it gone); the
// handler then runs once and learns from its context that it took over.
func TestHeldThenTakenOver(t *testing.T) {
	const payload = `{"order":7}`
	k, err := dedupe.NewKeyer(dedupe.KeySpec{Pipeline: "watermill", Step: "handler"})
	if err != nil {
		t.Fatal(err)
	}
	in, err := k.Intent([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	// Another worker claims the key in the ledger's directory, and dies.
	const lease = time.Minute
	dir := t.TempDir()
	db, err := badgerstore.Open(dir, badgerstore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crashed, err := badgerstore.New(db, badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	claimed := time.Now()
	if _, err := crashed.Begin(context.Background(), in.Key, ledger.BeginOptions{Owner: "crashed-worker", Fingerprint: in.Fingerprint, Lease: lease}); err != nil {
		t.Fatal(err)
	}
	crashed.Close()
	db.Close()
	f := newFixtureIn(t, dir)
	type run struct {
		at        time.Time
		takenOver bool
	}
	var mu sync.Mutex
	var runs []run
	f.run(t, wmonce.Options{Keyer: k}, func(msg *message.Message) ([]*message.Message, error) {
		mu.Lock()
		runs = append(runs, run{time.Now(), dedupe.TakenOver(msg.Context())})
		mu.Unlock()
		return nil, nil
	})
	f.publish(t, payload)
	f.waitSettled(t, "orders")
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 1 {
		t.Fatalf("handler ran %d times; want 1", len(runs))
	}
	if !runs[0].takenOver {
		t.Error("TakenOver(msg.Context()) = false for a key whose holder's lease ran out")
	}
	if !runs[0].at.Before(claimed.Add(lease)) {
		t.Errorf("handler ran %v after the dead worker's claim, past its %v lease: it waited the lease out", runs[0].at.Sub(claimed), lease)
	}
	_, ran, err := f.ledger.Do(context.Background(), in, func(context.Context) (dedupe.Result, error) {
		t.Error("committed work ran again")
		return dedupe.Result{}, nil
	}, dedupe.DoOptions{})
	if err != nil || ran {
		t.Errorf("Do after the takeover: ran %v, %v; want the work committed", ran, err)
	}
}

// TestPermanent: a handler error marked Permanent gives the work up: the
// handler is not run again for the key, and its later deliveries are acked.
func TestPermanent(t *testing.T) {
	f := newFixture(t)
	var c counter
	f.run(t, wmonce.Options{}, func(msg *message.Message) ([]*message.Message, error) {
		c.add(string(msg.Payload))
		return nil, dedupe.Permanent(errors.New("card declined"))
	})
	f.publish(t, `{"order":9}`, `{"order":9}`)
	f.waitSettled(t, "orders")
	if got := c.get(); got[`{"order":9}`] != 1 {
		t.Errorf("handler runs = %v; want 1", got)
	}
}

// TestRetryAfterError: an ordinary handler error releases the claim, the
// router nacks, and the redelivery runs the handler again.
func TestRetryAfterError(t *testing.T) {
	f := newFixture(t)
	var c counter
	f.run(t, wmonce.Options{}, func(msg *message.Message) ([]*message.Message, error) {
		c.add(string(msg.Payload))
		if c.get()[string(msg.Payload)] == 1 {
			return nil, errors.New("downstream unavailable")
		}
		return nil, nil
	})
	f.publish(t, `{"order":5}`)
	f.waitSettled(t, "orders")
	if got := c.get(); got[`{"order":5}`] != 2 {
		t.Errorf("handler runs = %v; want 2 (one failure, one success)", got)
	}
}

// TestUnkeyable: a payload that is not JSON cannot be keyed; the handler
// does not run and the error says why.
func TestUnkeyable(t *testing.T) {
	l, err := badgerledger.Open("", badgerledger.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	once, err := wmonce.Middleware(l, wmonce.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err = once(func(*message.Message) ([]*message.Message, error) { ran = true; return nil, nil })(message.NewMessage("1", []byte("not json")))
	if !errors.Is(err, wmonce.ErrUnkeyable) || ran {
		t.Errorf("handler ran %v, error %v; want not run, ErrUnkeyable", ran, err)
	}
	if _, err := wmonce.Middleware(nil, wmonce.Options{}); err == nil {
		t.Error("Middleware(nil ledger): no error")
	}
}
