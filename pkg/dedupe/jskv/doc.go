// Package jskv keeps the idempotency ledger in a NATS JetStream key-value
// bucket, so that consumer replicas on any number of machines share one
// ledger: work one replica has begun is held, or done, for all of them.
//
//	js, err := jetstream.New(nc)
//	...
//	ledger, err := jskv.New(ctx, js, jskv.Options{Replicas: 3})
//	...
//	defer ledger.Close()
//	in, err := keyer.Intent(payload)
//	res, ran, err := ledger.Do(ctx, in, func(ctx context.Context) (dedupe.Result, error) {
//		id, err := openTicket(ctx, in.Key.String())
//		return dedupe.Result{DownstreamID: id}, err
//	}, dedupe.DoOptions{})
//
// [Ledger] implements [dedupe.Ledger] and keeps the same records as the
// Badger ledger (package badgerledger), deciding with the same code, so the
// two cannot disagree on a verdict.
//
// # Records
//
// Each intent is one key, the 32 hex digits of its [dedupe.Key]; its value is
// the ledger's record encoding, shared with the Badger ledger and checksummed, so a
// damaged value is an error rather than a wrong answer. The
// bucket keeps one revision per key (history 1).
//
// # Atomicity and fencing
//
// Every write is a compare-and-set on the key's revision, the stream
// sequence of its latest message: the server stores it only if the key's
// latest revision is still the one the ledger read, where revision 0 means
// "never written" and makes the write a create-if-absent. Begin reads the
// record, decides, and if the verdict needs a write (a new claim, a
// takeover, or replacing a record that has expired on the ledger's clock)
// writes expecting the revision it read. Extend, Commit and Fail read, check
// the caller's fencing token, and write the same way. A write that loses to
// another writer is retried from a fresh read, up to 32 times, as the Badger
// ledger retries a transaction conflict.
//
// The fencing token in the record is the logical fence: it tells a worker
// whose lease was taken over that the work is no longer its own. The
// revision doubles as the fence for the write itself: a decision is stored
// only if the record it was made on is still the latest. So two replicas can
// never both claim the same work, and a stalled Commit cannot overwrite a
// takeover that came between its read and its write.
//
// Reads that lead to a verdict are answered by the stream leader (the
// stream's message-get API), not through KeyValue.Get, whose direct gets any
// replica or mirror of the bucket may answer, one that lags behind included:
// a lagging read cannot cause two claims, since the write it leads to fails
// its revision check, but it could make a Commit right after a Begin report
// ErrNotFound. Begin's first read is the exception, a direct get, because
// every verdict it can lead to is safe: "done" is final, "held" from an
// older revision only delays a retry, and a claim made on it fails its
// revision check and is decided again on a read from the leader. So a duplicate, the
// case a ledger exists for, costs one read that any replica can answer, and
// new work a read and a write.
//
// The ledger never deletes or purges a key (a create racing a delete marker
// is not atomic); records expire.
//
// # Retention
//
// A record is forgotten Retention after its last change. The ledger decides
// expiry on its own clock: a record whose Expires has passed counts
// as absent, and the next Begin overwrites it in place. The server removes
// it later, by the bucket's TTL.
//
// New creates the bucket with a TTL of Retention plus an hour. The bucket TTL
// is the stream's MaxAge: the server drops a message that long after it was
// written, and with history 1 a key's latest message is its only one, so a
// record disappears TTL after its last change, which is the ledger's
// retention. The hour keeps a record readable while the ledger's clock runs
// behind the server's. Per-key TTLs (jetstream.KeyTTL) are not used: they
// need LimitMarkerTTL on the bucket, nats.go sets them only on Create (Update
// clears them), and every record has the same retention anyway; they would
// add delete markers and nothing else.
//
// An existing bucket is used as it is; New does not change it, since
// replicas configured with different retentions would fight over it. It
// fails if the bucket's TTL is shorter than
// Retention (a late retry would find no record and run its effect again),
// if the bucket is in memory when file storage was asked for, has fewer
// replicas than asked for, limits values below a record's size, or is a
// mirror. A bucket without a TTL keeps records forever: safe, but it grows.
//
// # Durability
//
// A call that returns nil has had its write acknowledged by JetStream: the
// record is in the bucket's stream, on the stream leader and, with Replicas
// 3, on a quorum of servers. A consumer that crashes loses nothing it was
// told was written, and its claims are taken over when their leases run out.
//
// Surviving a power loss or a kernel crash depends on the servers. JetStream
// hands file-storage writes to the operating system at once but fsyncs them
// only every sync_interval (default 2 minutes), so a lone server that loses
// power can lose the ledger's last writes, and with them the record that an
// effect happened. Run the bucket with Replicas 3 on a cluster of three or
// more servers (a write is acknowledged once a quorum has it, so it survives
// the loss of any one machine), or set sync_interval to always (each write
// is fsynced before it is acknowledged, at a cost in throughput), or both.
// Memory storage survives a consumer crash, not a server restart.
//
// A call that returns an error may still have been applied: the request can
// reach the server and its reply be lost, or wait in nats.go's reconnect
// buffer and be sent after the call gave up. The revision check keeps this
// safe, since such a write is stored only if nothing changed in between; but
// a claim that failed may leave the key looking held until its lease runs
// out, and a commit that failed may have been stored: Do then returns the
// error, and a later Do for the key finds the work committed.
//
// # Clocks
//
// Leases and expiry are compared with each replica's clock, against
// times that other replicas wrote into the records. Replicas that share a
// ledger therefore need clocks that agree to well within a lease: a replica
// whose clock runs ahead takes work over while its holder still thinks it
// has time. Run NTP, and keep leases long compared with the skew (tens of
// seconds against milliseconds); where a skew cannot be ruled out (a VM
// resumed, an NTP step), set Options.ClockSkew to it: a lapsed claim is
// then taken over only that long after its lease. The servers' clocks only
// drive the bucket's TTL, which has an hour of margin.
//
// # Errors and timeouts
//
// Each ledger call whose context has no deadline is bounded by 5 seconds.
// Store failures are wrapped with the operation and the key ("jskv: commit
// <key>: ...").
//
// # Concurrency
//
// A Ledger is safe for concurrent use by multiple goroutines, and any number
// of Ledgers, in any number of processes, may share a bucket.
package jskv
