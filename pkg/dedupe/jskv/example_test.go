package jskv_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/jskv"
)

// Two consumer replicas share one ledger bucket. Each runs the same
// intent through Do; the effect runs once, and the second replica
// gets the first one's result. (The example starts a JetStream server in
// the process; replicas of a real deployment connect to the same cluster.)
func ExampleNew() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "jskv-example")
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

	replica := func(name string) (*jskv.Ledger, func()) {
		nc, err := nats.Connect(srv.ClientURL(), nats.Name(name))
		if err != nil {
			log.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			log.Fatal(err)
		}
		l, err := jskv.New(ctx, js, jskv.Options{
			Bucket:    "example-ledger",
			Retention: 14 * 24 * time.Hour,
			// Replicas: 3, on a cluster of three or more servers.
		})
		if err != nil {
			log.Fatal(err)
		}
		return l, func() { l.Close(); nc.Close() }
	}
	a, closeA := replica("replica-a")
	defer closeA()
	b, closeB := replica("replica-b")
	defer closeB()

	key, _ := dedupe.ParseKey("2a8401ed2706ff7283551574eeccbfb9") // from a dedupe.Keyer
	incidents := 0
	open := func(ctx context.Context) (dedupe.Result, error) {
		incidents++ // the effect, sent with key.String() as its idempotency key
		return dedupe.Result{DownstreamID: fmt.Sprintf("INC-%d", 4410+incidents)}, nil
	}
	for _, l := range []*jskv.Ledger{a, b} {
		res, ran, err := l.Do(ctx, dedupe.Intent{Key: key}, open, dedupe.DoOptions{})
		fmt.Println(res.DownstreamID, ran, err)
	}
	fmt.Println("incidents opened:", incidents)
	// Output:
	// INC-4411 true <nil>
	// INC-4411 false <nil>
	// incidents opened: 1
}
