// Package ledger is the idempotency ledger's protocol: the [Ledger]
// interface every store implements, its records, claims and errors, the
// batch calls, and [Do], the machinery behind dedupe.Ledger.Do. Users see
// none of it: they call Do on a store of package badgerledger or jskv.
// Oncegate's consumer, its inspect command and the benchmarks use the
// whole protocol.
//
// A [Ledger] is the durable record of each intent: pending (an owner holds
// a lease with a fencing token until a deadline), committed (with the full
// stored result) or failed (with the reason). [Ledger.Begin] claims work or
// says why not; [Ledger.Commit], [Ledger.Fail] and [Ledger.Extend] succeed
// only with the current fencing token, so a worker that stalled past its
// lease cannot overwrite the outcome of the worker that took over. The
// protocol itself is shared by every store (package ledgerproto); stores
// only read and write records atomically. The stores are package
// badgerstore (embedded, one process) and package jskvstore (a JetStream KV
// bucket, for replicas and clusters); package ledgertest is the conformance
// suite both pass.
//
// Retention must outlive every redelivery: a record that expires before a
// late retry lets the effect happen again. The consumer's configuration
// checks it against each pipeline's redelivery horizon and the trigger
// stream's max age (config.Config.RedeliveryHorizon).
package ledger
