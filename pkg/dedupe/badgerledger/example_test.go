package badgerledger_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
)

// The ledger's protocol by hand (dedupe.Do does this for you): the first
// worker claims the key and commits its result; a second worker, meanwhile,
// finds the key held; a retry after the commit gets the stored result.
func ExampleLedger() {
	ctx := context.Background()
	db, err := badgerledger.Open("", badgerledger.OpenOptions{InMemory: true}) // a directory, in production
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ledger, err := badgerledger.New(db, badgerledger.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()

	key, _ := dedupe.ParseKey("2a8401ed2706ff7283551574eeccbfb9") // from a dedupe.Keyer
	lease := dedupe.BeginOptions{Owner: "worker-1", Lease: 30 * time.Second}

	c, err := ledger.Begin(ctx, key, lease)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-1:", c.Status, "token", c.Lease.Token)

	other, _ := ledger.Begin(ctx, key, dedupe.BeginOptions{Owner: "worker-2", Lease: 30 * time.Second})
	fmt.Println("worker-2:", other.Status, "by", other.Record.Owner)

	// ... worker-1 does the effect, sending key.String() as its idempotency key ...
	if err := ledger.Commit(ctx, key, c.Lease.Token, dedupe.Result{DownstreamID: "INC-4411"}); err != nil {
		log.Fatal(err)
	}

	retry, _ := ledger.Begin(ctx, key, dedupe.BeginOptions{Owner: "worker-2", Lease: 30 * time.Second})
	fmt.Println("retry:", retry.Status, retry.Record.Result.DownstreamID)
	// Output:
	// worker-1: new token 1
	// worker-2: held by worker-1
	// retry: committed INC-4411
}
