// Package httponce makes an HTTP handler honour the Idempotency-Key request
// header (IETF draft-ietf-httpapi-idempotency-key-header): a client that
// retries a POST with the same key gets the first response again, and the
// handler runs once, however many retries, replicas and crashes there are.
//
//	ledger, err := jskv.New(ctx, js, jskv.Options{}) // or badgerledger.Open, for one process
//	...
//	once, err := httponce.Middleware(ledger, httponce.Options{Required: true})
//	...
//	mux.Handle("POST /charges", once(http.HandlerFunc(charge)))
//
// # What a request gets
//
// A request whose method is gated (POST and PATCH by default) and that
// carries an Idempotency-Key is run through the ledger's [dedupe.Ledger.Do]
// under a key derived from the client's string, its route and, where
// Options.Client names one, the authenticated client ([dedupe.ClientKey]),
// with a fingerprint of its payload:
//
//   - the first request with the key runs the handler; its response (the
//     status, the headers Options.Headers names, and the body) is kept in
//     the ledger and also sent;
//   - a request with the key whose work is done gets the kept response,
//     with the header Idempotent-Replayed: true, and the handler does not
//     run;
//   - a request with the key while another one with it is being handled
//     gets 409 Conflict with Retry-After (see "Request in flight");
//   - a request with the key and another payload gets 422 (see "Key
//     reused");
//   - a request without the key runs the handler as it would without this
//     package, unless Options.Required is set (see "Key missing").
//
// A response with status 408, 425, 429 or 5xx is sent and not kept: the
// work is released, and the client's retry runs the handler again (the
// handler should then not have done its effect, or do it again under the
// same key). Every other status is kept, 4xx included: the retry gets the
// same answer.
//
// The handler runs to its end even if the client hangs up (its context
// does not end with the client's connection), so that the retry finds the
// work done rather than half done. Its context ends if its claim on the key
// is lost (see [dedupe.Ledger]), and carries the intent
// ([dedupe.IntentFrom]: send its key downstream as the effect's own
// idempotency key) and, for work whose previous handler died mid-way,
// [dedupe.TakenOver].
//
// # Payloads
//
// The payload's fingerprint covers the request's method, route, query
// string and body: the canonical form (RFC 8785, package canon) of a JSON
// body (Content-Type application/json or any +json type), so that member
// order and whitespace do not make a retry another payload, and the bytes
// and media type of any other body, or of JSON that is not I-JSON. The body
// is read whole, up to Options.MaxBodyBytes, before the handler runs.
//
// # Responses
//
// A kept response must fit the ledger's result limit ([dedupe.MaxResultBytes],
// with its status and headers); a response whose body does not fit is kept
// without its body, and replayed with its status and headers, an empty body,
// and the header Idempotent-Replayed-Body: omitted. The handler's response
// is buffered until it returns: a handler that streams its response is not
// streamed through.
//
// # A crash between the effect and the commit
//
// A server killed after the handler's effect and before the ledger recorded
// its response leaves the key claimed. The client's retry reaches a server
// (the same process restarted, or another replica) that takes the work over
// — at once on a Badger ledger reopened by the next process, after the
// dead claim's lease on a JetStream KV ledger, answering 409 with
// Retry-After meanwhile — and runs the handler again with [dedupe.TakenOver]
// reporting true on its context: the handler must then find out whether its
// effect happened (ask the payment provider for the charge carrying the
// intent key, say) before doing it, or do it under the intent key at a
// target that dedupes by it. Either way the client gets one effect and one
// answer (TestKillBetweenEffectAndCommit).
//
// # Problems
//
// Errors are answered with application/problem+json bodies (RFC 9457)
// whose type is a link to the heading below that describes them.
//
// # Key missing
//
// 400 Bad Request: Options.Required is set and the request carries no
// Idempotency-Key.
//
// # Key invalid
//
// 400 Bad Request: the Idempotency-Key is not a key: more than one, not 1
// to 255 printable ASCII characters, or a structured-field string (the
// draft's form, in double quotes) that does not parse.
//
// # Request in flight
//
// 409 Conflict, with Retry-After: another request with the key is being
// handled (or its server died while handling it, and its claim has not run
// out yet). Retry after the given seconds to get its response.
//
// # Key reused
//
// 422 Unprocessable Content: the key was used before with another payload.
// Use a new key for a new request.
//
// # Body too large
//
// 413 Content Too Large: the body is larger than Options.MaxBodyBytes.
//
// # Ledger unavailable
//
// 503 Service Unavailable, with Retry-After: the ledger could not be
// reached, so nothing was run. Retry later with the same key.
package httponce
