package dedupe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oncegate/oncegate/internal/ledger/mark"
)

// Ledger runs work once per key, however often it is asked to and by
// however many workers share the ledger's store. Package badgerledger
// (embedded, one process) and package jskv (a JetStream KV bucket, for
// replicas and clusters) provide one each.
//
// A Ledger is safe for concurrent use by multiple goroutines.
type Ledger interface {
	// Do runs fn once per key:
	//
	//   - the first caller claims key, runs fn with a context that ends if
	//     the claim is lost, renews the claim while fn runs, and commits
	//     fn's result;
	//   - a caller that finds the work committed returns the stored result
	//     without running fn;
	//   - a caller that finds the work held by another worker waits for it
	//     (or, with DoOptions.NoWait, returns a *HeldError);
	//   - a caller that finds a claim whose holder died takes the work over
	//     and runs fn again: fn must be safe to repeat for a key it may have
	//     half done (send the key along as an idempotency key), or
	//     reconcile when [TakenOver] reports its ctx;
	//   - an error of fn releases the claim and is returned, so a later call
	//     runs fn again; an error wrapped with [Permanent] records the work
	//     as given up instead, and later calls return an error wrapping
	//     [ErrGivenUp].
	//
	// Do returns the result stored by whichever call ran fn, and whether
	// this call ran it.
	Do(ctx context.Context, key Key, fn func(ctx context.Context) (Result, error), opts DoOptions) (res Result, ran bool, err error)
}

// Result is what the work produced: what a later call for the same key
// gets back instead of running the work again. Its fields together must
// fit the ledger's result limit (64 KiB).
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
	// Fingerprint is the payload's fingerprint (Intent.Fingerprint), so the
	// ledger can count a key reused with another payload.
	Fingerprint Fingerprint
	// Lease is how long the claim holds between renewals; Do renews it
	// every third of it while fn runs, and a crashed worker's claim is
	// taken over after it. The default is 30s.
	Lease time.Duration
	// NoWait makes Do return a *HeldError at once when another worker
	// holds the key, instead of waiting for it to commit or give up. The
	// default is to wait, as long as ctx allows.
	NoWait bool
}

// ErrGivenUp is wrapped by the error of [Ledger.Do] for a key whose work
// was given up before (its function returned a [Permanent] error): the
// ledger holds the reason, and Do does not run the work again.
var ErrGivenUp = errors.New("dedupe: the work was given up")

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

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	_, ok := errors.AsType[*mark.PermanentError](err)
	return ok
}

// TakenOver reports whether ctx is that of a function [Ledger.Do] runs for
// work whose previous holder stopped before it committed: a process that
// crashed or stalled mid-work. The effect may have happened already. A
// one-shot effect (one its sink cannot dedupe by the key) must reconcile
// first, asking the world whether it happened, instead of running again.
func TakenOver(ctx context.Context) bool { return mark.TakenOver(ctx) }
