package jskv_test

import (
	"context"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/jskv"
)

// A consumer replica opens the shared ledger and runs one unit of work
// under it. Every replica of the consumer does the same, on the same bucket.
func ExampleNew() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	l, err := jskv.New(ctx, js, jskv.Options{
		Replicas:      3, // on a cluster of three or more servers
		LedgerOptions: dedupe.LedgerOptions{Retention: 14 * 24 * time.Hour},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	var key dedupe.Key // from a dedupe.Keyer
	c, err := l.Begin(ctx, key, dedupe.BeginOptions{Owner: "consumer-0", Lease: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	if c.Status == dedupe.StatusNew {
		// ... do the effect, then record it:
		err = l.Commit(ctx, key, c.Lease.Token, dedupe.Result{DownstreamID: "INC-4411"})
	}
	if err != nil {
		log.Fatal(err)
	}
}
