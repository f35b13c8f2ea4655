// Package sink performs side effects, each carrying its intent key, so that
// the receiver drops a repeat: the last guard behind the ledger when an
// effect was performed but its commit or ack was lost.
//
// # Usage
//
// A sink turns an [Effect] (key, pipeline, step, body, headers) into a
// [Result] or an [*Error]. The consumer calls it between claiming the key
// in the ledger and committing it, and stores [Result.Body]:
//
//	s, err := sink.NewHTTP(sink.HTTPOptions{URL: "https://api.example.com/payments"})
//	...
//	res, err := s.Deliver(ctx, sink.Effect{Key: key.String(), Pipeline: "billing", Step: "charge", Body: body})
//
// There are three sinks, each built from an options struct whose zero
// fields mean the documented defaults:
//
//   - [JetStream] publishes with Nats-Msg-Id = key, so the stream's
//     Duplicates window drops a repeat; a PubAck marked duplicate is a
//     success with [Result.Duplicate] set.
//   - [HTTP] sends with Idempotency-Key = key and retries 408, 409, 425,
//     429, 5xx and network errors with backoff within one call. With a
//     [RateLimit] it keeps within the receiver's quota, waiting for room
//     and waiting out a 429's Retry-After, and collapses what the receiver
//     would collapse ([HTTPOptions.Coalesce]); with a [Digest] it sends
//     the effects of one group as one request.
//   - [File] writes Dir/<key>.json whole or not at all; the same content
//     again is a duplicate, other content is [ErrKeyConflict].
//
// A sink knows how to perform an effect with a key; whether to perform it
// is the ledger's business.
//
// # Errors
//
// Every error of Deliver and of the constructors is an [*Error] and
// matches exactly one of [ErrPermanent] (dead-letter the trigger) and
// [ErrRetryable] (retry it later with the same key) under errors.Is. It
// also unwraps to its cause, such as context.Canceled or
// jetstream.ErrNoStreamResponse. Error texts begin with "sink: " and never
// hold header values, an HTTP URL's query, or the segments of its path that
// look like tokens, which may be secrets; the rest of the path stays, so
// that an error says which endpoint refused. The sinks do not log.
//
// # Keys
//
// A key is 32 lowercase hex digits (the text form of dedupe.Key); every
// sink rejects any other spelling with a permanent error, so a key can
// neither escape the file sink's directory nor add tokens to a subject.
//
// # Concurrency
//
// Sinks are safe for concurrent use by multiple goroutines. Deliver blocks
// until the effect is done or has failed; nothing runs after it returns.
package sink
