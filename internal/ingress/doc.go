// Package ingress is Oncegate's webhook ingress: an HTTP server that
// receives a provider's webhooks, verifies them, and publishes them to a
// JetStream subject as triggers, so that a provider can point at Oncegate
// directly.
//
// # Sources
//
// Each source of [Options] (a spec.Source) is served at POST /hooks/<name>,
// or /hooks/<name>/<tenant> when it has a secret per tenant. How a source
// is verified and where its ids come from is configuration (package spec):
// the signature's algorithm (HMAC-SHA256, -SHA1, -SHA512, Ed25519),
// encoding, header, prefix and separator, the signed string as a template
// over {body}, {timestamp}, {id}, {url}, {form} and named headers, the
// timestamp and its unit; or credentials (a token header, bearer or basic
// auth) on any source; the places the delivery id and the event type come
// from (a header, a JSON Pointer into the body, the body's digest). A kind
// is a preset of all that for a provider: github, stripe, standard,
// sentry, alertmanager, hmac, gitlab, slack, shopify, pagerduty, linear,
// jira, twilio, grafana (spec.Kinds).
//
// Every comparison is constant-time; two secrets are accepted during a
// rotation; several signatures in one header are each tried, and elements
// that are not well-formed signatures are skipped; secrets come from the
// environment or files and are never logged. A source whose secret is not
// set is reported when the server is made (and by CheckSecrets, which
// `consumer config check` runs), and answers 503.
//
// # What is published
//
// The body is the provider's payload unchanged (for a form, the JSON of
// its payload field or of its fields; for Alertmanager and Grafana, one
// document per alert, see splitAlerts), with headers Nats-Msg-Id
// ("<source>:<delivery id>", "<source>/<tenant>:<delivery id>", followed
// by ":<digest>" where the delivery id or event type is not the
// provider's word: see below), Oncegate-Source, Oncegate-Event,
// Oncegate-Delivery, Oncegate-Tenant, the trace context and the source's
// copy_headers. The request is answered 200 only after JetStream's PubAck
// for every trigger it carries (the triggers of one request are published
// at once, then waited for); a PubAck marked duplicate (a provider's
// retry within the stream's duplicate window) counts as stored. When
// JetStream does not answer within the publish timeout, or the NATS
// connection is down, the answer is 503 with Retry-After, so that the
// provider retries and nothing is acknowledged that is not stored.
//
// # Bad input
//
// Refusals are JSON, {"error": "...", "code": "<outcome>"}: a wrong or
// missing signature, or a signed timestamp outside the tolerance ("signed
// 10m1s ago"), 401; a body over the limit 413 (from its Content-Length,
// before it is read, or as soon as the read passes the limit); a method
// other than POST 405; a body that is not application/json (or a form,
// for a source that takes forms) 415; an unknown source or tenant 404,
// before the body is read; a body that is not framed as a JSON object or
// array, or lacks the delivery id, 400 (the consumer validates the JSON,
// and dead-letters a payload that is not I-JSON). None of them publishes
// anything; each is counted in oncegate_ingress_requests_total by its
// outcome, and logged at debug with the source, the reason and the remote
// address. A request refused before its body is read closes its
// connection rather than have the body read.
//
// # Replays
//
// A delivery id or event type taken from a header the signature does not
// cover (GitHub's X-GitHub-Delivery and X-GitHub-Event, Sentry's,
// Shopify's, Jira's, Linear's delivery header, any header under token,
// bearer or basic auth) is whatever the request says, so the Nats-Msg-Id
// binds it to a digest of the event type and the body: a provider's retry
// is the same message, and an old signed body sent under a delivery id
// still to come is another one, which cannot take the real delivery's
// place in the stream. A delivery id the signature covers (Standard
// Webhooks' {id}), or that comes from the body (Stripe's, PagerDuty's,
// Slack's event ids, an alert's fingerprint), is used alone: an old body
// brings only its own old id. config.Validate refuses a pipeline fed by a
// source that keys on such unsigned headers. A signed timestamp is checked
// against the tolerance, which the configuration keeps within half the
// trigger stream's duplicate window.
package ingress
