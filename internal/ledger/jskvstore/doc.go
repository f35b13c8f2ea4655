// Package jskvstore keeps the ledger (package ledger) in a NATS JetStream
// key-value bucket. Its public face is package jskv (pkg/dedupe/jskv), whose
// documentation explains the records, the atomicity and fencing, retention,
// durability and clocks; this package adds the ledger's whole protocol,
// which Oncegate's consumer uses, and Options.Timeout.
//
// [Ledger] implements [ledger.Ledger] and passes the conformance suite
// (package ledgertest). A Ledger is safe for concurrent use by multiple
// goroutines, and any number of Ledgers, in any number of processes, may
// share a bucket.
package jskvstore
