// Package mark holds what package dedupe and the ledger's Do machinery
// (package ledger, which imports dedupe) must both see: the context marks of
// taken-over work and of the intent, and the error types of Permanent and
// MaybeDone. It imports nothing, so
// that dedupe can import it without a cycle.
package mark

import "context"

type takenOverKey struct{}

// WithTakenOver returns ctx marked as that of work taken over from a
// holder that stopped before it committed.
func WithTakenOver(ctx context.Context) context.Context {
	return context.WithValue(ctx, takenOverKey{}, true)
}

// TakenOver reports whether ctx was marked by WithTakenOver.
func TakenOver(ctx context.Context) bool {
	v, _ := ctx.Value(takenOverKey{}).(bool)
	return v
}

type intentKey struct{}

// WithIntent returns ctx carrying in, the dedupe.Intent whose work ctx is
// that of (held as any: this package cannot import dedupe).
func WithIntent(ctx context.Context, in any) context.Context {
	return context.WithValue(ctx, intentKey{}, in)
}

// Intent returns what WithIntent put on ctx, or nil.
func Intent(ctx context.Context) any { return ctx.Value(intentKey{}) }

// PermanentError is the error dedupe.Permanent returns: Err, marked final.
type PermanentError struct {
	Err error // the error marked final
}

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// MaybeDoneError is the error dedupe.MaybeDone returns: Err, after which
// the work may have happened.
type MaybeDoneError struct {
	Err error // the work's error
}

func (e *MaybeDoneError) Error() string { return e.Err.Error() }
func (e *MaybeDoneError) Unwrap() error { return e.Err }
