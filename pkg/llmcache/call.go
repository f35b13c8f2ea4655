package llmcache

import (
	"context"
	"strconv"
	"time"
)

// Mode says how one call uses the cache.
type Mode uint8

const (
	// ModeDefault answers from the cache when it can, and otherwise calls
	// the model and stores a complete answer.
	ModeDefault Mode = iota
	// ModeNoStore answers from the cache when it can, and otherwise calls
	// the model without storing the answer (skip write).
	ModeNoStore
	// ModeRefresh always calls the model (skip read) and replaces the stored
	// answer with the new one if it is complete (force refresh).
	ModeRefresh
	// ModeBypass neither reads nor writes the cache, nor joins a concurrent
	// call for the same key. Tokens are still counted and budgeted.
	ModeBypass
)

func (m Mode) String() string {
	switch m {
	case ModeDefault:
		return "default"
	case ModeNoStore:
		return "no-store"
	case ModeRefresh:
		return "refresh"
	case ModeBypass:
		return "bypass"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Template names the prompt template and the input a caller rendered its
// messages from. When a [Call] carries one, the key is derived from it
// instead of from the rendered messages: a template that interpolates the
// current time, a random example order or a request id still hits the cache
// for the same input. The caller promises that the same name, version and
// input render messages that mean the same; bump Version when the template
// changes.
type Template struct {
	Name    string // the template's name
	Version string // the template's version: bump it when its text changes
	// Input is the JSON the template renders; only its canonical form is
	// keyed, so member order and whitespace do not matter.
	Input []byte
}

// Call describes one model call to the cache: who makes it and how it may
// use the cache. Attach it to the request context with [WithCall]; go-openai
// passes that context to the HTTP request, where the cache's transport finds
// it. A request without a Call uses [Options.Namespace], step "", and
// [ModeDefault].
type Call struct {
	// Namespace keeps one tenant's or pipeline's answers from every other's.
	// The default is Options.Namespace.
	Namespace string

	// Step names the pipeline step, for the token counters.
	Step string

	// Intent is the intent key of the work the call serves (the text form
	// of a dedupe key). It is the unit of the token budget: every call for
	// one intent, on every retry, draws from one budget. The default is
	// the intent on the request's context (dedupe.IntentFrom: set for the
	// work that a dedupe ledger's Do runs), and without one the cache key
	// is the unit.
	Intent string

	// KeyByIntent adds Intent to the cache key, so that the same prompt for
	// two different intents is answered twice. Leave it off to share
	// answers between intents that ask the same thing.
	KeyByIntent bool

	// Template, if set, stands for the rendered messages in the key.
	Template *Template

	// Mode is how the call uses the cache. The default is ModeDefault.
	Mode Mode

	// TTL is how long an answer stored by this call is kept. The default is
	// Options.TTL.
	TTL time.Duration

	// Budget is the most tokens that calls for this intent may spend, as
	// counted by the API's usage; 0 means Options.Budget, and a negative
	// value means no limit.
	Budget int64

	// Limits are the spend limits, in dollars per period, of the accounts
	// the call is paid from (a client, a pipeline): the call goes out only
	// if it fits every one. See [SpendLimit]. The default is none.
	Limits []SpendLimit

	// CompletionTokens is what a request that sets neither max_tokens nor
	// max_completion_tokens reserves for its answer, per choice, from
	// Budget and Limits (such as the model's output limit); the
	// reservation is settled to the answer's real usage after. The
	// default, 0, reserves nothing for it: the answer is paid after, and
	// the last call a limit lets through can pass it by all of its answer.
	CompletionTokens int64
}

type callKey struct{}

// WithCall returns a copy of ctx that carries c to the cache's transport.
func WithCall(ctx context.Context, c Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// CallFrom returns the Call attached to ctx by [WithCall], if any.
func CallFrom(ctx context.Context) (Call, bool) {
	c, ok := ctx.Value(callKey{}).(Call)
	return c, ok
}
