// Package badgerledger keeps the idempotency ledger in an embedded Badger
// database: the default, for one process that owns the directory.
//
//	ledger, err := badgerledger.Open("data/ledger", badgerledger.Options{})
//	if err != nil {
//		return err
//	}
//	defer ledger.Close()
//	in, err := keyer.Intent(payload)
//	res, ran, err := ledger.Do(ctx, in, func(ctx context.Context) (dedupe.Result, error) {
//		id, err := openTicket(ctx, in.Key.String())
//		return dedupe.Result{DownstreamID: id}, err
//	}, dedupe.DoOptions{})
//
// [Ledger] documents what is durable when. Several processes sharing work
// use the JetStream KV ledger (package jskv) instead; the two keep the same
// records and decide with the same code.
package badgerledger
