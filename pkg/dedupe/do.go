package dedupe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oncegate/oncegate/internal/ledger/mark"
)

// Ledger runs work once per intent, however often it is asked to and by
// however many workers share the ledger's store. Package badgerledger
// (embedded, one process) and package jskv (a JetStream KV bucket, for
// replicas and clusters) provide one each.
//
// A Ledger is safe for concurrent use by multiple goroutines.
type Ledger interface {
	// Do runs fn once per intent key (in.Key):
	//
	//   - the first caller claims the key, runs fn, renews the claim while
	//     fn runs, and commits fn's result; fn's context carries the
	//     intent ([IntentFrom]) and ends if the claim is lost: taken over
	//     by another worker, or run out because it could not be renewed;
	//   - a caller that finds the work committed returns the stored result
	//     without running fn;
	//   - a caller that finds the work held by another worker waits for it
	//     (or, with DoOptions.NoWait, returns a *HeldError);
	//   - a caller that finds a claim whose holder died takes the work over
	//     and runs fn again: fn must be safe to repeat for a key it may have
	//     half done (send the key along as an idempotency key), or
	//     reconcile when [TakenOver] reports its ctx;
	//   - an error of fn releases the claim and is returned, so a later call
	//     runs fn again, as new work (TakenOver false): a plain error says
	//     the work was not done. An error wrapped with [MaybeDone] says it
	//     may have been, as does any error returned once fn's context has
	//     ended (the interruption may have cut the work mid-way), and the
	//     later call runs fn with TakenOver true. An
	//     error wrapped with [Permanent] records the work as given up
	//     instead, and later calls return an error wrapping [ErrGivenUp];
	//   - a panic of fn releases the claim, and Do panics again with the
	//     same value: a later call runs fn again, with TakenOver true (fn
	//     stopped mid-way, as a crash would stop it);
	//   - the ledger keeps the fingerprint of the payload the work was
	//     begun with (in.Fingerprint): a caller whose fingerprint differs
	//     is the same work, reworded, and is answered as any other, unless
	//     DoOptions.RejectMismatch is set: then Do returns an error
	//     wrapping [ErrMismatch], without running fn.
	//
	// Do returns the result stored by whichever call ran fn, and whether
	// this call ran it. ran is true whenever this call ran fn, even if Do
	// also returns an error: a result larger than [MaxResultBytes] (the
	// work is recorded done without it, and the error wraps
	// [ErrResultTooLarge]), or a commit the store refused (the claim then
	// runs out, and a later call takes the work over: see [TakenOver]).
	// The zero Key names no work: Do refuses it with an error wrapping
	// [ErrInvalidKey].
	Do(ctx context.Context, in Intent, fn func(ctx context.Context) (Result, error), opts DoOptions) (res Result, ran bool, err error)
}

// Result is what the work produced: what a later call for the same key
// gets back instead of running the work again. Its fields together must
// fit in [MaxResultBytes].
type Result struct {
	// DownstreamID is the id the side effect's target gave the work: a
	// ticket number, a message id, a charge id.
	DownstreamID string
	// Response is the response to return to later calls.
	Response []byte
}

// DoOptions configures [Ledger.Do]. The zero value is ready to use.
type DoOptions struct {
	// Owner names the caller in the ledger's record, for inspection and in
	// HeldError. The default is "dedupe.Do".
	Owner string
	// Lease is how long the claim holds between renewals; Do renews it
	// every third of it while fn runs, and a crashed worker's claim is
	// taken over after it. The default is 30s.
	Lease time.Duration
	// NoWait makes Do return a *HeldError at once when another worker
	// holds the key, instead of waiting for it to commit or give up. The
	// default is to wait, as long as ctx allows.
	NoWait bool
	// RejectMismatch makes Do refuse an intent whose key the ledger holds
	// for another payload (another Intent.Fingerprint), committed, held or
	// abandoned, with an error wrapping ErrMismatch, as a payment API
	// refuses an idempotency key reused with other parameters (an HTTP
	// 422). The default treats it as the same work: an agent's retry
	// often rewords its request.
	RejectMismatch bool
}

// ErrMismatch is wrapped by the error of [Ledger.Do], with
// DoOptions.RejectMismatch set, for an intent whose key the ledger holds
// for another payload fingerprint. fn did not run; the work and its
// record are as they were. (Work whose holder died is taken over by the
// call whose payload matches.)
var ErrMismatch = errors.New("dedupe: key reused with another payload")

// MaxResultBytes bounds a [Result]: its DownstreamID and Response
// together.
const MaxResultBytes = 64 << 10

// ErrResultTooLarge is wrapped by the error of [Ledger.Do] when the work's
// Result is larger than MaxResultBytes. The work ran (Do reports ran) and
// is recorded done, with its DownstreamID if that alone fits and without
// its Response: later calls return that Result and do not run the work
// again.
var ErrResultTooLarge = errors.New("dedupe: result too large to keep")

// ErrGivenUp is wrapped by the error of [Ledger.Do] for a key whose work
// was given up before (its function returned a [Permanent] error): the
// ledger holds the reason, and Do does not run the work again.
var ErrGivenUp = errors.New("dedupe: the work was given up")

// ErrClosed is wrapped by the error of [Ledger.Do] on a ledger that is
// closed: its Close was called (or, for the JetStream KV ledger, its NATS
// connection is closed or closing). Nothing ran.
var ErrClosed = errors.New("dedupe: ledger is closed")

// HeldError is the error of [Ledger.Do] for a key another worker holds,
// with DoOptions.NoWait set.
type HeldError struct {
	Owner      string        // the holder, as its DoOptions.Owner named it
	RetryAfter time.Duration // what is left of its claim
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("dedupe: another worker holds the key: %s, for %v more", e.Owner, e.RetryAfter)
}

// Permanent marks an error of the work as final: [Ledger.Do] records the
// work as given up, returns the error (still marked: see IsPermanent), and
// later calls for the key return ErrGivenUp without running it. Other
// errors release the claim, so that a retry runs the work again.
func Permanent(err error) error { return &mark.PermanentError{Err: err} }

// MaybeDone marks an error of the work after which the work may have
// happened, or half happened: a timeout after the request went out, a
// connection lost before the answer. [Ledger.Do] returns the error (still
// marked) and releases the claim, as for any error, and the later call
// that runs the work again sees [TakenOver] on its context, so that it
// reconciles first. A plain error says the work was not done: the later
// call runs it as new.
func MaybeDone(err error) error { return &mark.MaybeDoneError{Err: err} }

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	_, ok := errors.AsType[*mark.PermanentError](err)
	return ok
}

// TakenOver reports whether ctx is that of a function [Ledger.Do] runs for
// work that an earlier run may have done, in whole or in part: the effect
// may have happened already. A one-shot effect (one its sink cannot dedupe
// by the key) must then reconcile first, asking the world whether it
// happened, instead of running again.
//
// It is true when the earlier run stopped without saying how far it got,
// or said it could not tell:
//
//   - its process died or was killed mid-work;
//   - it stalled, or was cut off from the ledger, until its lease ran out;
//   - it panicked;
//   - it returned an error marked [MaybeDone], or any error once its
//     context had ended (its claim lost, or the caller's context done):
//     the interruption may have cut the work mid-way;
//   - it returned, and the ledger did not record its result (Do reported
//     ran with an error: the claim ran out).
//
// It is false for the first run of the work, and for a run after one that
// returned a plain error (or, through package httponce, answered a status
// that says nothing was done): that run said the work was not done, and
// gave its claim back.
func TakenOver(ctx context.Context) bool { return mark.TakenOver(ctx) }

// IntentFrom returns the intent whose work ctx is that of: [Ledger.Do]
// sets it on the context of the function it runs (and so do package
// jsonce's handlers and wmonce's middleware, which run through Do). Pass
// in.Key.String() downstream as the idempotency key of the effect; package
// llmcache takes it as a call's intent when the call names none.
func IntentFrom(ctx context.Context) (Intent, bool) {
	in, ok := mark.Intent(ctx).(Intent)
	return in, ok
}
