// Package badgerstore keeps the ledger (package ledger) in an embedded
// Badger database: the default store, for one process that owns the
// directory. Its public face is package badgerledger (pkg/dedupe/badgerledger);
// this package adds the ledger's whole protocol, which Oncegate's consumer
// uses, a DB the caller opens and shares, and the batch calls.
//
//	db, err := badgerstore.Open("data/ledger", badgerstore.OpenOptions{})
//	if err != nil {
//		return err // wraps ErrLocked if another process holds the directory
//	}
//	defer db.Close()
//	l, err := badgerstore.New(db, badgerstore.Options{})
//	if err != nil {
//		return err
//	}
//	defer l.Close()
//	c, err := l.Begin(ctx, key, ledger.BeginOptions{Owner: id, Lease: 30 * time.Second})
//
// [Ledger] documents what is durable when, and how writes of one key are
// serialized within the process. Several consumer processes sharing work
// use the JetStream KV ledger (package jskvstore) instead; both pass the
// same conformance suite (package ledgertest).
package badgerstore
