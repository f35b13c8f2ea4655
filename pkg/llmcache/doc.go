// Package llmcache makes a retried pipeline step reuse the model's answer
// instead of paying for it again, and stops a retry storm from spending
// without limit.
//
// # Usage
//
// A [Cache] keeps answers in a [Store]: Badger, embedded, for one process
// (package llmcache/badgerstore), or JetStream KV buckets shared by every
// replica of a deployment (package llmcache/jsstore, through [NewStore]),
// which makes identical misses on different replicas one upstream call
// and each intent's budget one budget. This package imports neither. Put
// a go-openai client behind the cache in one line, and say per call who
// is asking:
//
//	cache, err := badgerstore.Open("data/llm-cache", llmcache.Options{Budget: 20_000})
//	...
//	cfg := openai.DefaultConfig(apiKey)
//	cfg.HTTPClient = cache.HTTPClient(nil)
//	client := openai.NewClientWithConfig(cfg)
//
//	ctx = llmcache.WithCall(ctx, llmcache.Call{Namespace: "acme/alerts", Step: "triage", Intent: key.String()})
//	resp, err := client.CreateChatCompletion(ctx, req) // or CreateChatCompletionStream
//
// It works with any OpenAI-compatible endpoint the client can reach:
// OpenAI, Azure OpenAI, vLLM, Ollama, llama.cpp's server. Package
// llmcache/llmtest serves a fake one for tests and examples.
//
// A call made for work that [dedupe.Ledger.Do] runs (or package jsonce,
// httponce or wmonce) needs no Intent: the cache takes the intent on the
// context ([dedupe.IntentFrom]) as the call's, so that every retry of the
// work draws from one budget.
//
// # Why a RoundTripper
//
// The cache sits under go-openai, as the http.RoundTripper of the client's
// HTTP client, rather than over it as a wrapper. go-openai's
// ChatCompletionStream cannot be built outside its package, so a wrapper
// could not hand a replayed stream back as the type callers already use;
// under the client, a stored stream is replayed as the same server-sent
// events and go-openai parses it as it parsed the original. The same
// transport serves plain and streamed calls, every current and future
// field of the request (it keys the request body, not a Go struct), and
// leaves every other endpoint alone. What a wrapper would take as
// arguments (namespace, step, intent, mode) rides on the request context.
//
// # Keys
//
// An answer is found by its [Key]: the model endpoint ([Options.Endpoint],
// by default the base URL: a switch of endpoint never serves the old one's
// answers), the namespace (one tenant never reads another's answers), and
// the canonical form (RFC 8785, package canon) of
// every field of the request body that can change the answer; see [KeyOf].
// A [Template] in the Call stands for the rendered messages, so a prompt
// that interpolates a timestamp still hits. The API key is never part of a
// key, a log record, an error or a stored byte.
//
// # What is stored
//
// Only complete, successful answers: status 200, every choice finished
// with "stop" or a tool call (not "length", not "content_filter"), and for
// a stream the final [DONE] marker. Errors, rate limits, truncated answers
// and streams cut off are passed to the caller and not stored, so the retry
// asks again. The stored bytes are the response body as the model sent it,
// returned byte for byte on a hit with the header X-Oncegate-Cache: hit.
// Each entry has a TTL (Options.TTL, or Call.TTL), and a size cap.
// [Mode] controls reading and writing per call.
//
// # Concurrent misses
//
// Identical requests that miss at the same time make one upstream call;
// every caller reads the answer as it arrives. The call runs detached from
// the callers' contexts, under Options.FillTimeout: a caller that gives up
// stops waiting, and the others still get the answer, which is stored.
//
// # Tokens and budgets
//
// Before each upstream call the prompt is counted with an offline
// tokenizer (github.com/tiktoken-go/tokenizer); after it, the API's usage
// is what is counted. Oncegate's metrics (oncegate_llm_*) report per
// namespace and step the tokens spent, the tokens hits saved, and both
// priced by [Prices]; every response says in [HeaderCache] how it was
// answered. A
// budget per intent ([Options.Budget], [Call.Budget]) reserves each call's
// worst case (prompt estimate plus n times its max tokens, or
// [Call.CompletionTokens] for a call that sets none) before it goes out
// and refuses, with a [*BudgetError], a call that could pass the budget;
// spending and reservations are kept in the store, so they outlive
// restarts and, with a shared store, are one budget across replicas.
// Spend limits in dollars ([SpendLimit]) work alike. A request too large
// to key is refused under either ([ErrRequestTooLarge]), and one whose
// members a provider could read otherwise than the cache (a member twice,
// or one named but for its case, as "MAX_TOKENS") is refused as invalid, so that the model and max tokens a limit counts
// are the ones the provider reads.
//
// # A shared store
//
// With a store shared between processes (a [Filler]), a miss first takes
// the key's fill claim, or waits, up to [Options.SharedWait], for the
// answer of the process that holds it (a dead holder's claim lapses and is
// taken over), or, when the answer it finds has expired (a shared store
// may keep entries past the TTL), claims the key as for a new one. A store
// that cannot be read then fails the call with [ErrStoreUnavailable]
// rather than pay for an answer that may be stored.
//
// # A paid answer is kept
//
// An answer the model was paid for is never dropped because the store
// refused it (a KV leader election, a NATS server restarting, a full
// disk). Its callers get it at once; the answer is held in the Cache's
// memory, where every lookup of this process finds it (served as a hit),
// and its write is retried with backoff (up to 5s between attempts) until
// it lands, however long that takes, under the fill claim, so that other
// processes wait for it rather than pay for another. The consumer's
// oncegate_llm_answers_held counts the answers held.
//
// Meanwhile the answer lives in this process, and, with [Options.HoldDir],
// on its disk: every answer paid for is written there before the store is
// asked to keep it, and removed once it does, so that a process killed in
// between (the servers down, a crash loop, an outage of every replica)
// leaves the answer to its next start, which holds it and stores it
// (unless another process stored an answer for the key meanwhile), and the
// intent's retry is a hit. Without a HoldDir, [Cache.Close] tries the
// write once more and then gives it up (counted in NotStored), and a
// process killed, or closed while the store is unreachable, loses it: the
// intent's next try pays the model again. Either way, a process killed
// between the model's answer and its first write (to HoldDir, or to the
// store) loses that answer.
package llmcache
