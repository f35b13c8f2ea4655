package consumer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// hold keeps the held triggers' messages and leases alive while the rest
// of the chain works on them. The context it returns ends if the leases
// run out without renewal, or are all taken over: work past that point
// could race the new holder.
//
// Renewals run on a timer, so work that ends before the first one is due
// (most work: a renewal is due after a third of the ack wait or the lease)
// costs no goroutine; the stop function waits for a renewal under way.
func (s *claimStage) hold(ctx context.Context, held []*Trigger) (context.Context, func()) {
	g := s.g
	ctx, cancel := context.WithCancelCause(ctx)
	until := held[0].claim.Lease.Until
	for _, t := range held[1:] {
		if t.claim.Lease.Until.Before(until) {
			until = t.claim.Lease.Until
		}
	}
	expire := time.AfterFunc(time.Until(until), func() { cancel(errLeaseExpired) })
	every := max(s.keepEvery(held[0])/3, 50*time.Millisecond)
	var (
		mu      sync.Mutex // held by a renewal under way, and by stop
		stopped bool
		tick    *time.Timer
	)
	mu.Lock() // tick is set before the renewal reads it
	tick = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		// The next renewal is due every after this one began, not after
		// it ended: a pass over many leases on a slow store (a KV bucket
		// electing a leader) must not stretch the interval past a lease.
		start := time.Now()
		g.renew(ctx, held, cancel, expire)
		tick.Reset(max(every-time.Since(start), 0))
	})
	mu.Unlock()
	return ctx, func() {
		mu.Lock()
		stopped = true
		tick.Stop()
		mu.Unlock()
		expire.Stop()
		cancel(nil)
	}
}

// renew marks the held triggers in progress and extends their leases; it
// cancels the work if every lease was taken over, and moves the expiry to
// the earliest new deadline.
func (g *gate) renew(ctx context.Context, held []*Trigger, cancel context.CancelCauseFunc, expire *time.Timer) {
	live := 0
	var next time.Time
	for _, t := range held {
		if t.lost.Load() {
			continue
		}
		g.set.inProgress(t.msg)
		l, asked, err := g.extend(context.WithoutCancel(ctx), t)
		switch {
		case err == nil:
			t.token.Store(l.Token)
			t.leaseEnd.Store(asked + int64(g.lease))
			if next.IsZero() || l.Until.Before(next) {
				next = l.Until
			}
			live++
		case errors.Is(err, ledger.ErrStaleToken):
			t.lost.Store(true) // taken over: the new holder answers for it
		default:
			live++
			g.c.log.Warn("lease renewal failed", "pipeline", g.pipeline, "key", t.key.String(), "err", err)
		}
	}
	if live == 0 {
		cancel(errLeaseLost)
	} else if !next.IsZero() {
		expire.Reset(time.Until(next))
	}
}

// extend renews t's lease for g.lease, and returns the new lease and when
// the try that got it was asked (by mono).
//
// As a note's write (saveNote), a try unanswered for noteTry is not waited
// for alone: another starts beside it, and the first answer counts. A
// renewal whose reply is lost would otherwise hold the renewals for the
// store's own timeout (5s, longer than a lease), and the work would be
// cancelled with its lease, the ledger answering all along. Two tries of
// one renewal are one renewal: Extend keeps the token. An error answers
// only once no other try is under way; no try starts once the lease is
// over by this process's clock.
func (g *gate) extend(ctx context.Context, t *Trigger) (ledger.Lease, int64, error) {
	tries := newLeaseTries(ctx, func(ctx context.Context) (ledger.Lease, error) {
		return g.ledger.Extend(ctx, t.key, t.token.Load(), g.lease)
	})
	defer tries.stop() // the tries still under way once one has answered
	tries.try()
	hedge := time.NewTimer(noteTry(g.lease))
	defer hedge.Stop()
	for {
		select {
		case a := <-tries.answers:
			tries.inFlight--
			if a.err == nil || errors.Is(a.err, ledger.ErrStaleToken) || tries.inFlight == 0 {
				return a.lease, a.asked, a.err
			}
		case <-hedge.C:
			if !g.leaseGone(t) {
				tries.try()
				hedge.Reset(noteTry(g.lease))
			}
			// Past the lease by this process's clock, the tries under
			// way are waited for: one asked within the lease that
			// answers renews it (the ledger fenced it with the token).
		case <-ctx.Done():
			return ledger.Lease{}, 0, ctx.Err()
		}
	}
}

var (
	errLeaseExpired = errors.New("consumer: the lease ran out before the work finished")
	errLeaseLost    = errors.New("consumer: the lease was taken over by another worker")
)

// monoBase is the origin of mono.
var monoBase = time.Now()

// mono is the process's monotonic clock, in nanoseconds since monoBase: it
// does not jump with the wall clock, and it runs on through a pause of the
// process (SIGSTOP, a VM's freeze), which is what leaseGone must see.
func mono() int64 { return int64(time.Since(monoBase)) }

// leaseGone reports whether t's lease may no longer be t's: taken over, as
// a renewal found, or run out by this process's own clock (with a tenth of
// the lease to spare), which a process that was paused and has just woken
// sees before its timers fire. An effect is sent only while it holds: the
// ledger fences commits, but nothing fences the effect itself, and a holder
// that sent after its lease ran out could repeat an effect that the new
// holder dead-lettered, or sent, past the target's duplicate window.
// fence is t's effect's sink.Effect.Fence: the lease checked again right
// before the sink sends, after whatever the sink waited for.
func (g *gate) fence(t *Trigger) func() error {
	return func() error {
		if g.leaseGone(t) {
			return errLeaseLost
		}
		return nil
	}
}

func (g *gate) leaseGone(t *Trigger) bool {
	if t.lost.Load() {
		return true
	}
	end := t.leaseEnd.Load()
	return end != 0 && mono() > end-int64(g.lease/10)
}
