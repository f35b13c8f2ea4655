package badgerledger_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
)

// A ticket is opened once per alert, however often the alert is delivered;
// an error releases the key for a retry, and a permanent one gives the work
// up for good.
func ExampleOpen() {
	ledger, err := badgerledger.Open("", badgerledger.Options{InMemory: true}) // a directory, in production
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()
	ctx := context.Background()
	key, _ := dedupe.ParseKey("2a8401ed2706ff7283551574eeccbfb9") // from a dedupe.Keyer

	tries := 0
	open := func(ctx context.Context) (dedupe.Result, error) {
		if tries++; tries == 1 {
			return dedupe.Result{}, errors.New("tracker unavailable")
		}
		return dedupe.Result{DownstreamID: "INC-4411"}, nil
	}
	for range 3 {
		res, ran, err := ledger.Do(ctx, dedupe.Intent{Key: key}, open, dedupe.DoOptions{})
		fmt.Printf("%q ran=%v err=%v\n", res.DownstreamID, ran, err)
	}

	declined, _ := dedupe.ParseKey("00000000000000000000000000000001")
	charge := func(ctx context.Context) (dedupe.Result, error) {
		return dedupe.Result{}, dedupe.Permanent(errors.New("card declined"))
	}
	for range 2 {
		_, _, err := ledger.Do(ctx, dedupe.Intent{Key: declined}, charge, dedupe.DoOptions{})
		fmt.Println(err, errors.Is(err, dedupe.ErrGivenUp))
	}
	// Output:
	// "" ran=true err=tracker unavailable
	// "INC-4411" ran=true err=<nil>
	// "INC-4411" ran=false err=<nil>
	// card declined false
	// dedupe: the work was given up: card declined true
}
