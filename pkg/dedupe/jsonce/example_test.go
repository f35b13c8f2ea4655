package jsonce_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
	"github.com/oncegate/oncegate/pkg/dedupe/jsonce"
)

// An order published three times (the shop retried, with a new delivery
// id each time) is charged once. (The example starts a JetStream server in
// the process.)
func ExampleConsume() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "jsonce-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		log.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{Durable: "charge", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		log.Fatal(err)
	}

	ledger, err := badgerledger.Open("", badgerledger.Options{InMemory: true}) // a directory, in production
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()
	keyer, err := dedupe.NewKeyer(dedupe.KeySpec{Pipeline: "orders", Step: "charge", Fields: []string{"/order"}})
	if err != nil {
		log.Fatal(err)
	}
	var charges atomic.Int64
	var idempotencyKey atomic.Value
	cc, err := jsonce.Consume(ctx, cons, ledger, keyer, func(ctx context.Context, m jetstream.Msg) (dedupe.Result, error) {
		in, _ := dedupe.IntentFrom(ctx)
		idempotencyKey.Store(in.Key.String()) // sent with the charge
		n := charges.Add(1)
		return dedupe.Result{DownstreamID: fmt.Sprintf("ch_%d", n)}, nil
	}, jsonce.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Stop()

	for d := range 3 {
		if _, err := js.Publish(ctx, "orders.new", fmt.Appendf(nil, `{"order":"o-1","delivery":%d}`, d)); err != nil {
			log.Fatal(err)
		}
	}
	for { // until all three deliveries are acknowledged
		info, err := cons.Info(ctx)
		if err == nil && info.AckFloor.Stream >= 3 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("charges:", charges.Load())
	fmt.Println("idempotency key:", idempotencyKey.Load())
	// Output:
	// charges: 1
	// idempotency key: 1dc993662c7347973594f9dc141c41be
}
