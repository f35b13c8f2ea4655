package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// source is one durable consumer and the workers that take its messages
// through a gate: a pipeline's triggers, or its dispatcher's outbox.
type source struct {
	c       *Consumer
	name    string // for logs
	stream  string
	durable string
	batch   int // the most messages a worker takes through the gate at once
	workers int
	pull    int // messages buffered by the pull consumer
	handle  func(ctx context.Context, msgs []jetstream.Msg)
	config  func() jetstream.ConsumerConfig

	cons      jetstream.Consumer
	consuming atomic.Bool
}

// setup creates the durable consumer, or updates it to the configuration.
// A consumer that exists keeps where it delivers from: the server does not
// let that change.
func (s *source) setup(ctx context.Context) error {
	cc := s.config()
	if cur, err := s.c.js.Consumer(ctx, s.stream, s.durable); err == nil {
		info := cur.CachedInfo().Config
		cc.DeliverPolicy, cc.OptStartSeq, cc.OptStartTime = info.DeliverPolicy, info.OptStartSeq, info.OptStartTime
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("consumer: %s: durable consumer %s: %w", s.name, s.durable, err)
	}
	cons, err := s.c.js.CreateOrUpdateConsumer(ctx, s.stream, cc)
	if err != nil {
		return fmt.Errorf("consumer: %s: durable consumer %s on stream %s: %w%s", s.name, s.durable, s.stream, err, consumerHint(err))
	}
	s.cons = cons
	return nil
}

// Server error codes of a work-queue stream refusing a consumer whose
// subjects another consumer takes (nats-server's JSConsumerWQConsumerNotUniqueErr
// and JSConsumerWQMultipleUnfilteredErr).
const (
	errCodeWQNotUnique          jetstream.ErrorCode = 10100
	errCodeWQMultipleUnfiltered jetstream.ErrorCode = 10099
)

// consumerHint explains the server's refusals an operator can act on.
func consumerHint(err error) string {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == errCodeWQNotUnique || apiErr.ErrorCode == errCodeWQMultipleUnfiltered) {
		return " (on a work-queue stream each subject belongs to one consumer: delete the consumer of a renamed or removed pipeline with 'nats consumer rm', or use stream.retention: limits)"
	}
	return ""
}

// run consumes until ctx is done, then drains: it stops pulling, lets the
// workers finish what they took, and returns. Their work runs under work,
// which the caller cancels if the drain takes too long. If consuming stops
// on its own (the durable consumer was deleted under it), run says so,
// reports not ready, and sets the consumer up again, with backoff.
func (s *source) run(ctx, work context.Context) {
	wait := 100 * time.Millisecond
	for {
		stopped, err := s.consume(ctx, work)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = stopped
		}
		s.c.log.Error("stopped consuming; setting the durable consumer up again", "source", s.name, "durable", s.durable, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
		if err := s.setup(ctx); err != nil {
			s.c.log.Error("setting the durable consumer up failed", "source", s.name, "err", err)
			continue
		}
		wait = 100 * time.Millisecond
	}
}

var errStopped = errors.New("consumer: the server ended the subscription (durable consumer deleted?)")

// consume takes messages until ctx is done or the subscription ends, and
// returns once the workers have finished.
func (s *source) consume(ctx, work context.Context) (stopped, err error) {
	in := make(chan jetstream.Msg, 2*s.batch)
	var lastErr atomic.Pointer[error]
	check := make(chan struct{}, 1)
	cc, err := s.cons.Consume(func(m jetstream.Msg) { in <- m },
		jetstream.PullMaxMessages(max(s.pull, 2*s.batch)),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			lastErr.Store(&err)
			s.c.log.Warn("consume error", "source", s.name, "err", err)
			select {
			case check <- struct{}{}:
			default:
			}
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("consumer: %s: consume: %w", s.name, err)
	}
	// The watcher ends before consume returns: run may set the durable
	// consumer up again (s.cons) as soon as it does.
	watching, stopWatching := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		s.watch(watching, s.cons, cc, check, &lastErr)
	}()
	defer func() { stopWatching(); <-watched }()
	var g errgroup.Group
	for range s.workers {
		g.Go(func() error {
			batch := make([]jetstream.Msg, 0, s.batch)
			for m := range in {
				batch = append(batch[:0], m)
			fill:
				for len(batch) < s.batch {
					select {
					case m, ok := <-in:
						if !ok {
							break fill
						}
						batch = append(batch, m)
					default:
						break fill
					}
				}
				s.handle(work, batch)
			}
			return nil
		})
	}
	s.consuming.Store(true)
	select {
	case <-ctx.Done():
		cc.Drain()
	case <-cc.Closed():
	}
	s.consuming.Store(false)
	stopWatching()
	<-cc.Closed()
	close(in)
	_ = g.Wait()
	if ctx.Err() != nil {
		return nil, nil
	}
	if e := lastErr.Load(); e != nil {
		return fmt.Errorf("%w: %w", errStopped, *e), nil
	}
	return errStopped, nil
}

// watchEvery is how often a consuming source asks the server whether its
// durable consumer still exists.
const watchEvery = 2 * time.Second

// watch stops cc when the durable consumer is gone. The server tells a
// waiting pull request that its consumer was deleted, but a consumer deleted
// while no request was waiting (one in flight, or between two) leaves the
// subscription pulling from nothing, with no error that ends it: so watch
// asks on every consume error and every watchEvery.
func (s *source) watch(ctx context.Context, cons jetstream.Consumer, cc jetstream.ConsumeContext, check <-chan struct{}, lastErr *atomic.Pointer[error]) {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-check:
		}
		ictx, cancel := context.WithTimeout(ctx, watchEvery)
		_, err := cons.Info(ictx)
		cancel()
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			lastErr.Store(&err)
			cc.Stop()
			return
		}
	}
}
