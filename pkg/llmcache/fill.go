package llmcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"time"
)

// fill is one upstream call made on behalf of the callers of a flight: it
// claims the key across processes when the store is shared, reserves from
// the budgets, calls the model, judges and stores the answer, and holds a
// paid answer the store refused until its write lands.
type fill struct {
	t     *transport
	req   *http.Request
	body  []byte
	call  Call
	q     request
	key   Key
	st    *stepCounters
	unit  string
	limit int64

	puts      uint64      // the cache's stored answers when the caller looked
	estimate  int64       // prompt tokens, estimated by estimatePrompt
	estimated bool        // estimate is set
	need      int64       // tokens reserved from the budget
	holds     []spendHold // reservations from f.call.Limits

	// judged judges a streamed answer as it arrives, between the reads
	// of its events, rather than all of it after the last.
	judged streamInspector
}

// run calls the model, streams the answer into fl, and then accounts for
// it and stores it if store is set and the answer is complete. Before the
// call it looks for the answer once more (an identical call may have
// stored it since the caller's lookup) and, with a store shared between
// processes, takes the key's fill claim or waits for the answer of the
// process that holds it.
func (f *fill) run(fl *flight, store bool) {
	c := f.t.c
	defer c.fills.Done()
	// The wait for another process's answer has its own bound
	// (SharedWait); the model call's FillTimeout starts after it.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(f.req.Context()), c.opts.SharedWait+c.opts.FillTimeout)
	defer wcancel()
	wstop := context.AfterFunc(c.ctx, wcancel)
	defer wstop()

	var claim Claim
	if f.call.Mode == ModeDefault || f.call.Mode == ModeNoStore {
		if c.filler != nil {
			cl, entry, err := c.filler.Fill(wctx, f.key, c.opts.SharedWait, c.live)
			switch {
			case err != nil && wctx.Err() != nil:
				if c.ctx.Err() != nil {
					err = ErrClosed
				}
				f.abandon(fl, err)
				return
			case err != nil:
				f.st.unavailable.Add(1)
				f.abandon(fl, fmt.Errorf("%w: %w", ErrStoreUnavailable, err))
				return
			case entry != nil:
				if a, err := unmarshalEntry(entry); err == nil && c.opts.Clock().Before(a.Expires) {
					f.serve(fl, a, "shared")
					return
				}
			case cl != nil:
				claim = cl
			}
		}
	}
	// Only a store another process writes to, or an answer this Cache
	// stored since the caller looked, can make the second look find one.
	// A shared store that gave a claim has looked after taking it
	// (Filler), from its leader: what is left to look at then is an answer
	// this Cache holds because the store refused it, which a flight of the
	// key may have left since the caller's lookup.
	if f.call.Mode == ModeDefault || f.call.Mode == ModeNoStore {
		var a *storedAnswer
		switch {
		case c.filler != nil && claim != nil:
			a = c.heldAnswer(f.key)
		case c.filler != nil || c.puts.Load() != f.puts:
			var ok bool
			var err error
			a, ok, err = f.t.lookup(wctx, f.key)
			if err != nil {
				f.release(claim)
				f.st.unavailable.Add(1)
				f.abandon(fl, err)
				return
			}
			if !ok {
				a = nil
			}
		}
		if a != nil {
			f.release(claim)
			f.serve(fl, a, "hit")
			return
		}
	}
	if f.call.Mode == ModeBypass {
		f.st.bypassed.Add(1)
	} else {
		f.st.misses.Add(1)
	}

	var resID uint64
	if f.limit != math.MaxInt64 {
		id, err := c.budgets.reserve(wctx, f.call.Namespace, f.unit, f.need, f.limit, c.opts.Clock().Add(c.opts.FillTimeout+time.Minute))
		if err != nil {
			f.release(claim)
			f.t.denied(f.st, err)
			f.abandon(fl, err)
			return
		}
		resID = id
	}
	if len(f.call.Limits) > 0 {
		f.estimatePrompt()
		need := c.opts.Prices.cost(f.q.Model, usage{PromptTokens: f.estimate, CompletionTokens: completionTokens(f.q, f.call.CompletionTokens)})
		holds, err := c.reserveSpend(wctx, f.call.Limits, need, c.opts.Clock().Add(c.opts.FillTimeout+time.Minute))
		if err != nil {
			if f.limit != math.MaxInt64 {
				c.budgets.settle(context.WithoutCancel(wctx), f.call.Namespace, f.unit, resID, 0)
			}
			f.release(claim)
			f.t.denied(f.st, err)
			f.abandon(fl, err)
			return
		}
		f.holds = holds
	}

	// FillTimeout is the model call's alone: a store slow to answer
	// before it (a leader election) must not leave the call too little
	// time, since a call the model answers after its caller hung up is
	// paid for all the same.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(f.req.Context()), c.opts.FillTimeout)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	up := f.req.Clone(ctx)
	up.Body = io.NopCloser(bytes.NewReader(f.body))
	up.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(f.body)), nil }
	up.ContentLength = int64(len(f.body))

	// A stream that will report no usage is counted with the tokenizer
	// once it ends: its prompt is counted now, while the model answers,
	// rather than between the answer's last event and its [DONE].
	var prompt chan int64
	if f.q.NoUsage && !f.estimated {
		prompt = make(chan int64, 1)
		go func() { prompt <- estimatePrompt(f.q) }()
	}
	start := time.Now()
	resp, err := f.t.next.RoundTrip(up)
	var status int
	var readErr error
	if err != nil {
		fl.fail(err)
	} else {
		status = resp.StatusCode
		fl.start(status, resp.Header, "")
		if f.q.NoUsage {
			f.judged.count = codecFor(f.q.Model)
		}
		bp := readBufs.Get().(*[32 << 10]byte)
		buf := bp[:]
		for {
			n, err := resp.Body.Read(buf)
			fl.write(buf[:n]) // copies
			if f.q.Stream && status == http.StatusOK && n > 0 {
				f.judged.feed(fl.bytes())
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				readErr = err
				break
			}
		}
		readBufs.Put(bp)
		resp.Body.Close()
	}
	if err == nil && c.ctx.Err() != nil && readErr != nil {
		readErr = ErrClosed
	}
	// The answer is stored, and the flight gone from the map, before its
	// readers see the end: a caller whose call has returned finds the
	// answer in the store on its next call. The claim is released after
	// the store, so that a process waiting on it sees the answer first.
	// The answer is accounted for and stored under a bound of its own, not
	// what is left of the call's.
	sctx, scancel := context.WithTimeout(context.WithoutCancel(f.req.Context()), storeFirstTry)
	defer scancel()
	sstop := context.AfterFunc(c.ctx, scancel)
	defer sstop()
	took := time.Since(start)
	if prompt != nil {
		f.estimate, f.estimated = <-prompt, true
	}
	pending := f.finish(sctx, fl, store, resID, status, err, readErr, took)
	if err == nil {
		fl.end(readErr)
	}
	if pending != nil {
		f.storeLater(pending)
	}
	f.release(claim)
}

// readBufs are the buffers fills read answers through: 32 KiB each, which
// a fill allocated and zeroed per call.
var readBufs = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// estimatePrompt counts the request's prompt tokens with the tokenizer,
// once.
func (f *fill) estimatePrompt() {
	if !f.estimated {
		f.estimate, f.estimated = estimatePrompt(f.q), true
	}
}

// storeLater retries, with backoff, the write of a paid answer that the
// store refused (a shared store between leaders, cut off from its quorum,
// its server restarting), until it lands: finish holds the answer in the
// Cache meanwhile (get serves it, so this process never pays for it
// again), and run keeps the fill claim, so that other processes wait for
// this answer instead of paying for another. See Cache.storeHeld.
func (f *fill) storeLater(a *storedAnswer) { f.t.c.storeHeld(f.key, a, f.st, 1, false) }

// storeFirstTry bounds each attempt to store an answer and record its
// tokens; storeLastTry the last one, when the Cache closes; storeMaxBackoff
// the wait between two attempts.
const (
	storeFirstTry   = 5 * time.Second
	storeLastTry    = 2 * time.Second
	storeMaxBackoff = 5 * time.Second
)

// release gives up claim, if any, under a bound of its own: the fill's
// context may be done.
func (f *fill) release(claim Claim) {
	if claim == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := claim.Release(ctx); err != nil {
		f.t.c.opts.Logger.Debug("llmcache: releasing a fill claim failed; it lapses", "key", f.key.String(), "err", err)
	}
}

// serve answers the flight's callers with a stored answer, as how ("hit",
// or "shared" for one another process made).
func (f *fill) serve(fl *flight, a *storedAnswer, how string) {
	c := f.t.c
	if how == "hit" {
		f.st.hits.Add(1)
	} else {
		f.st.shared.Add(1)
	}
	cost := c.opts.Prices.cost(a.Model, a.Usage)
	f.st.save(a.Usage, cost)
	h := http.Header{}
	h.Set("Content-Type", a.ContentType)
	fl.start(http.StatusOK, h, how)
	fl.write(a.Body)
	sharers := f.done(fl)
	for _, s := range sharers {
		s.save(a.Usage, cost)
	}
	fl.end(nil)
}

// abandon fails the flight with err, before any upstream call.
func (f *fill) abandon(fl *flight, err error) {
	f.done(fl)
	fl.fail(err)
}

// done removes fl from the cache's flights and returns who joined it.
func (f *fill) done(fl *flight) []*stepCounters {
	c := f.t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flights[f.key] == fl {
		delete(c.flights, f.key)
	}
	return fl.sharers
}

// finish accounts for an upstream call and stores its answer; it returns
// the answer if the store failed, for run to retry after the callers have
// it.
func (f *fill) finish(ctx context.Context, fl *flight, store bool, resID uint64, status int, callErr, readErr error, took time.Duration) (pending *storedAnswer) {
	c := f.t.c
	body := fl.bytes()
	var v verdict
	switch {
	case callErr != nil:
		v.reason = "upstream call failed"
	case readErr != nil:
		v.reason = "answer cut off"
		if f.q.Stream && status == http.StatusOK {
			// What arrived of it was paid for, and is counted.
			got := f.judged.verdict(body)
			v.usage, v.text, v.tokens, v.counted = got.usage, got.text, got.tokens, got.counted
		}
	case status != http.StatusOK:
		v.reason = fmt.Sprintf("status %d", status)
	case f.q.Stream:
		v = f.judged.verdict(body)
	default:
		v = inspectJSON(body)
	}

	// What the call spent: the API's usage if it gave one; an error
	// status is not billed; a call that failed or was cut off may have
	// been, so its prompt (estimated) and what arrived of the answer count.
	var spent usage
	switch {
	case v.usage != nil:
		spent = *v.usage
	case callErr == nil && status >= 400:
	default:
		codec := codecFor(f.q.Model)
		f.estimatePrompt()
		completion := v.tokens
		if !v.counted {
			completion = countTokens(codec, v.text)
		}
		spent = usage{PromptTokens: f.estimate, CompletionTokens: completion, Estimated: true}
	}
	cost := c.opts.Prices.cost(f.q.Model, spent)
	f.st.spend(spent, cost)
	if f.estimated {
		f.st.estimated.Add(f.estimate)
	}
	if callErr != nil || status >= 400 {
		f.st.errors.Add(1)
	}

	stored := false
	switch {
	case !v.complete:
	case !store:
		v.reason = "not stored (mode)"
	case len(body) > c.opts.MaxEntryBytes:
		v.reason = fmt.Sprintf("answer of %d bytes exceeds MaxEntryBytes", len(body))
	default:
		ttl := f.call.TTL
		if ttl <= 0 {
			ttl = c.opts.TTL
		}
		now := c.opts.Clock()
		a := &storedAnswer{
			Created: now, Expires: now.Add(ttl), Status: status,
			ContentType: fl.header.Get("Content-Type"), Model: f.q.Model,
			Stream: f.q.Stream, Usage: spent, Body: body,
		}
		// On this process's disk first (with a HoldDir), so that a death
		// before the store's answer does not lose what was paid for.
		spooled := f.spool(a)
		switch err := c.put(ctx, f.key, a); {
		case err == nil:
			stored = true
			if spooled {
				c.unspool(f.key)
			}
		case errors.Is(err, ErrClosed) || c.ctx.Err() != nil:
			c.opts.Logger.Warn("llmcache: store failed", "key", f.key.String(), "err", err, "kept_in_hold_dir", spooled)
			v.reason = "store failed"
		default:
			c.opts.Logger.Warn("llmcache: store failed; holding the answer and retrying", "key", f.key.String(), "err", err)
			v.reason = "store failed; held"
			c.hold(f.key, a) // before the flight goes: a lookup finds one or the other
			f.st.held.Add(1)
			pending = a
		}
	}
	if stored {
		f.st.stored.Add(1)
	} else if pending == nil {
		f.st.notStored.Add(1)
	}
	// The tokens are recorded after the answer is stored: a process that
	// dies between the model's answer and its store has paid for nothing
	// it kept, and the store is the shorter wait. A call under no budget
	// records nothing: no budget reads the count, and the write was a
	// tenth of a miss's own CPU.
	if f.limit != math.MaxInt64 {
		if err := c.budgets.settle(ctx, f.call.Namespace, f.unit, resID, spent.Total()); err != nil {
			c.opts.Logger.Warn("llmcache: recording spent tokens failed", "unit", f.unit, "err", err)
		}
	}
	if len(f.holds) > 0 {
		c.settleSpend(ctx, f.holds, f.call.Limits, cost)
	}
	sharers := f.done(fl)
	if status == http.StatusOK && readErr == nil {
		for _, s := range sharers {
			s.save(spent, cost)
		}
	}
	c.opts.Logger.Debug("llmcache: upstream call",
		"namespace", f.call.Namespace, "step", f.call.Step, "intent", f.call.Intent, "key", f.key.String(),
		"status", status, "took", took, "prompt_tokens", spent.PromptTokens,
		"completion_tokens", spent.CompletionTokens, "estimated", spent.Estimated,
		"stored", stored, "reason", v.reason, "shared_with", len(sharers))
	return pending
}
