// Package ingress is Oncegate's webhook ingress: an HTTP server that
// receives a provider's webhooks, verifies them, and publishes them to a
// JetStream subject as triggers, so that a provider can point at Oncegate
// directly.
//
// # Sources
//
// Each configured source (config.Source) is served at POST /hooks/<name>
// and has a kind that says how its requests are verified and where the
// delivery id comes from:
//
//	github        X-Hub-Signature-256 (hex HMAC-SHA256 of the body); X-GitHub-Delivery; a ping is answered 200 without a trigger
//	stripe        Stripe-Signature "t=…,v1=…[,v1=…]" over "t.body", within the tolerance; the event's id
//	standard      Standard Webhooks webhook-id, webhook-timestamp, webhook-signature "v1,<base64> …" over "id.t.body", whsec_ secret; webhook-id
//	sentry        Sentry-Hook-Signature (hex HMAC-SHA256 of the body); Request-ID
//	alertmanager  a bearer token or basic auth (Alertmanager does not sign); one trigger per alert, from fingerprint, startsAt and status
//	hmac          a hex HMAC-SHA256 of the body in a configured header; a configured delivery header, else the body's SHA-256
//
// Every comparison is constant-time; two secrets are accepted during a
// rotation; secrets come from the environment or files and are never
// logged.
//
// # What is published
//
// The body is the provider's payload unchanged (for Alertmanager, one
// document per alert, see below), with headers Nats-Msg-Id
// ("<source>:<delivery id>"), Oncegate-Source, Oncegate-Event and
// Oncegate-Delivery. The request is answered 200 only after JetStream's
// PubAck for every trigger it carries; a PubAck marked duplicate (a
// provider's retry within the stream's duplicate window) counts as stored.
// When JetStream does not answer within the publish timeout, or the NATS
// connection is down, the answer is 503 with Retry-After, so that the
// provider retries and nothing is acknowledged that is not stored.
//
// # Bad input
//
// A wrong or missing signature, or a signed timestamp outside the
// tolerance, is answered 401; a body over the limit 413 (from its
// Content-Length, before it is read, or as soon as the read passes the
// limit); a method other than POST 405; a body that is not
// application/json 415; an unknown source 404; a body that is not framed
// as a JSON object or array, or lacks the delivery id, 400 (the consumer
// validates the JSON, and dead-letters a payload that is not I-JSON). None
// of them publishes anything, and each is counted in
// oncegate_ingress_requests_total by its outcome.
//
// Sentry's Sentry-Hook-Timestamp is not covered by its signature, so a
// sentry source has no timestamp tolerance (nor has GitHub, which sends no
// timestamp); a replayed delivery carries its delivery id, and the stream's
// duplicate window and the ledger keep it from being worked twice.
package ingress
