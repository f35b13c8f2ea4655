package dedupe

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrGivenUp is wrapped by the error of [Do] for a key whose work was given
// up (failed) before: the ledger holds the reason, and Do does not run the
// work again.
var ErrGivenUp = errors.New("dedupe: the work was given up")

// ErrHeld is matched by the error of [Do] when another worker holds the key
// and DoOptions.NoWait is set; the error is a *HeldError.
var ErrHeld = errors.New("dedupe: another worker holds the key")

// HeldError is the error of [Do] for a key another worker holds, with
// DoOptions.NoWait set. It matches ErrHeld.
type HeldError struct {
	Owner      string        // the holder, as its record names it
	RetryAfter time.Duration // what is left of its lease
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%v: %s, for %v more", ErrHeld, e.Owner, e.RetryAfter)
}

// Is reports whether target is ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// DoOptions configures [Do]. The zero value is ready to use.
type DoOptions struct {
	// Owner names the caller in the record, for inspection. The default is
	// "dedupe.Do".
	Owner string
	// Fingerprint is the payload's fingerprint (Intent.Fingerprint), so the
	// ledger can count or refuse a key reused with another payload.
	Fingerprint Fingerprint
	// Lease is how long the claim holds between renewals. Do renews it
	// every third of it while fn runs. The default is 30s.
	Lease time.Duration
	// NoWait makes Do return an error wrapping ErrHeld at once when another
	// worker holds the key, instead of waiting for it to commit or give
	// up. The default is to wait, as long as ctx allows.
	NoWait bool
}

// Permanent marks an error of the work as final: [Do] records the work as
// given up, returns the error (still marked: see IsPermanent), and later
// calls for the key return ErrGivenUp without running it. Other errors
// release the claim, so that a retry runs the work again.
func Permanent(err error) error { return &permanentError{err} }

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	_, ok := errors.AsType[*permanentError](err)
	return ok
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

type takenOverKey struct{}

// TakenOver reports whether ctx is that of a function [Do] runs for work
// whose previous holder stopped before it committed: a process that
// crashed or stalled mid-work. The effect may have happened already. A
// one-shot effect (one its sink cannot dedupe by the key) must reconcile
// first, asking the world whether it happened, instead of running again.
func TakenOver(ctx context.Context) bool {
	v, _ := ctx.Value(takenOverKey{}).(bool)
	return v
}

// Do runs fn once per key, however often it is called, by however many
// workers sharing l:
//
//   - the first caller claims key, runs fn with a context that ends if the
//     lease is lost, renews the lease while fn runs, and commits fn's result;
//   - a caller that finds the work committed returns the stored result
//     without running fn;
//   - a caller that finds the work held by another worker waits for it
//     (or, with NoWait, returns ErrHeld);
//   - a caller that finds a claim whose holder died takes the work over and
//     runs fn again: fn must be safe to repeat for a key it may have half
//     done (send the key along as an idempotency key), or reconcile when
//     [TakenOver] reports its ctx;
//   - an error of fn releases the claim and is returned, so a later call
//     runs fn again; an error wrapped with [Permanent] records the work as
//     given up instead.
//
// Do returns the result stored by whichever call ran fn, and whether this
// call ran it.
func Do(ctx context.Context, l Ledger, key Key, fn func(ctx context.Context) (Result, error), opts DoOptions) (res Result, ran bool, err error) {
	if opts.Owner == "" {
		opts.Owner = "dedupe.Do"
	}
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	for {
		c, err := l.Begin(ctx, key, BeginOptions{Owner: opts.Owner, Fingerprint: opts.Fingerprint, Lease: opts.Lease})
		if err != nil {
			return Result{}, false, err
		}
		switch c.Status {
		case StatusCommitted:
			return c.Record.Result, false, nil
		case StatusFailed:
			return Result{}, false, fmt.Errorf("%w: %s", ErrGivenUp, c.Record.Reason)
		case StatusHeld:
			if opts.NoWait {
				return Result{}, false, &HeldError{Owner: c.Record.Owner, RetryAfter: c.RetryAfter}
			}
			wait := min(max(c.RetryAfter/4, time.Millisecond), 100*time.Millisecond)
			select {
			case <-ctx.Done():
				return Result{}, false, ctx.Err()
			case <-time.After(wait):
			}
			continue
		}
		if c.Status == StatusTakenOver {
			ctx = context.WithValue(ctx, takenOverKey{}, true)
		}
		res, err := hold(ctx, l, key, c.Lease, opts.Lease, fn)
		return res, err == nil, err
	}
}

// hold runs fn under the lease, renewing it, and records the outcome.
func hold(ctx context.Context, l Ledger, key Key, lease Lease, d time.Duration, fn func(ctx context.Context) (Result, error)) (Result, error) {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	token := lease.Token
	renewed := make(chan uint64, 1)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(d / 3)
		defer t.Stop()
		tok := token
		defer func() { renewed <- tok }()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				nl, err := l.Extend(context.WithoutCancel(ctx), key, tok, d)
				switch {
				case err == nil:
					tok = nl.Token
				case errors.Is(err, ErrStaleToken):
					cancel(fmt.Errorf("%w: the lease was taken over", ErrStaleToken))
					return
				}
			}
		}
	}()
	res, err := fn(wctx)
	close(done)
	token = <-renewed
	bg := context.WithoutCancel(ctx)
	if err != nil {
		if pe, ok := errors.AsType[*permanentError](err); ok {
			if ferr := l.Fail(bg, key, token, pe.err.Error()); ferr != nil && !errors.Is(ferr, ErrStaleToken) {
				return Result{}, errors.Join(err, ferr)
			}
			return Result{}, err
		}
		l.Extend(bg, key, token, time.Nanosecond) // release: a retry runs fn again
		return Result{}, err
	}
	if err := l.Commit(bg, key, token, res); err != nil {
		return Result{}, fmt.Errorf("dedupe: the work ran, and its commit failed: %w", err)
	}
	rec, err := l.Get(bg, key)
	if err != nil {
		return res, nil
	}
	return rec.Result, nil
}
