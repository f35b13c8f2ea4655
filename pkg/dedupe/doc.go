// Package dedupe derives intent keys from triggers and runs each intent's
// work once, through a durable ledger, so that a retried step's side effect
// runs once.
//
//	keyer, err := dedupe.NewKeyer(dedupe.KeySpec{Pipeline: "tickets", Step: "open", Fields: []string{"/issue/id"}})
//	...
//	db, err := badgerledger.Open("data/ledger", badgerledger.OpenOptions{})
//	ledger, err := badgerledger.New(db, badgerledger.Options{})
//	...
//	in, err := keyer.Intent(payload)
//	res, ran, err := dedupe.Do(ctx, ledger, in.Key, func(ctx context.Context) (dedupe.Result, error) {
//		id, err := openTicket(ctx, in.Key.String()) // the key as the sink's idempotency key
//		return dedupe.Result{DownstreamID: id}, err
//	}, dedupe.DoOptions{Fingerprint: in.Fingerprint})
//
// The package holds the keys, the [Ledger] contract and [Do]; it imports
// neither Badger nor NATS. The stores are packages of their own: badgerledger
// (embedded, one process) and jskv (a JetStream KV bucket, for replicas and
// clusters). The in-memory duplicate window is package window.
//
// # Intent keys
//
// A [Keyer] turns a trigger payload into an [Intent]: a 128-bit [Key] that
// names the unit of work, and a [Fingerprint] of the exact payload. The key
// is derived from the input, never from the run, the delivery or the model's
// output, so every retry, every replica and every re-plan of the same work
// computes the same key:
//
//  1. the payload is validated as I-JSON and brought to its RFC 8785
//     canonical form by package canon (member order and whitespace stop
//     mattering; duplicate names, invalid UTF-8, unsafe integers and
//     oversized or over-deep input are errors);
//  2. the [KeySpec] selects what identifies the work: the listed JSON
//     Pointers, or the whole payload less its volatile members, plus an
//     optional version field;
//  3. the pipeline and step names, the scope (and run id), the spec itself
//     and the selection are length-prefixed into one domain-separated
//     message and hashed.
//
// Keys are 128 bits because they are durable: at a billion keys a 64-bit
// hash collides with real probability, and a collision silently swallows
// real work. The text form, [Key.String], is 32 lowercase hex digits and is
// what goes into Nats-Msg-Id and Idempotency-Key headers. Keys are stable
// across releases: a change to their derivation gets a new domain version.
//
// The default hash, [HashXXH], is fast and fine for payloads nobody crafts
// against you. Where payloads come from untrusted parties who could profit
// from suppressing someone else's work, use [HashSHA256].
//
// # The ledger
//
// A [Ledger] is the durable record of each intent: pending (an owner holds a
// lease with a fencing token until a deadline), committed (with the full
// stored result) or failed (with the reason). [Ledger.Begin] claims work or
// says why not; [Ledger.Commit], [Ledger.Fail] and [Ledger.Extend] succeed
// only with the current fencing token, so a worker that stalled past its
// lease cannot overwrite the outcome of the worker that took over. The
// protocol itself is shared by every store (an internal package); stores
// only read and write records atomically. There are two stores: the Badger
// ledger in package badgerledger, embedded, for one process; and the
// JetStream KV ledger in package jskv, for replicas sharing work and for
// clusters. Package dedupetest is the conformance suite both pass. [Do]
// runs a function once per key on any of them.
//
// What survives what:
//
//   - A process crash (SIGKILL, OOM, panic) at any instant loses nothing
//     that a ledger call reported written, and leaves no half-written record:
//     each record carries a CRC-32C, and writes are whole transactions
//     (Badger) or whole messages (JetStream). Work whose holder died is
//     pending with an expired lease; the next Begin takes it over
//     ([StatusTakenOver]) and must reconcile one-shot effects before sending
//     them again.
//   - A power loss or kernel crash loses nothing the Badger ledger reported
//     written as long as the disk honours fsync: the claim and the commit are
//     fsynced before they return (badgerledger.Ledger explains the two
//     ways). With badgerledger.Options.NoSync, the last writes may be lost.
//   - For the JetStream KV ledger the answer is the server's: a write is
//     acknowledged once it is in the stream, which the server flushes to
//     disk every sync_interval (two minutes by default). Set sync_interval
//     to "always" or a short interval, and run the bucket with 3 replicas on
//     a 3-node cluster, so an acknowledged write is on a quorum of disks.
//
// Retention must outlive every redelivery: a record that expires before a
// late retry lets the effect happen again. [CheckRetention] compares it with
// a stream's MaxAge and a consumer's MaxDeliver and backoff.
//
// # Concurrency
//
// A [Keyer] and the ledgers are safe for concurrent use by
// multiple goroutines.
package dedupe
