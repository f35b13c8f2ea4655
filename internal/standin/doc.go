// Package standin is an offline stand-in model that speaks the OpenAI chat
// completions HTTP API, so the real client path (go-openai) runs everywhere
// and tests, demos and benchmarks need no network and no API key.
//
// # Usage
//
// [New] returns a [Server], an [http.Handler]; mount it on an
// httptest.Server, or call [Server.Start] to listen on a loopback address,
// and point an OpenAI client at the returned base URL:
//
//	s := standin.New(standin.Options{})
//	url, stop, err := s.Start("127.0.0.1:0")
//	...
//	defer stop()
//	cfg := openai.DefaultConfig("unused")
//	cfg.BaseURL = url // "http://127.0.0.1:PORT/v1"
//
// # Endpoints
//
//   - POST /v1/chat/completions: a JSON answer, or with "stream": true a
//     text/event-stream of "data: {chunk}" events ending in "data: [DONE]".
//     With "stream_options": {"include_usage": true} a last chunk with no
//     choices carries the usage.
//   - GET /v1/models: the models in [Options.Models].
//
// Anything else is answered 404 (unknown path) or 405 (wrong method) with an
// OpenAI-style error body.
//
// # Answers
//
// The answer is a function of the canonical request: the model and, per
// message, the role, the name and the text content (text parts of an array
// content are concatenated). Sampling parameters (temperature, top_p, seed,
// n, tools…) are ignored, and n is always treated as 1. The same request
// therefore gets the same bytes — id included — and a different prompt gets
// a different answer. Streaming does not change the answer: the chunks
// reassemble to the non-streaming content. The created field comes from
// [Options.Clock], so with a fixed clock two answers are byte-identical.
//
// Every answer is labelled: the content starts with [Label]
// ("[stand-in model]"), system_fingerprint is [Fingerprint]
// ("oncegate-standin"), and every response carries the header
// "X-Oncegate-Standin: 1".
//
// # Structured output
//
// A request with "response_format": {"type": "json_schema", "json_schema":
// {"schema": ...}} is answered with JSON valid against the schema (the
// subset structured output uses: type, properties, required, items, enum,
// const, minimum, maximum, minItems, maxItems, maxLength, anyOf), chosen
// by the request like any answer; free-text strings begin with [Label].
// The schema is part of the canonical request. [Options.OffSchemaRate]
// makes that fraction of them break the schema (a required property left
// out), as a real model may.
//
// # Tokens
//
// Usage is an estimate, not a real tokenizer, but it is deterministic:
//
//   - prompt tokens: per message 4 + ceil(bytes/4), where bytes counts the
//     role, name and text content, plus 3 for the reply priming;
//   - completion tokens: the stand-in generates word by word, and each
//     token is one word with its leading space, the label being the first.
//
// max_completion_tokens (or, if it is zero, the older max_tokens) keeps the
// first N tokens of the answer and sets finish_reason to "length"; otherwise
// finish_reason is "stop".
//
// # Faults
//
// [Options.ErrorRate], [Options.TimeoutRate] and [Options.RateLimitRate]
// inject 500 answers, hangs until the client gives up, and 429 answers with
// a Retry-After header. Each valid chat completion request draws one number
// from a generator seeded with [Options.Seed], before [Options.Latency] is
// applied, so for a given order of requests the outcomes are reproducible.
// Malformed requests (400), oversized bodies (413) and model listings draw
// nothing and are never faulted.
//
// # A real rate limit
//
// [Options.RequestsPerMinute] makes the stand-in behave as a provider's limit
// does: past N requests in any sliding minute (or [Options.LimitWindow]), a
// valid chat completion request is answered 429 at once, with a Retry-After
// of the whole seconds until the window has room, and counted in
// [Stats].OverLimit. Requests refused do not count against the limit.
//
// # Counters
//
// [Server.Stats] returns counts of requests by outcome and of tokens
// served; tests and benchmarks use them to count upstream calls.
//
// # Concurrency
//
// A Server is safe for concurrent use by multiple goroutines. With
// concurrent requests the fault each one gets depends on arrival order.
package standin
