// Package jsonce puts Oncegate's gate in front of a nats.go JetStream
// message handler a program already has: the handler runs once per intent,
// however often its trigger is redelivered or published again.
//
//	keyer, _ := dedupe.NewKeyer(dedupe.KeySpec{Pipeline: "billing", Step: "charge", Fields: []string{"/invoice"}})
//	cc, err := jsonce.Consume(ctx, cons, ledger, keyer, func(ctx context.Context, m jetstream.Msg) (dedupe.Result, error) {
//		in, _ := dedupe.IntentFrom(ctx)
//		id, err := charge(ctx, m.Data(), in.Key.String()) // the intent key as the charge's idempotency key
//		return dedupe.Result{DownstreamID: id}, err
//	}, jsonce.Options{})
//	...
//	defer cc.Stop() // ends the contexts of the handlers still running
//
// The wrapped handler acks, naks and terms the message itself, as
// Oncegate's consumer decides: a duplicate of committed work is acked
// without running the handler; a duplicate of work another message's
// handler holds is put back and looks again after RetryDelay (or when the
// holder's lease runs out, if sooner), and is acked only once the work is
// committed: acked on the holder's word, it would be lost if the holder's
// message was itself a stale delivery that another worker had acked; the
// message's own redelivery while its first worker is silent is put back
// until the lease runs out; the handler's error naks the message for a
// retry (or,
// wrapped with dedupe.Permanent, terms it and records the work given up);
// a message that cannot be keyed is termed. While the handler runs, the
// message is kept in progress and the ledger lease renewed.
//
// The handler's context carries its intent ([dedupe.IntentFrom]: pass the
// key downstream as the effect's idempotency key), reports
// [dedupe.TakenOver] when its intent's previous holder died mid-work (so
// that a one-shot effect can reconcile first), and ends when the work is
// no longer the handler's: its lease taken over or run out, or the
// consumption stopped ([Consume]'s Stop or context, [Handler]'s context).
package jsonce

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Options configures a [Handler]. The zero value is ready to use.
type Options struct {
	// Owner names this worker in ledger records. The default is "jsonce".
	Owner string
	// Lease is how long a claim holds between renewals; it should exceed
	// the consumer's AckWait. The default is 30s.
	Lease time.Duration
	// RetryDelay is how long a message waits before it is delivered again
	// after the handler failed, or to look again at work another message
	// holds. Each look is a delivery: a consumer with a MaxDeliver must
	// allow for as many as the longest work takes RetryDelays, or the
	// server drops the duplicate while the work may still fail. The
	// default is 1s.
	RetryDelay time.Duration
	// OnTerm, if set, is called with a message the handler terms and why:
	// a payload that cannot be keyed, or work given up. Publish it to a
	// dead-letter subject there; it must not ack the message.
	OnTerm func(m jetstream.Msg, err error)
}

// Consume runs fn once per intent of the messages of cons, as [Handler]
// does, and returns the consumption's control: its Stop also ends the
// context of every handler still running (their work is released, and
// their messages come back), as does the end of ctx; its Drain lets them
// finish. The options of cons.Consume may follow.
func Consume(ctx context.Context, cons jetstream.Consumer, l dedupe.Ledger, keyer *dedupe.Keyer, fn func(ctx context.Context, m jetstream.Msg) (dedupe.Result, error), opts Options, copts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
	hctx, cancel := context.WithCancelCause(ctx)
	cc, err := cons.Consume(Handler(hctx, l, keyer, fn, opts), copts...)
	if err != nil {
		cancel(nil)
		return nil, err
	}
	s := &stopper{ConsumeContext: cc, cancel: cancel}
	s.after = context.AfterFunc(ctx, s.halt)
	return s, nil
}

// errStopped is the cause of the end of the handlers' context on Stop.
var errStopped = errors.New("jsonce: consumption stopped")

// stopper is the ConsumeContext Consume returns.
type stopper struct {
	jetstream.ConsumeContext
	cancel context.CancelCauseFunc
	after  func() bool // unregisters halt from the end of Consume's ctx
	once   sync.Once
}

// Stop ends the handlers' context, then stops the consumption.
func (s *stopper) Stop() {
	s.after()
	s.halt()
}

func (s *stopper) halt() {
	s.once.Do(func() {
		s.cancel(errStopped)
		s.ConsumeContext.Stop()
	})
}

// Handler returns a jetstream.MessageHandler that runs fn once per intent
// of the messages it gets, keyed by keyer, through l (a
// *badgerledger.Ledger, or a *jskv.Ledger for several processes). fn's
// context is derived from ctx: cancel ctx when the consumption stops (or
// use [Consume], which does). It also ends if the lease is taken over or
// runs out (the work is then another worker's).
func Handler(ctx context.Context, l dedupe.Ledger, keyer *dedupe.Keyer, fn func(ctx context.Context, m jetstream.Msg) (dedupe.Result, error), opts Options) jetstream.MessageHandler {
	if opts.Owner == "" {
		opts.Owner = "jsonce"
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = time.Second
	}
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	term := func(m jetstream.Msg, err error) {
		if opts.OnTerm != nil {
			opts.OnTerm(m, err)
		}
		_ = m.TermWithReason(err.Error())
	}
	return func(m jetstream.Msg) {
		in, err := keyer.Intent(m.Data())
		if err != nil {
			term(m, err)
			return
		}
		// The owner names the message, so that a duplicate can tell work
		// held for another message (likely alive and soon done) from its
		// own redelivery (whose first worker is silent).
		ref := "?"
		if meta, err := m.Metadata(); err == nil {
			ref = meta.Stream + ":" + strconv.FormatUint(meta.Sequence.Stream, 10)
		}
		owner := opts.Owner + "#" + ref
		_, _, err = l.Do(ctx, in, func(ctx context.Context) (dedupe.Result, error) {
			stop := keepInProgress(m, opts.Lease/3)
			defer stop()
			return fn(ctx, m)
		}, dedupe.DoOptions{Owner: owner, Lease: opts.Lease, NoWait: true})
		var held *dedupe.HeldError
		switch {
		case err == nil:
			_ = m.Ack()
		case errors.As(err, &held):
			// Wait for the work to be settled. This message's own earlier
			// delivery holds it while silent: until the lease runs out.
			d := held.RetryAfter + 10*time.Millisecond
			if held.Owner != owner {
				d = min(d, opts.RetryDelay)
			}
			_ = m.NakWithDelay(d)
		case errors.Is(err, dedupe.ErrGivenUp), dedupe.IsPermanent(err):
			term(m, err)
		default:
			_ = m.NakWithDelay(opts.RetryDelay)
		}
	}
}

// keepInProgress marks m in progress every d until stop is called.
func keepInProgress(m jetstream.Msg, d time.Duration) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(max(d, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	return func() { close(done); <-exited }
}
