package dedupe_test

import (
	"context"
	"fmt"

	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
)

// Two deliveries of one alert, retried by the provider with a new delivery id
// and timestamp, are one unit of work; the alert's next occurrence is new
// work.
func ExampleKeyer() {
	keyer, err := dedupe.NewKeyer(dedupe.KeySpec{
		Pipeline: "alerts",
		Step:     "open-incident",
		Fields:   []string{"/alert/fingerprint"},
		Version:  "/alert/occurrence",
	})
	if err != nil {
		panic(err)
	}
	first := `{"delivery":"a1","sent":"2026-11-29T07:00:00Z","alert":{"fingerprint":"5f2c","occurrence":7,"summary":"disk full"}}`
	retry := `{"alert":{"occurrence":7,"fingerprint":"5f2c","summary":"disk full"},"delivery":"a2","sent":"2026-11-29T07:00:31Z"}`
	next := `{"delivery":"a3","sent":"2026-11-29T09:12:00Z","alert":{"fingerprint":"5f2c","occurrence":8,"summary":"disk full"}}`

	a, _ := keyer.Intent([]byte(first))
	b, _ := keyer.Intent([]byte(retry))
	c, _ := keyer.Intent([]byte(next))
	fmt.Println("retry is the same work:", a.Key == b.Key)
	fmt.Println("next occurrence is new work:", a.Key != c.Key)
	fmt.Println("key:", a.Key)
	// Output:
	// retry is the same work: true
	// next occurrence is new work: true
	// key: 2a8401ed2706ff7283551574eeccbfb9
}

// Without a list of fields, the whole payload is the work, less the members
// that change on every delivery.
func ExampleKeySpec_volatile() {
	keyer, _ := dedupe.NewKeyer(dedupe.KeySpec{
		Pipeline: "webhooks",
		Step:     "sync-issue",
		Volatile: []string{"/delivery_id", "/received_at"},
	})
	a, _ := keyer.Intent([]byte(`{"delivery_id":"x1","received_at":1764400000,"issue":{"id":42,"title":"Login fails"}}`))
	b, _ := keyer.Intent([]byte(`{"delivery_id":"x2","received_at":1764400031,"issue":{"id":42,"title":"Login fails"}}`))
	fmt.Println("same key:", a.Key == b.Key)
	fmt.Println("same payload:", a.Fingerprint == b.Fingerprint)
	// Output:
	// same key: true
	// same payload: false
}

// Do runs a side effect once per key: the retry gets the stored result,
// and the effect is not repeated.
func ExampleLedger() {
	ledger, err := badgerledger.Open("", badgerledger.Options{InMemory: true}) // a directory, in production
	if err != nil {
		panic(err)
	}
	defer ledger.Close()
	keyer, _ := dedupe.NewKeyer(dedupe.KeySpec{Pipeline: "billing", Step: "charge", Fields: []string{"/invoice"}})
	charges := 0
	charge := func(ctx context.Context) (dedupe.Result, error) {
		charges++ // the side effect: send in.Key as its idempotency key
		return dedupe.Result{DownstreamID: fmt.Sprintf("ch_%d", charges)}, nil
	}
	for _, delivery := range []string{`{"invoice":"in_1","attempt":1}`, `{"invoice":"in_1","attempt":2}`} {
		in, _ := keyer.Intent([]byte(delivery))
		res, ran, err := ledger.Do(context.Background(), in, charge, dedupe.DoOptions{})
		fmt.Println(res.DownstreamID, ran, err)
	}
	fmt.Println("charges:", charges)
	// Output:
	// ch_1 true <nil>
	// ch_1 false <nil>
	// charges: 1
}
