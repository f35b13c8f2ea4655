package main

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// With -approvals, the notify pipeline's one-shot effects wait for an
// approval, and the soak plays the person who gives it: soon after each
// notify intent's first trigger goes out, it approves it, cancels it,
// approves it and then cancels it as it may be going out, or never does
// anything (the entry must then be dead-lettered not_approved after the
// approval_timeout), as the intent's fate says. It keeps every answer: a
// cancel answered "cancelled" promises that the effect will never be sent,
// which the checker holds against the one-shot sink's log.

// control is one request of the person.
type control struct {
	at     time.Duration // after the start of the fault window
	intent int
	cancel bool // a cancel; else an approval
}

// controls sends the approvals and cancels of a run and keeps the answers.
type controls struct {
	nc   *nats.Conn
	keys map[int]dedupe.Key // notify intents' keys
	list []control

	mu       sync.Mutex
	answers  map[int]map[bool]string // intent → cancel? → the answer
	failures int                     // requests never answered
	sent     int
}

// controlRequestTimeout is how long one request waits for its answer
// before it is sent again: long, since a replica answers the requests one
// at a time, and one sent again after an answer that was merely slow gets
// "already cancelled" for the cancel it made.
const controlRequestTimeout = 10 * time.Second

// controlAnswerTimeout bounds how long one request is retried (while no
// replica is up to answer it, say).
const controlAnswerTimeout = 60 * time.Second

// newControls draws the requests for the workload's notify intents, whose
// keys it derives with the pipeline's keyer from the configuration.
func newControls(seed uint64, w *workload, keyer *dedupe.Keyer, nc *nats.Conn) (*controls, error) {
	rng := rand.New(rand.NewPCG(seed, 0x636f6e74726f6c)) // "control"
	c := &controls{nc: nc, keys: map[int]dedupe.Key{}, answers: map[int]map[bool]string{}}
	for _, in := range w.intents {
		if in.fate == "" || in.fate == fateNever {
			continue
		}
		in0, err := keyer.Intent(in.copies[0].data)
		if err != nil {
			return nil, fmt.Errorf("soak: the key of notify intent %d: %w", in.id, err)
		}
		c.keys[in.id] = in0.Key
		first := in.copies[0].at
		soon := first + 200*time.Millisecond + time.Duration(rng.Int64N(int64(1300*time.Millisecond)))
		switch in.fate {
		case fateApprove:
			c.list = append(c.list, control{at: soon, intent: in.id})
		case fateCancel:
			c.list = append(c.list, control{at: soon, intent: in.id, cancel: true})
		case fateApproveCancel:
			c.list = append(c.list, control{at: soon, intent: in.id},
				control{at: soon + time.Duration(rng.Int64N(int64(time.Second))), intent: in.id, cancel: true})
		}
	}
	slices.SortStableFunc(c.list, func(a, b control) int { return cmp.Compare(a.at, b.at) })
	return c, nil
}

// run sends the requests on their schedule from t0, each retried until a
// replica answers it, and returns when all are answered or given up.
func (c *controls) run(ctx context.Context, t0 time.Time) {
	// Several at once: a request waits while no replica answers (an
	// outage), and the ones behind it must not be held up past their
	// entries' approval timeout; not many more, since a replica answers
	// them one at a time.
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, ct := range c.list {
		if d := time.Until(t0.Add(ct.at)); d > 0 && !sleepCtx(ctx, d) {
			return
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			c.send(ctx, ct)
		})
	}
}

// send makes one request until it is answered: a reply that is not an
// error (an error says the ledger could not be asked: ask again).
func (c *controls) send(ctx context.Context, ct control) {
	subj := approvalSubject
	if ct.cancel {
		subj = consumer.CancelSubject(pNotify)
	}
	body := []byte(c.keys[ct.intent].String())
	deadline := time.Now().Add(controlAnswerTimeout)
	last := ""
	for time.Now().Before(deadline) && ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, controlRequestTimeout)
		msg, err := c.nc.RequestWithContext(rctx, subj, body)
		cancel()
		switch {
		case err != nil:
			last = err.Error()
		case strings.HasPrefix(string(msg.Data), "error"):
			last = string(msg.Data)
		default:
			c.mu.Lock()
			if c.answers[ct.intent] == nil {
				c.answers[ct.intent] = map[bool]string{}
			}
			c.answers[ct.intent][ct.cancel] = string(msg.Data)
			c.sent++
			c.mu.Unlock()
			return
		}
		sleepCtx(ctx, 300*time.Millisecond)
	}
	if ctx.Err() == nil {
		c.mu.Lock()
		c.failures++
		c.mu.Unlock()
		fmt.Fprintf(os.Stderr, "soak: %s of notify intent %d never answered in %v: %s\n", map[bool]string{true: "cancel", false: "approval"}[ct.cancel], ct.intent, controlAnswerTimeout, last)
	}
}

// cancelled reports whether a cancel of the intent's one-shot effect was
// answered "cancelled": to the request, or to an earlier try of it whose
// answer was too slow (the next try then hears "already cancelled"). It
// promises that the effect is never sent.
func (c *controls) cancelled(intent int) bool {
	a := c.answer(intent, true)
	return a == "cancelled" || a == "already cancelled"
}

// answer returns the answer to the intent's cancel (cancel) or approval,
// or "".
func (c *controls) answer(intent int, cancel bool) string {
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answers[intent][cancel]
}
