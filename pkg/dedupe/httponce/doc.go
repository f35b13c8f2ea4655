// Package httponce makes an HTTP handler honour the Idempotency-Key request
// header (IETF draft-ietf-httpapi-idempotency-key-header): a client that
// retries a POST with the same key gets the first response again, and the
// handler runs once, however many retries, replicas and crashes there are.
//
//	ledger, err := jskv.New(ctx, js, jskv.Options{}) // or badgerledger.Open, for one process
//	...
//	once, err := httponce.Middleware(ledger, httponce.Options{
//		Client:   func(r *http.Request) string { return accountOf(r.Context()) }, // who your authentication says sent r
//		Required: true,
//	})
//	...
//	mux.Handle("POST /charges/{id}/refunds", authenticate(once(http.HandlerFunc(refund))))
//
// # Clients
//
// A key names work within its client's own space: Options.Client returns
// the authenticated client a request comes from (an account, the owner of
// an API key; never the credential itself, which may change between a
// request and its retry), and the same key from two clients names two
// pieces of work. Without it, a client that sends another's key (guessed,
// leaked, or chosen alike by careless clients) would get the other's
// response. So [Middleware] refuses Options without a Client ([ErrNoClient])
// unless Options.SharedKeys says, knowingly, that all clients share one
// key space; and a request whose Client is "" is answered 403 (see "Client
// unknown"). Put the middleware after your authentication.
//
// # What a request gets
//
// A request whose method is gated (POST and PATCH by default) and that
// carries an Idempotency-Key is run through the ledger's [dedupe.Ledger.Do]
// under a key derived from the client's string, its route and its client
// ([dedupe.ClientKey]), with a fingerprint of the request (see "Requests"):
//
//   - the first request with the key runs the handler; its response (the
//     status, the headers Options.Headers names, and the body) is kept in
//     the ledger and also sent;
//   - a request with the key whose work is done gets the kept response,
//     with the header Idempotent-Replayed: true, and the handler does not
//     run;
//   - a request with the key while another one with it is being handled
//     gets 409 Conflict with Retry-After (see "Request in flight");
//   - a request with the key and another request target or payload gets
//     422 (see "Key reused");
//   - a request without the key runs the handler as it would without this
//     package, unless Options.Required is set (see "Key missing").
//
// Not every response is kept. What the handler's status says of the work
// decides:
//
//   - 400, 401, 403 and 404 (the request's form, credentials, permissions
//     or target refused at that moment, before any work), and 408, 425,
//     429 and 503 (try again later) say that nothing was done: the response
//     is sent and not kept, and the client's retry with the key (its
//     credentials renewed, say) runs the handler again, as new work. A
//     corrected payload is another request: it takes a new key (422
//     otherwise);
//   - any other 5xx says the handler failed mid-work, and the work may have
//     been done part way: the response is sent and not kept, and the retry
//     runs the handler with [dedupe.TakenOver] reporting true, so that it
//     finds out what was done before doing it (a handler that panics is
//     taken the same way). Answer 503 when nothing was done;
//   - every other status (2xx, 3xx, and 4xx on the request's merits, such
//     as 402, 409 or 422) is the work's answer: kept, and replayed to the
//     retries.
//
// The handler runs to its end even if the client hangs up (its context
// does not end with the client's connection), so that the retry finds the
// work done rather than half done. Its context ends if its claim on the key
// is lost (see [dedupe.Ledger]), and carries the intent
// ([dedupe.IntentFrom]: send its key downstream as the effect's own
// idempotency key) and, for work an earlier run may have done,
// [dedupe.TakenOver].
//
// # Requests
//
// A retry is the same request: the same method, request target and
// payload. The fingerprint kept with the key covers the request's method,
// route, request target (its path and query, byte for byte as the client
// sent them: the same key and body for /charges/ch_2/refunds are not a
// retry of /charges/ch_1/refunds) and body: the canonical form (RFC 8785,
// package canon) of a JSON body (Content-Type application/json or any
// +json type), so that member order and whitespace do not make a retry
// another payload, and the bytes and media type of any other body, or of
// JSON that is not I-JSON. The body is read whole, up to
// Options.MaxBodyBytes, before the handler runs.
//
// # Responses
//
// A kept response must fit the ledger's result limit ([dedupe.MaxResultBytes],
// with its status and headers); a response whose body does not fit is kept
// without its body, and replayed with its status and headers, an empty body,
// and the header Idempotent-Replayed-Body: omitted. A response marked
// Cache-Control: no-store (a secret shown once, say) is not stored: the work
// is recorded done with its status alone, and a retry gets that status with
// no headers but Cache-Control: no-store and Idempotent-Replayed-Body:
// no-store, and an empty body. The handler's response is buffered until it
// returns: a handler that streams its response is not streamed through.
//
// # Key lifetime
//
// The ledger keeps a key's record for its retention after the work's last
// change: a week by default (badgerledger.Options.Retention,
// jskv.Options.Retention). A request with a key whose record has expired is
// new work, and runs the handler again. The draft asks a resource to
// publish its expiration policy: state this retention in your API's
// documentation, and keep it longer than your clients retry.
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
// # Client unknown
//
// 403 Forbidden: the request carries an Idempotency-Key, and the server
// cannot tell which client sent it (Options.Client returned ""), so it
// cannot keep the key apart from other clients' keys. Nothing was run.
// Authenticate, then retry with the same key.
//
// # Request in flight
//
// 409 Conflict, with Retry-After: another request with the key is being
// handled (or its server died while handling it, and its claim has not run
// out yet). Retry after the given seconds to get its response.
//
// # Key reused
//
// 422 Unprocessable Content: the key was used before with another request
// target or payload. Use a new key for a new request.
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
