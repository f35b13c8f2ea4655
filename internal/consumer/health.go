package consumer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// A ledger that cannot be reached (a KV bucket electing a leader, a disk
// that refuses writes) is not a trigger's failure: a claim it could not
// answer is no try, and a trigger is never dead-lettered for it. The
// trigger waits, with a backoff that grows while the ledger stays away
// (capped, with jitter, so that a pipeline's triggers do not all come back
// at once), the consumer reports itself not ready (Ready, /readyz), and
// every such claim is counted (Observer.LedgerUnavailable). The first
// claim the ledger answers, or a probe's read, ends the outage.

// ledgerHealth follows whether the ledger answers.
type ledgerHealth struct {
	l        ledger.Ledger
	failures atomic.Int64          // claims refused in a row
	down     atomic.Pointer[error] // the last refusal, while the ledger is away
	probing  atomic.Bool
	stop     chan struct{}
	stopOnce sync.Once
}

// Ledger outage backoff: the first wait, and the most.
const (
	ledgerBackoffMin = 100 * time.Millisecond
	ledgerBackoffMax = 5 * time.Second
	ledgerProbeEvery = time.Second
)

func newLedgerHealth(l ledger.Ledger) *ledgerHealth {
	return &ledgerHealth{l: l, stop: make(chan struct{})}
}

// failed records a refusal, and returns how long the refused trigger waits.
func (h *ledgerHealth) failed(err error) time.Duration {
	n := h.failures.Add(1)
	h.down.Store(&err)
	if h.probing.CompareAndSwap(false, true) {
		go h.probe()
	}
	d := min(ledgerBackoffMin<<min(n-1, 10), ledgerBackoffMax)
	// ±25% jitter.
	return d*3/4 + rand.N(d/2+1)
}

// ok records an answer: the ledger is back.
func (h *ledgerHealth) ok() {
	if h.failures.Load() != 0 {
		h.failures.Store(0)
		h.down.Store(nil)
	}
}

// err is why the consumer is not ready for the ledger, or nil.
func (h *ledgerHealth) err() error {
	if e := h.down.Load(); e != nil {
		return fmt.Errorf("consumer: the ledger does not answer: %w", *e)
	}
	return nil
}

// probe reads the ledger every ledgerProbeEvery while it is away, so that
// the outage ends even if no trigger comes to claim.
func (h *ledgerHealth) probe() {
	for {
		h.probeWhileDown()
		h.probing.Store(false)
		// An outage that began as the last probe ended starts its own.
		if h.down.Load() == nil || !h.probing.CompareAndSwap(false, true) {
			return
		}
	}
}

func (h *ledgerHealth) probeWhileDown() {
	t := time.NewTicker(ledgerProbeEvery)
	defer t.Stop()
	for h.down.Load() != nil {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), ledgerProbeEvery)
		_, err := h.l.Get(ctx, dedupe.Key{})
		cancel()
		if err == nil || errors.Is(err, ledger.ErrNotFound) {
			h.ok()
		}
	}
}

func (h *ledgerHealth) close() { h.stopOnce.Do(func() { close(h.stop) }) }
