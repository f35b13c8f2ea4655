// Package dedupe runs a side effect once per unit of work, however often
// its trigger is retried, redelivered or re-planned: it derives an intent
// key from the trigger, and a ledger runs the work once per key.
//
//	keyer, err := dedupe.NewKeyer(dedupe.KeySpec{Pipeline: "tickets", Step: "open", Fields: []string{"/issue/id"}})
//	...
//	ledger, err := badgerledger.Open("data/ledger", badgerledger.Options{})
//	...
//	defer ledger.Close()
//	in, err := keyer.Intent(payload)
//	res, ran, err := ledger.Do(ctx, in, func(ctx context.Context) (dedupe.Result, error) {
//		id, err := openTicket(ctx, in.Key.String()) // the key as the sink's idempotency key
//		return dedupe.Result{DownstreamID: id}, err
//	}, dedupe.DoOptions{})
//
// [Run] is Do for a value of the caller's type, kept as JSON:
//
//	ticket, ran, err := dedupe.Run(ctx, ledger, in, func(ctx context.Context) (Ticket, error) { ... })
//
// The package holds the keys and the [Ledger] contract; it imports neither
// Badger nor NATS. The ledgers are packages of their own: badgerledger
// (embedded, one process) and jskv (a JetStream KV bucket, for replicas and
// clusters). Package jsonce wraps a nats.go JetStream message handler with
// a ledger, and package httponce an http.Handler (the Idempotency-Key
// header). The in-memory duplicate window is package window.
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
//  3. the pipeline and step names, the run id (for a PerRun spec), the
//     spec itself and the selection are length-prefixed into one
//     domain-separated message and hashed.
//
// Work a client names with a string of its own (an Idempotency-Key header)
// is keyed by [ClientKey], in a domain of its own and a scope of the
// caller's choosing (the route, the client).
//
// Keys are 128 bits because they are durable: at a billion keys a 64-bit
// hash collides with real probability, and a collision silently swallows
// real work. The text form, [Key.String], is 32 lowercase hex digits and is
// what goes into Nats-Msg-Id and Idempotency-Key headers. Keys are stable
// across releases: a change to their derivation gets a new domain version.
//
// The default hash, xxHash, is fast and fine for payloads nobody crafts
// against you. Where payloads come from untrusted parties who could profit
// from suppressing someone else's work, set KeySpec.SHA256.
//
// # The ledger
//
// A [Ledger] keeps a record of each key: claimed by a worker until a
// deadline (its lease, renewed while the work runs), committed with the
// [Result], or given up with the reason. [Ledger.Do] claims the key, runs
// the work, and commits its result; a later call for the key returns that
// result without running anything. The work's context carries its intent
// ([IntentFrom]), to send downstream as the effect's own idempotency key.
// The ledger keeps the fingerprint of the payload the work was begun with:
// the same key with another payload is the same work by default (an agent
// rewording its request), or refused with [ErrMismatch]
// (DoOptions.RejectMismatch). Every claim carries a fencing token, so
// a worker that stalled past its lease cannot overwrite the outcome of the
// worker that took over.
//
// What survives what:
//
//   - A process crash (SIGKILL, OOM, panic) at any instant loses nothing
//     the ledger reported written, and leaves no half-written record: each
//     record carries a CRC-32C, and writes are whole transactions (Badger)
//     or whole messages (JetStream). Work whose holder died is taken over
//     by the next call, whose function sees [TakenOver] and must reconcile
//     one-shot effects before sending them again.
//   - A power loss or kernel crash loses nothing the Badger ledger reported
//     written as long as the disk honours fsync (unless
//     badgerledger.Options.NoSync is set).
//   - For the JetStream KV ledger the answer is the server's: see package
//     jskv.
//
// Records are kept for a retention period (a week by default) after their
// last change. Retention must outlive every redelivery: a record that
// expires before a late retry lets the effect happen again.
//
// # Concurrency
//
// A [Keyer] and the ledgers are safe for concurrent use by multiple
// goroutines.
package dedupe
