// Package ratelimit paces the calls to one model endpoint to the
// provider's limits: requests per minute and tokens per minute, and the
// endpoint's own word, its 429 answers.
//
// # Usage
//
// [New] wraps the transport that reaches the endpoint. Under the LLM cache,
// it sits between the cache and the network, so an answer the cache holds
// never waits for capacity:
//
//	lim, err := ratelimit.New(http.DefaultTransport, ratelimit.Options{
//		RequestsPerMinute: 500, TokensPerMinute: 200_000,
//	})
//	...
//	cfg := openai.DefaultConfig(key)
//	cfg.HTTPClient = cache.HTTPClient(&http.Client{Transport: lim})
//
// One [Transport] serves one endpoint (one provider account's limits):
// clients that share a quota share the Transport.
//
// # What a request waits for
//
// Before a request goes out it takes one request from the requests-per-minute
// budget and, from the tokens-per-minute budget, the tokens it may spend: its
// prompt, counted with the offline tokenizer of pkg/llmcache, plus its
// max_tokens (times n), or [Options.CompletionTokens] when it sets none — as
// providers themselves count a request against the limit when it arrives.
// When the answer has been read, the usage it reports (usage.total_tokens of a
// JSON answer, or of the last event of a stream that carries one) replaces the
// reservation: tokens spent beyond it are taken from the budget (later requests
// wait for them), and tokens reserved and not spent are given back, up to what
// the budget can hold. Each budget allows a burst of a tenth of a second's
// worth (at least one request; a request larger than the token burst waits
// for a full bucket and leaves the rest owing), so that a provider that
// counts its per-minute limit second by second is not exceeded either:
// configure the budgets at or just under the provider's limits. The budgets are token buckets of
// golang.org/x/time/rate.
//
// # 429s
//
// An answer 429 is not returned to the caller while the wait allows: the
// Transport pauses every request to the endpoint until the time its
// Retry-After header names (seconds or an HTTP date; without one, a backoff
// of 500ms doubling per 429 in a row up to 30s, with jitter), and sends the
// request again after the pause. A 429 also halves the rates (at most once per
// pause, down to an eighth of the configured rates) and empties the buckets,
// and the requests waiting for turns taken at the old rates take new ones;
// the rates recover by an eighth of the configured ones for every 10s
// without a 429. A provider whose real limit is lower than the configured one,
// or a quota shared with other clients, then settles into a steady stream
// instead of a 429 loop.
//
// # Bounds
//
// A request waits — for its budget, for pauses, for retries — as long as its
// context allows and at most [Options.MaxWait] in all. A request whose wait
// for the budget would end past that returns an error wrapping [ErrWait] at
// once, without waiting; one whose next retry would come too late returns the
// endpoint's last 429 answer as it came. A request whose context ends while it
// waits returns the context's error at once and gives its reservation back.
//
// # Metrics
//
// [Options.Observer] is told how long each request waited and of each 429,
// with the pipeline and step of the request's llmcache.Call; [Transport.Stats]
// returns the totals.
package ratelimit
