package badgerstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// The ledger's protocol by hand (dedupe.Ledger.Do does this for you): the first
// worker claims the key and commits its result; a second worker, meanwhile,
// finds the key held; a retry after the commit gets the stored result.
func ExampleLedger() {
	ctx := context.Background()
	db, err := badgerstore.Open("", badgerstore.OpenOptions{InMemory: true}) // a directory, in production
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	l, err := badgerstore.New(db, badgerstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	key, _ := dedupe.ParseKey("2a8401ed2706ff7283551574eeccbfb9") // from a dedupe.Keyer
	lease := ledger.BeginOptions{Owner: "worker-1", Lease: 30 * time.Second}

	c, err := l.Begin(ctx, key, lease)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-1:", c.Status, "token", c.Lease.Token)

	other, _ := l.Begin(ctx, key, ledger.BeginOptions{Owner: "worker-2", Lease: 30 * time.Second})
	fmt.Println("worker-2:", other.Status, "by", other.Record.Owner)

	// ... worker-1 does the effect, sending key.String() as its idempotency key ...
	if err := l.Commit(ctx, key, c.Lease.Token, ledger.Result{DownstreamID: "INC-4411"}); err != nil {
		log.Fatal(err)
	}

	retry, _ := l.Begin(ctx, key, ledger.BeginOptions{Owner: "worker-2", Lease: 30 * time.Second})
	fmt.Println("retry:", retry.Status, retry.Record.Result.DownstreamID)
	// Output:
	// worker-1: new token 1
	// worker-2: held by worker-1
	// retry: committed INC-4411
}
