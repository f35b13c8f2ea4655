package jsonce_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
	"github.com/oncegate/oncegate/pkg/dedupe/jsonce"
)

// TestHandlerOnce: a handler wrapped by jsonce runs once per intent across
// duplicates and redeliveries, on two consumers of one durable, retries
// after its own error, and terms what cannot be keyed.
func TestHandlerOnce(t *testing.T) {
	ctx := context.Background()
	js, cons, ledger, keyer := orders(t)

	var mu sync.Mutex
	calls := map[string]int{}
	orders := map[string]string{} // intent key -> order id
	failOnce := map[string]bool{"o-3": true}
	var termed []string
	h := jsonce.Handler(ctx, ledger, keyer, func(ctx context.Context, m jetstream.Msg) (dedupe.Result, error) {
		in, _ := keyer.Intent(m.Data())
		mu.Lock()
		defer mu.Unlock()
		calls[in.Key.String()]++
		orders[in.Key.String()] = orderOf(m.Data())
		if id := orderOf(m.Data()); failOnce[id] {
			delete(failOnce, id)
			return dedupe.Result{}, errors.New("the payment provider timed out")
		}
		return dedupe.Result{DownstreamID: "ch_" + orderOf(m.Data())}, nil
	}, jsonce.Options{RetryDelay: 50 * time.Millisecond, OnTerm: func(m jetstream.Msg, err error) {
		mu.Lock()
		termed = append(termed, string(m.Data()))
		mu.Unlock()
	}})
	for range 2 { // two workers on one durable consumer
		cc, err := cons.Consume(h)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Stop()
	}
	for i := range 5 {
		for d := range 3 { // each order three times, with other delivery ids
			if _, err := js.Publish(ctx, "orders.new", fmt.Appendf(nil, `{"order":"o-%d","delivery":%d}`, i, d)); err != nil {
				t.Fatal(err)
			}
		}
	}
	last, err := js.Publish(ctx, "orders.new", []byte(`{"no order here":1}`))
	if err != nil {
		t.Fatal(err)
	}
	// Settled once the ack floor reaches the last message: the consumer's
	// pending count can still be 0 just after the publish, before the
	// consumer is told of the messages.
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := cons.Info(ctx)
		if err == nil && info.AckFloor.Stream >= last.Sequence && info.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("messages not settled: %+v", info)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 5 {
		t.Errorf("the handler saw %d intents; want 5", len(calls))
	}
	for k, n := range calls {
		want := 1
		if orders[k] == "o-3" {
			want = 2 // failed once, then ran again
		}
		if n != want {
			t.Errorf("intent %s: handler ran %d times; want %d", k, n, want)
		}
	}
	if len(termed) != 1 {
		t.Errorf("termed %q; want the payload without an order", termed)
	}
}

// orders sets up an ORDERS stream with a durable consumer "charge" on an
// embedded server, a Badger ledger (closed at the test's end) and a keyer
// of the order id.
func orders(t *testing.T) (jetstream.JetStream, jetstream.Consumer, *badgerledger.Ledger, *dedupe.Keyer) {
	t.Helper()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{Durable: "charge", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := badgerledger.Open(t.TempDir(), badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ledger.Close() })
	keyer, err := dedupe.NewKeyer(dedupe.KeySpec{Pipeline: "orders", Step: "charge", Fields: []string{"/order"}})
	if err != nil {
		t.Fatal(err)
	}
	return js, cons, ledger, keyer
}

func orderOf(b []byte) string {
	var o string
	fmt.Sscanf(string(b), `{"order":%q`, &o)
	return o
}

// TestDuplicateWaitsForHeldWork: a duplicate of work another message's
// handler holds is not acked on the holder's word; it comes back and is
// acked once the work is committed. (Acked at once, it is lost if the
// holder's message was a stale delivery another worker had acked.)
func TestDuplicateWaitsForHeldWork(t *testing.T) {
	ctx := context.Background()
	js, cons, ledger, keyer := orders(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseWork := func() { releaseOnce.Do(func() { close(release) }) }
	var mu sync.Mutex
	deliveries := map[string]int{} // by delivery field
	var runs int
	h := jsonce.Handler(ctx, ledger, keyer, func(ctx context.Context, m jetstream.Msg) (dedupe.Result, error) {
		mu.Lock()
		runs++
		mu.Unlock()
		<-release
		return dedupe.Result{DownstreamID: "ch_1"}, nil
	}, jsonce.Options{RetryDelay: 20 * time.Millisecond})
	count := func(m jetstream.Msg) {
		mu.Lock()
		deliveries[string(m.Data())]++
		mu.Unlock()
		h(m)
	}
	first, second := `{"order":"o-1","delivery":1}`, `{"order":"o-1","delivery":2}`
	if _, err := js.Publish(ctx, "orders.new", []byte(first)); err != nil {
		t.Fatal(err)
	}
	// The first is fetched and handled on a goroutine of its own (a
	// Consume's handler holding it would hold that Consume's buffer too).
	batch, err := cons.Fetch(1)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer releaseWork() // before the wait, should the test fail first
	for m := range batch.Messages() {
		wg.Go(func() { count(m) })
	}
	waitUntil(t, "the first message's handler to run", func() bool { mu.Lock(); defer mu.Unlock(); return runs == 1 })
	cc, err := cons.Consume(count)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	if _, err := js.Publish(ctx, "orders.new", []byte(second)); err != nil {
		t.Fatal(err)
	}
	// While the first holds the work, the second keeps coming back.
	waitUntil(t, "the duplicate to come back twice (acked at once, it does not)", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return deliveries[second] >= 3
	})
	if info, err := cons.Info(ctx); err != nil || info.NumAckPending != 2 {
		t.Fatalf("consumer %+v, %v; want both messages unacked while the work is held", info, err)
	}
	releaseWork()
	waitUntil(t, "both messages to be acked", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if runs != 1 {
		t.Errorf("the handler ran %d times; want 1", runs)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 20s waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestConsumeStop: Stop ends the context of a handler still running (it
// ran on until its work was done, holding its claim), whose work is then
// released: the message comes back to the next consumption, which does
// the work.
func TestConsumeStop(t *testing.T) {
	ctx := context.Background()
	js, cons, ledger, keyer := orders(t)
	started := make(chan dedupe.Intent, 1)
	ended := make(chan error, 1)
	cc, err := jsonce.Consume(ctx, cons, ledger, keyer, func(ctx context.Context, m jetstream.Msg) (dedupe.Result, error) {
		in, _ := dedupe.IntentFrom(ctx)
		started <- in
		select {
		case <-ctx.Done():
			ended <- context.Cause(ctx)
			return dedupe.Result{}, ctx.Err()
		case <-time.After(20 * time.Second):
			ended <- nil
			return dedupe.Result{}, errors.New("the handler's context did not end")
		}
	}, jsonce.Options{RetryDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"order":"o-9"}`)
	if _, err := js.Publish(ctx, "orders.new", payload); err != nil {
		t.Fatal(err)
	}
	want, _ := keyer.Intent(payload)
	if in := <-started; in != want {
		t.Errorf("IntentFrom(handler's ctx) = %v; want %v", in, want)
	}
	cc.Stop()
	if cause := <-ended; cause == nil || !strings.Contains(cause.Error(), "stopped") {
		t.Fatalf("the handler's context ended with %v; want it ended by Stop", cause)
	}
	var runs atomic.Int64
	cc2, err := jsonce.Consume(ctx, cons, ledger, keyer, func(ctx context.Context, m jetstream.Msg) (dedupe.Result, error) {
		runs.Add(1)
		return dedupe.Result{DownstreamID: "ch_9"}, nil
	}, jsonce.Options{RetryDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Stop()
	waitUntil(t, "the message to be done by the next consumption", func() bool {
		info, err := cons.Info(ctx)
		return runs.Load() == 1 && err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}
