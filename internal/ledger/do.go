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
func Do(ctx context.Context, l Ledger, key dedupe.Key, fn func(ctx context.Context) (dedupe.Result, error), opts dedupe.DoOptions) (res dedupe.Result, ran bool, err error) {
	if opts.Owner == "" {
		opts.Owner = "dedupe.Do"
	}
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	for {
		c, err := l.Begin(ctx, key, BeginOptions{Owner: opts.Owner, Fingerprint: opts.Fingerprint, Lease: opts.Lease})
		if err != nil {
			return dedupe.Result{}, false, err
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
		if c.Status == StatusTakenOver {
			ctx = mark.WithTakenOver(ctx)
		}
		res, err := hold(ctx, l, key, c.Lease, opts.Lease, fn)
		return res, err == nil, err
	}
}

// public is the part of r that dedupe.Result carries.
func public(r Result) dedupe.Result {
	return dedupe.Result{DownstreamID: r.DownstreamID, Response: r.Response}
}

// hold runs fn under the lease, renewing it, and records the outcome.
func hold(ctx context.Context, l Ledger, key dedupe.Key, lease Lease, d time.Duration, fn func(ctx context.Context) (dedupe.Result, error)) (dedupe.Result, error) {
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
		if pe, ok := errors.AsType[*mark.PermanentError](err); ok {
			if ferr := l.Fail(bg, key, token, pe.Err.Error()); ferr != nil && !errors.Is(ferr, ErrStaleToken) {
				return dedupe.Result{}, errors.Join(err, ferr)
			}
			return dedupe.Result{}, err
		}
		l.Extend(bg, key, token, time.Nanosecond) // release: a retry runs fn again
		return dedupe.Result{}, err
	}
	if err := l.Commit(bg, key, token, Result{DownstreamID: res.DownstreamID, Response: res.Response}); err != nil {
		return dedupe.Result{}, fmt.Errorf("dedupe: the work ran, and its commit failed: %w", err)
	}
	rec, err := l.Get(bg, key)
	if err != nil {
		return res, nil
	}
	return public(rec.Result), nil
}
