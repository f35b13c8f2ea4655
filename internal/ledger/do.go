package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oncegate/oncegate/internal/ledger/mark"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Do is dedupe.Ledger.Do on l: the stores' public Do methods call it. See
// [dedupe.Ledger] for what it does.
func Do(ctx context.Context, l Ledger, in dedupe.Intent, fn func(ctx context.Context) (dedupe.Result, error), opts dedupe.DoOptions) (res dedupe.Result, ran bool, err error) {
	key := in.Key
	if key == (dedupe.Key{}) {
		return dedupe.Result{}, false, fmt.Errorf("%w: the zero Key names no work", dedupe.ErrInvalidKey)
	}
	if opts.Owner == "" {
		opts.Owner = "dedupe.Do"
	}
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	for {
		began := time.Now()
		c, err := l.Begin(ctx, key, BeginOptions{Owner: opts.Owner, Fingerprint: in.Fingerprint, Lease: opts.Lease})
		if errors.Is(err, ErrFingerprintMismatch) {
			return dedupe.Result{}, false, fmt.Errorf("%w: %w", dedupe.ErrMismatch, err)
		}
		if err != nil {
			return dedupe.Result{}, false, err
		}
		if c.Mismatch && opts.RejectMismatch {
			if c.Status == StatusTakenOver {
				// Begin took the abandoned work over for this other
				// payload: give it back as it found it (released undone,
				// or maybe done), so that the call whose payload matches
				// takes it over at once, told whether to reconcile.
				release(ctx, l, key, c.Lease.Token, opts.Lease, c.Released)
			}
			return dedupe.Result{}, false, fmt.Errorf("%w: key %v was begun with payload %v, this call has %v",
				dedupe.ErrMismatch, key, c.Record.Fingerprint, in.Fingerprint)
		}
		switch c.Status {
		case StatusCommitted:
			return public(c.Record.Result), false, nil
		case StatusFailed:
			return dedupe.Result{}, false, fmt.Errorf("%w: %s", dedupe.ErrGivenUp, c.Record.Reason)
		case StatusHeld:
			if opts.NoWait {
				return dedupe.Result{}, false, &dedupe.HeldError{Owner: c.Record.Owner, RetryAfter: c.RetryAfter}
			}
			wait := min(max(c.RetryAfter/4, time.Millisecond), 100*time.Millisecond)
			select {
			case <-ctx.Done():
				return dedupe.Result{}, false, ctx.Err()
			case <-time.After(wait):
			}
			continue
		}
		if c.Status == StatusTakenOver && !c.Released {
			// Its previous holder stopped without saying how far it got:
			// the work may have been done.
			ctx = mark.WithTakenOver(ctx)
		}
		return hold(mark.WithIntent(ctx, in), l, key, c.Lease, opts.Lease, began, fn)
	}
}

// errLeaseLapsed is the cause of the end of the context of a function Do
// runs when its claim ran out because no renewal reached the ledger in
// time: another worker may take the work over from then on.
var errLeaseLapsed = errors.New("dedupe: the claim ran out before it could be renewed")

// release gives up the claim held with token, so that the next call runs
// the work at once: undone (Extend by 0, Claim.Released), so that the next
// call's function does not see TakenOver, or else as a claim whose holder
// stopped (its lease ends in a nanosecond), so that it does. It is best
// effort, bounded by the lease d: a claim not released runs out with its
// lease anyway, and is then taken over as one whose holder stopped.
func release(ctx context.Context, l Ledger, key dedupe.Key, token uint64, d time.Duration, undone bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	end := time.Nanosecond
	if undone {
		end = 0
	}
	l.Extend(ctx, key, token, end)
}

// public is the part of r that dedupe.Result carries.
func public(r Result) dedupe.Result {
	return dedupe.Result{DownstreamID: r.DownstreamID, Response: r.Response}
}

// hold runs fn under the lease, renewing it, and records the outcome. It
// reports whether fn ran (it did, unless it panicked: then hold panics).
// fn's context ends when the lease is taken over, or runs out: d after
// began (when the claim was asked for) or after the last renewal that
// reached the ledger, measured on this process's clock from before each
// request, so that it ends no later than the ledger's lease.
func hold(ctx context.Context, l Ledger, key dedupe.Key, lease Lease, d time.Duration, began time.Time, fn func(ctx context.Context) (dedupe.Result, error)) (dedupe.Result, bool, error) {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	token := lease.Token
	renewed := make(chan uint64, 1)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(d / 3)
		defer t.Stop()
		lapse := time.NewTimer(time.Until(began.Add(d)))
		defer lapse.Stop()
		tok := token
		defer func() { renewed <- tok }()
		for {
			select {
			case <-done:
				return
			case <-lapse.C:
				cancel(errLeaseLapsed)
				return
			case <-t.C:
				sent := time.Now()
				ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), d/3)
				nl, err := l.Extend(ectx, key, tok, d)
				ecancel()
				switch {
				case err == nil:
					tok = nl.Token
					lapse.Reset(time.Until(sent.Add(d)))
				case errors.Is(err, ErrStaleToken):
					cancel(fmt.Errorf("%w: the lease was taken over", ErrStaleToken))
					return
				}
			}
		}
	}()
	res, panicked, err := run(wctx, fn)
	close(done)
	token = <-renewed
	bg := context.WithoutCancel(ctx)
	if panicked != nil {
		// Release the claim, so that a retry runs fn again, then let the
		// panic go on. fn stopped mid-way, without saying how far it got:
		// the retry is told it takes the work over.
		release(bg, l, key, token, d, false)
		panic(panicked.value)
	}
	if err != nil {
		if pe, ok := errors.AsType[*mark.PermanentError](err); ok {
			if ferr := l.Fail(bg, key, token, pe.Err.Error()); ferr != nil && !errors.Is(ferr, ErrStaleToken) {
				return dedupe.Result{}, true, errors.Join(err, ferr)
			}
			return dedupe.Result{}, true, err
		}
		// A retry runs fn again: as new work if fn said, with a plain
		// error, that the work was not done; taken over if it said, with
		// MaybeDone, that it may have been, or if its context had ended
		// (its error may be the interruption's, cutting the work mid-way).
		_, maybe := errors.AsType[*mark.MaybeDoneError](err)
		release(bg, l, key, token, d, !maybe && wctx.Err() == nil)
		return dedupe.Result{}, true, err
	}
	r := Result{DownstreamID: res.DownstreamID, Response: res.Response}
	err = l.Commit(bg, key, token, r)
	if errors.Is(err, ErrResultTooLarge) {
		// The work ran: record it done all the same, so that no later call
		// runs it again, with what of its result fits.
		n := len(r.DownstreamID) + len(r.Response)
		kept := Result{}
		if len(r.DownstreamID) <= dedupe.MaxResultBytes {
			kept.DownstreamID = r.DownstreamID
		}
		if err := l.Commit(bg, key, token, kept); err != nil {
			return res, true, fmt.Errorf("dedupe: the work ran, and its commit failed: %w", err)
		}
		return res, true, fmt.Errorf("%w: %d bytes, limit %d; the work is recorded done without its response", dedupe.ErrResultTooLarge, n, dedupe.MaxResultBytes)
	}
	if err != nil {
		return res, true, fmt.Errorf("dedupe: the work ran, and its commit failed: %w", err)
	}
	rec, err := l.Get(bg, key)
	if err != nil {
		return res, true, nil
	}
	return public(rec.Result), true, nil
}

// panicValue is what a function run by Do panicked with.
type panicValue struct{ value any }

// run calls fn, and reports a panic of it instead of letting it go by.
func run(ctx context.Context, fn func(ctx context.Context) (dedupe.Result, error)) (res dedupe.Result, p *panicValue, err error) {
	defer func() {
		if r := recover(); r != nil {
			p = &panicValue{r}
		}
	}()
	res, err = fn(ctx)
	return res, nil, err
}
