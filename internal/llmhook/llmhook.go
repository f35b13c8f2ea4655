// Package llmhook is what Oncegate's own packages read of a pkg/llmcache
// Cache that a user of the cache does not need: the per-step counters the
// metrics and the console show, a summary of the store for the inspect
// command, the stored answer for a key, the tokens spent on an intent, and
// the reading and estimation of a chat completion request body that the
// proxy, the rate limiter and the admin service share with the cache.
//
// Package llmcache sets the functions when it is initialised, so they are
// set in every program that holds a *llmcache.Cache to pass them. They take
// the cache as an any, because this package sits below llmcache (which
// imports it for the types); passing anything but a *llmcache.Cache panics.
// Keeping these here keeps llmcache's exported API to what a user embeds it
// for (issue 38), as internal/ledger did for pkg/dedupe.
package llmhook

import "time"

// StepStats counts what one namespace's step did with the cache. Every
// chat completion request through the transport is counted once in
// Requests and once in exactly one of Hits, Shared, Misses, Bypassed,
// BudgetDenied, Invalid and Unavailable.
type StepStats struct {
	// Namespace and Step name the calls counted: the Call's, or the
	// cache's default namespace and step "" for a request without one.
	Namespace, Step string

	Requests     int64 // chat completion requests seen
	Hits         int64 // answered from the store
	Shared       int64 // answered by joining an identical call in flight
	Misses       int64 // sent upstream (default, no-store and refresh modes)
	Bypassed     int64 // sent upstream in ModeBypass, or too large to key
	BudgetDenied int64 // refused with ErrBudgetExceeded or ErrSpendLimit
	Invalid      int64 // bodies that could not be keyed, sent upstream as is
	Unavailable  int64 // refused with ErrStoreUnavailable: a shared store could not be read

	Stored    int64 // answers written to the store
	NotStored int64 // upstream answers not stored: errors, truncations, cancellations, no-store
	Errors    int64 // upstream calls that failed (transport error or status >= 400)
	// Held is a gauge: answers paid for that the store refused, held in
	// this process (and served from it) while their write is retried.
	Held int64

	// Tokens the upstream calls spent, from the API's usage where it was
	// given and from the tokenizer where it was not.
	PromptTokens, CompletionTokens int64
	// EstimatedPromptTokens sums the tokenizer's estimates of the prompts of
	// upstream calls, to compare with PromptTokens. The tokenizer runs only
	// where its count is used: a call under a token budget (counted before
	// it goes out), or an answer that reports no usage.
	EstimatedPromptTokens int64
	// Tokens that hits and shared answers did not spend again.
	SavedPromptTokens, SavedCompletionTokens int64

	// CostSpent and CostSaved price those tokens with the cache's Prices,
	// in US dollars.
	CostSpent, CostSaved float64
}

// TokensSpent is PromptTokens + CompletionTokens.
func (s StepStats) TokensSpent() int64 { return s.PromptTokens + s.CompletionTokens }

// TokensSaved is SavedPromptTokens + SavedCompletionTokens.
func (s StepStats) TokensSaved() int64 { return s.SavedPromptTokens + s.SavedCompletionTokens }

// Summary describes what a cache's store holds.
type Summary struct {
	Answers      int   // live stored answers
	AnswerBytes  int64 // their bodies' total size
	AnswerTokens int64 // the tokens they cost when made: what each hit saves
	Streams      int   // of Answers, streamed ones
	Budgets      int   // intents with recorded spending
	BudgetSpent  int64 // tokens recorded across those intents
}

// Answer is one stored answer: the HTTP response the model gave, byte for
// byte, and what it cost.
type Answer struct {
	Created     time.Time // when the model gave it
	Expires     time.Time // when the cache stops serving it
	Status      int       // always 200: only successful answers are stored
	ContentType string    // application/json, or text/event-stream
	Model       string    // the model the request named
	Stream      bool      // Body is a server-sent event stream
	Body        []byte    // the response body, byte for byte

	// PromptTokens and CompletionTokens are what the answer cost when it
	// was made; Estimated is set when they come from the offline
	// tokenizer because the answer reported no usage.
	PromptTokens, CompletionTokens int64
	Estimated                      bool
}

// Estimate is what a chat completion request may spend, counted before it
// is sent.
type Estimate struct {
	// Prompt is the prompt tokens, counted with the offline tokenizer of
	// the request's model (o200k_base for a model it does not know).
	Prompt int64
	// MaxCompletion is the completion tokens the request allows: n times
	// the larger of max_completion_tokens and max_tokens, at most
	// math.MaxInt64 less Prompt (so that their sum is counted without
	// overflow); 0 when the request sets no cap.
	MaxCompletion int64
}

// Request is what the cache reads of a chat completion request to price
// it and reserve for it, before it is sent.
type Request struct {
	// Model is the request's "model" member.
	Model string
	// N is the choices the request asks for: its "n", at least 1.
	N int64
	// MaxTokens is the completion tokens the request allows per choice:
	// the larger of max_completion_tokens and max_tokens; 0 when it sets
	// neither (or only values of 0 or less), and the call then reserves
	// the Call's CompletionTokens per choice.
	MaxTokens int64
}

// The functions package llmcache sets. Each takes c, a *llmcache.Cache.
var (
	// Stats returns the counters of every namespace and step c has seen,
	// sorted by namespace and step.
	Stats func(c any) []StepStats

	// Saved counts, in c's figures for namespace's step, the tokens (and
	// their cost at c's prices for model) of an answer reused outside the
	// cache — a model step's answer taken from its intent's ledger record
	// — as a hit's are counted.
	Saved func(c any, namespace, step, model string, prompt, completion int64)

	// Summarize scans c's store.
	Summarize func(c any) (Summary, error)

	// Get returns the live answer c holds or has stored for key k.
	Get func(c any, k [16]byte) (*Answer, bool, error)

	// Delete removes the stored answer for k, if any.
	Delete func(c any, k [16]byte) error

	// Spent returns the tokens spent on intent in namespace ("" for c's
	// default), as c's token budget counts them: the calls made under a
	// budget; a call under none is not counted.
	Spent func(c any, namespace, intent string) (int64, error)

	// ReadRequest reads a chat completion request body as the cache reads
	// it. It returns an error wrapping llmcache.ErrInvalidRequest for a
	// body that is not a JSON object, and for one a provider could read
	// otherwise than the cache: an object (the request, a message, a
	// content part) that holds a member twice, or one named as a member
	// the cache reads but for its case ("Model", "MAX_TOKENS",
	// "max_to\u212Aens"), which decoders written in Go (as the cache's
	// own, and providers such as Ollama) match to it and others ignore.
	// Such a body could name one model or max_tokens to a spend limit and
	// another to the provider.
	ReadRequest func(body []byte) (Request, error)

	// EstimateRequest reads the body of a chat completion request and
	// returns what it may spend, as the cache counts it before an upstream
	// call, with ReadRequest's errors.
	EstimateRequest func(body []byte) (Estimate, error)
)
