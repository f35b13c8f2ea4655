package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// MaxResultBytes is the default limit on [Result.Body]: what a sink reports
// is stored in the ledger beside the intent key, so it is kept small.
const MaxResultBytes = 16 << 10

// Header names that every sink which sends headers sets from the [Effect].
const (
	// PipelineHeader carries [Effect.Pipeline].
	PipelineHeader = "Oncegate-Pipeline"
	// StepHeader carries [Effect.Step].
	StepHeader = "Oncegate-Step"
)

var (
	// ErrPermanent matches, through errors.Is, every error for an effect
	// that can never succeed as it stands: an invalid key or options, an
	// HTTP 4xx other than 408, 409, 425 and 429, a key reused for different
	// content. The caller dead-letters the trigger instead of retrying it.
	ErrPermanent = errors.New("sink: permanent failure")

	// ErrRetryable matches, through errors.Is, every error for an effect
	// that may succeed later: network errors, timeouts, a cancelled
	// context, HTTP 408, 409, 425, 429 and 5xx, a JetStream stream that is
	// missing or without a leader. Whether the effect happened is unknown,
	// so the caller retries it with the same key, which the receiver
	// deduplicates.
	ErrRetryable = errors.New("sink: retryable failure")

	// ErrKeyConflict is wrapped by the error of a sink whose target already
	// holds the key with different content: a file present with another
	// body, an HTTP receiver answering that the Idempotency-Key was used
	// for another request ([HTTPOptions.KeyReusedStatus]). It is permanent
	// as an error, but it says that an effect for the key exists: the
	// consumer records the intent as done, not as failed.
	ErrKeyConflict = errors.New("sink: key already used for a different effect")

	// ErrFenced matches the error of a delivery its Effect.Fence stopped
	// before anything was sent: the caller no longer holds the effect.
	ErrFenced = errors.New("sink: fenced before sending")
)

// Effect is one side effect to perform.
type Effect struct {
	// Key is the intent key: 32 lowercase hex digits, the same on every
	// retry of the effect. It becomes the Nats-Msg-Id, the Idempotency-Key
	// or the file name. Any other spelling is a permanent error.
	Key string

	// Pipeline and Step name where the effect comes from, for headers and
	// logs.
	Pipeline, Step string

	// Body is what to send or write.
	Body []byte

	// Header holds extra headers, for the sinks that send headers. A sink
	// never lets them replace the headers it sets itself (the key, the
	// pipeline and step, static headers from its options).
	Header map[string]string

	// SubjectSuffix, for a JetStream sink, is appended to its subject after
	// a dot: one or more subject tokens rendered by the effect's template.
	SubjectSuffix string

	// Fence, if set, is called by the HTTP sink right before its first
	// attempt goes out — after any wait for room in the receiver's quota —
	// and a non-nil error stops the delivery with an error matching
	// ErrFenced, nothing sent: the caller's hold on the effect (a lease)
	// may have run out while the sink waited, a process paused meanwhile
	// among the ways. Other sinks, and a digest's members, do not call it.
	Fence func() error
}

// Result is what a sink reports about a delivered effect.
type Result struct {
	// Status is the HTTP status of the last response; 0 for other sinks or
	// when no response came.
	Status int

	// Duplicate reports that the receiver already had the key and did not
	// perform the effect again: a JetStream PubAck marked duplicate, a file
	// already present with the same content, an HTTP response with
	// "Idempotent-Replayed: true".
	Duplicate bool

	// Body is what the ledger stores as the effect's result, at most
	// [MaxResultBytes] unless the sink's options say otherwise.
	Body []byte

	// Attempts counts the tries made by this call; 1 unless the sink
	// retries by itself.
	Attempts int
}

// Sink performs effects, each carrying its intent key so that the receiver
// can drop a repeat.
//
// Deliver returns an error matching either [ErrPermanent] or
// [ErrRetryable]; it is always an [*Error]. The Result may be filled in
// even with an error (the status and body of a refusing HTTP server).
// Implementations are safe for concurrent use by multiple goroutines.
//
// Close releases what the sink owns, never a connection or client that was
// passed in, and does not wait for calls to Deliver in progress.
type Sink interface {
	Deliver(ctx context.Context, e Effect) (Result, error)
	Close() error
}

var (
	_ Sink = (*JetStream)(nil)
	_ Sink = (*HTTP)(nil)
	_ Sink = (*File)(nil)
)

// Error is the error of every sink. It matches [ErrRetryable] or
// [ErrPermanent] under errors.Is according to Retryable, and unwraps to
// the cause. Its text never holds header values, nor the query of an HTTP
// URL or the segments of its path that look like tokens, which may carry
// secrets.
type Error struct {
	Sink      string // "jetstream", "http" or "file"
	Key       string // the intent key, if it was valid
	Status    int    // the HTTP status of the last response, or 0
	Retryable bool   // whether trying again later may succeed
	Err       error  // the cause
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("sink: ")
	b.WriteString(e.Sink)
	if e.Key != "" {
		b.WriteString(": key ")
		b.WriteString(e.Key)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is [ErrRetryable] or [ErrPermanent] and
// matches Retryable.
func (e *Error) Is(target error) bool {
	return target == ErrRetryable && e.Retryable || target == ErrPermanent && !e.Retryable
}

// optionsError is the permanent error of a constructor given invalid
// options.
func optionsError(sink, format string, args ...any) error {
	return &Error{Sink: sink, Err: fmt.Errorf("invalid options: "+format, args...)}
}

// checkKey returns a permanent error unless key is 32 lowercase hex digits,
// so that a key never spells a path, a subject token or a header twice.
func checkKey(sink, key string) error {
	ok := len(key) == 32
	for i := 0; ok && i < len(key); i++ {
		c := key[i]
		ok = '0' <= c && c <= '9' || 'a' <= c && c <= 'f'
	}
	if ok {
		return nil
	}
	if len(key) > 40 {
		key = key[:40] + "…"
	}
	return &Error{Sink: sink, Err: fmt.Errorf("invalid key %q: want 32 lowercase hex digits", key)}
}

// retryableStatus reports whether a request answered with the HTTP status
// code (or a JetStream API error code, which follows HTTP) may succeed
// later.
func retryableStatus(code int) bool {
	switch code {
	case 408, 409, 425, 429: // timeout, conflict (in flight), too early, too many requests
		return true
	}
	return code >= 500
}
