// Package badgerledger is the [dedupe.Ledger] in an embedded Badger
// database: the default store, for one process that owns the directory.
//
//	db, err := badgerledger.Open("data/ledger", badgerledger.OpenOptions{})
//	if err != nil {
//		return err // wraps ErrLocked if another process holds the directory
//	}
//	defer db.Close()
//	ledger, err := badgerledger.New(db, badgerledger.Options{})
//	if err != nil {
//		return err
//	}
//	defer ledger.Close()
//	res, ran, err := dedupe.Do(ctx, ledger, key, work, dedupe.DoOptions{})
//
// [Ledger] documents what is durable when, and how writes of one key are
// serialized within the process. Several consumer processes sharing work
// use the JetStream KV ledger (package jskv) instead; both pass the same
// conformance suite (package dedupetest).
package badgerledger
