package dedupe

import (
	"context"
	"encoding/json"
	"fmt"
)

// Run runs fn once per intent through l, as [Ledger.Do] does, and returns
// fn's value: to the call that ran fn, the value fn returned; to every later
// call for the intent, the value that call stored. ran reports whether this
// call ran fn. It waits for work another worker holds, and takes a payload
// reworded under the same key as the same work (use Do with DoOptions for
// NoWait or RejectMismatch).
//
// # Codec
//
// The value is kept as its encoding/json encoding (json.Marshal), in the
// Result's Response, and a later call decodes it into a new T with
// json.Unmarshal. T must survive that round trip: its exported fields, maps
// with string or integer keys, slices and arrays, strings (as valid UTF-8),
// numbers (a float that is NaN or infinite does not encode), time.Time (at
// the nanosecond, its monotonic reading and location name dropped) and
// []byte (as base64) do; unexported fields, channels and functions do not.
// The encoding must fit [MaxResultBytes].
//
// A value that does not fit, or does not encode, is returned to the call
// that ran fn, with an error wrapping [ErrResultTooLarge] (or json's error):
// the work is recorded done without it. Later calls then get the zero T and
// an error wrapping ErrResultTooLarge, and fn does not run again.
func Run[T any](ctx context.Context, l Ledger, in Intent, fn func(ctx context.Context) (T, error)) (v T, ran bool, err error) {
	var encErr error
	res, ran, err := l.Do(ctx, in, func(ctx context.Context) (Result, error) {
		var err error
		if v, err = fn(ctx); err != nil {
			return Result{}, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			// The work is done: record it so, without the value.
			encErr = fmt.Errorf("dedupe: the work's value does not encode as JSON; the work is recorded done without it: %w", err)
			return Result{}, nil
		}
		return Result{Response: b}, nil
	}, DoOptions{Owner: "dedupe.Run"})
	switch {
	case ran && err == nil:
		return v, true, encErr
	case ran:
		return v, true, err
	case err != nil:
		var zero T
		return zero, false, err
	case len(res.Response) == 0:
		var zero T
		return zero, false, fmt.Errorf("%w: the work is done, and its value was not kept", ErrResultTooLarge)
	}
	var got T
	if err := json.Unmarshal(res.Response, &got); err != nil {
		return got, false, fmt.Errorf("dedupe: decoding the stored value of %v into %T: %w", in.Key, got, err)
	}
	return got, false, nil
}
