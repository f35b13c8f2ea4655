package llmcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Response headers the transport adds.
const (
	// HeaderCache says how the cache answered: "hit" (from the store),
	// "shared" (joined an identical call in flight), "miss" (called the
	// model) or "bypass".
	HeaderCache = "X-Oncegate-Cache"
	// HeaderCacheKey is the cache key of the request, for inspection.
	HeaderCacheKey = "X-Oncegate-Cache-Key"
)

type transport struct {
	c    *Cache
	next http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/chat/completions") {
		return t.next.RoundTrip(req)
	}
	c := t.c
	call, _ := CallFrom(req.Context())
	if call.Namespace == "" {
		call.Namespace = c.opts.Namespace
	}
	st := c.stats.step(call.Namespace, call.Step)
	st.requests.Add(1)

	body, whole, err := readBody(req, c.opts.MaxRequestBytes)
	if err != nil {
		st.invalid.Add(1)
		return nil, fmt.Errorf("llmcache: read request body: %w", err)
	}
	if !whole { // too large to key: send it as it is
		st.bypassed.Add(1)
		return t.next.RoundTrip(req)
	}
	key, err := keyBody(c.endpoint(req.URL), call, body, nil)
	if err != nil {
		st.invalid.Add(1)
		return nil, err
	}
	readable := call.Mode == ModeDefault || call.Mode == ModeNoStore
	puts := c.puts.Load() // answers stored before the lookup
	if readable {
		a, ok, err := t.lookup(req.Context(), key)
		if err != nil {
			st.unavailable.Add(1)
			return nil, err
		}
		if ok {
			return t.hit(req, key, a, st), nil
		}
	}

	// A miss: what the call may spend, before it goes out.
	q, err := parseRequest(body)
	if err != nil {
		st.invalid.Add(1)
		return nil, err
	}
	f := &fill{
		t: t, req: req, body: body, call: call, q: q, key: key, st: st,
		unit: call.Intent, puts: puts,
	}
	if f.unit == "" {
		f.unit = key.String()
	}
	f.limit = call.Budget
	if f.limit == 0 {
		f.limit = c.opts.Budget
	}
	if f.limit <= 0 {
		f.limit = math.MaxInt64
	}
	if f.limit != math.MaxInt64 {
		// The tokenizer runs only where its count is used: a budget to
		// reserve from now, or an answer without usage afterwards. (It
		// was an eighth of a miss's CPU, on every miss.)
		f.estimatePrompt()
		f.need = f.estimate
		if q.MaxTokens > 0 {
			f.need += q.N * q.MaxTokens
		}
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if call.Mode == ModeBypass {
		c.fills.Add(1)
		c.mu.Unlock()
		fl := newFlight(q.Stream)
		go f.run(fl, false)
		return fl.response(req, key, "bypass")
	}
	if fl := c.flights[key]; fl != nil {
		fl.join(st)
		c.mu.Unlock()
		st.shared.Add(1)
		return fl.response(req, key, "shared")
	}
	fl := newFlight(q.Stream)
	c.flights[key] = fl
	c.fills.Add(1)
	c.mu.Unlock()
	go f.run(fl, call.Mode != ModeNoStore)
	return fl.response(req, key, "miss")
}

func (t *transport) denied(st *stepCounters, err error) error {
	if errors.Is(err, ErrBudgetExceeded) {
		st.budgetDenied.Add(1)
	} else {
		st.errors.Add(1)
	}
	return err
}

// lookup reads the store. A damaged entry is a miss, asked again and
// overwritten. Any other read error is a miss too with a store of this
// process's own; with a store shared between processes it is an error
// wrapping ErrStoreUnavailable, since the answer may well be there: the
// caller tries again later rather than pay for the answer twice.
func (t *transport) lookup(ctx context.Context, k Key) (*Answer, bool, error) {
	a, ok, err := t.c.get(ctx, k)
	if err != nil {
		if t.c.filler != nil && !errors.Is(err, ErrCorruptEntry) {
			return nil, false, fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
		}
		t.c.opts.Logger.Warn("llmcache: read failed; treating as a miss", "key", k.String(), "err", err)
		return nil, false, nil
	}
	return a, ok, nil
}

func (t *transport) hit(req *http.Request, k Key, a *Answer, st *stepCounters) *http.Response {
	st.hits.Add(1)
	st.save(a.Usage, t.c.opts.Prices.Cost(a.Model, a.Usage))
	h := http.Header{}
	h.Set("Content-Type", a.ContentType)
	h.Set(HeaderCache, "hit")
	h.Set(HeaderCacheKey, k.String())
	return &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(a.Body)),
		ContentLength: int64(len(a.Body)), Request: req,
	}
}

// readBody reads and closes req.Body if it is at most limit bytes; whole
// is false, and req.Body is left to read in full, if it is larger.
func readBody(req *http.Request, limit int) (body []byte, whole bool, err error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, true, nil
	}
	body, err = io.ReadAll(io.LimitReader(req.Body, int64(limit)+1))
	if err != nil {
		req.Body.Close()
		return nil, false, err
	}
	if len(body) > limit {
		req.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), req.Body), req.Body}
		return nil, false, nil
	}
	return body, true, req.Body.Close()
}

// fill is one upstream call made for the callers of a flight.
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

	puts      uint64 // the cache's stored answers when the caller looked
	estimate  int64  // prompt tokens, estimated by estimatePrompt
	estimated bool   // estimate is set
	need      int64  // tokens reserved from the budget
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
			cl, entry, err := c.filler.Fill(wctx, f.key, c.opts.SharedWait)
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
	if (f.call.Mode == ModeDefault || f.call.Mode == ModeNoStore) && (c.filler != nil || c.puts.Load() != f.puts) {
		a, ok, err := f.t.lookup(wctx, f.key)
		if err != nil {
			f.release(claim)
			f.st.unavailable.Add(1)
			f.abandon(fl, err)
			return
		}
		if ok {
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

	start := time.Now()
	resp, err := f.t.next.RoundTrip(up)
	var status int
	var readErr error
	if err != nil {
		fl.fail(err)
	} else {
		status = resp.StatusCode
		fl.start(status, resp.Header, "")
		bp := readBufs.Get().(*[32 << 10]byte)
		buf := bp[:]
		for {
			n, err := resp.Body.Read(buf)
			fl.write(buf[:n]) // copies
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
	pending := f.finish(sctx, fl, store, resID, status, err, readErr, time.Since(start))
	if err == nil {
		fl.end(readErr)
	}
	if pending != nil {
		f.storeLater(fl, pending)
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

// storeLater retries storing a complete answer the store refused (a shared
// store between leaders, or cut off from its quorum) for up to
// Options.StoreRetry, holding the fill claim meanwhile so that other
// processes wait for the answer instead of paying for it again.
func (f *fill) storeLater(fl *flight, a *Answer) {
	c := f.t.c
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.StoreRetry)
	defer cancel()
	wait := 100 * time.Millisecond
	for {
		err := c.put(ctx, f.key, a)
		if err == nil {
			f.st.stored.Add(1)
			break
		}
		if ctx.Err() != nil || errors.Is(err, ErrClosed) {
			c.opts.Logger.Warn("llmcache: store failed; giving up", "key", f.key.String(), "err", err)
			f.st.notStored.Add(1)
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		wait = min(2*wait, 2*time.Second)
	}
	f.done(fl)
}

// storeFirstTry bounds the first attempt to store an answer and record
// its tokens; a store that fails is retried in the background.
const storeFirstTry = 5 * time.Second

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
func (f *fill) serve(fl *flight, a *Answer, how string) {
	c := f.t.c
	if how == "hit" {
		f.st.hits.Add(1)
	} else {
		f.st.shared.Add(1)
	}
	cost := c.opts.Prices.Cost(a.Model, a.Usage)
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
func (f *fill) finish(ctx context.Context, fl *flight, store bool, resID uint64, status int, callErr, readErr error, took time.Duration) (pending *Answer) {
	c := f.t.c
	body := fl.bytes()
	var v verdict
	switch {
	case callErr != nil:
		v.reason = "upstream call failed"
	case readErr != nil:
		v.reason = "answer cut off"
	case status != http.StatusOK:
		v.reason = fmt.Sprintf("status %d", status)
	case f.q.Stream:
		v = inspectStream(body)
	default:
		v = inspectJSON(body)
	}

	// What the call spent: the API's usage if it gave one; an error
	// status is not billed; a call that failed or was cut off may have
	// been, so its prompt (estimated) and what arrived of the answer count.
	var spent Usage
	switch {
	case v.usage != nil:
		spent = *v.usage
	case callErr == nil && status >= 400:
	default:
		codec := codecFor(f.q.Model)
		f.estimatePrompt()
		spent = Usage{PromptTokens: f.estimate, CompletionTokens: countTokens(codec, v.text), Estimated: true}
	}
	cost := c.opts.Prices.Cost(f.q.Model, spent)
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
		a := &Answer{
			Created: now, Expires: now.Add(ttl), Status: status,
			ContentType: fl.header.Get("Content-Type"), Model: f.q.Model,
			Stream: f.q.Stream, Usage: spent, Body: body,
		}
		switch err := c.put(ctx, f.key, a); {
		case err == nil:
			stored = true
		case errors.Is(err, ErrClosed) || c.ctx.Err() != nil:
			c.opts.Logger.Warn("llmcache: store failed", "key", f.key.String(), "err", err)
			v.reason = "store failed"
		default:
			c.opts.Logger.Warn("llmcache: store failed; retrying in the background", "key", f.key.String(), "err", err)
			v.reason = "store failed; retrying"
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
	var sharers []*stepCounters
	if pending == nil {
		sharers = f.done(fl)
	} else {
		// The flight stays joinable, whole, while the store is retried:
		// an identical call in this process reads the answer from it.
		c.mu.Lock()
		sharers = append([]*stepCounters(nil), fl.sharers...)
		c.mu.Unlock()
	}
	if status == http.StatusOK && readErr == nil {
		for _, s := range sharers {
			s.save(spent, cost)
		}
	}
	c.opts.Logger.Debug("llmcache: upstream call",
		"namespace", f.call.Namespace, "step", f.call.Step, "key", f.key.String(),
		"status", status, "took", took, "prompt_tokens", spent.PromptTokens,
		"completion_tokens", spent.CompletionTokens, "estimated", spent.Estimated,
		"stored", stored, "reason", v.reason, "shared_with", len(sharers))
	return pending
}

// flight is one upstream answer as it arrives, readable from the start by
// every caller waiting for it, each at its own pace. A plain answer is shown
// once it is whole and judged (JSON is of no use in part); a stream event
// by event, but for the final [DONE] marker.
type flight struct {
	head   chan struct{} // closed once status and header, or err, are set
	status int
	header http.Header
	how    string // overrides the caller's "miss" when set: "hit" or "shared"
	err    error

	mu      sync.Mutex
	buf     []byte
	shown   int  // readers see buf[:shown]; all of it once done
	stream  bool // buf is a server-sent event stream
	done    bool
	readErr error
	more    chan struct{} // closed and replaced whenever buf grows or done is set

	sharers []*stepCounters // guarded by the Cache's mu
}

func newFlight(stream bool) *flight {
	return &flight{head: make(chan struct{}), more: make(chan struct{}), stream: stream}
}

func (f *flight) join(st *stepCounters) { f.sharers = append(f.sharers, st) }

func (f *flight) fail(err error) {
	f.err = err
	close(f.head)
	f.end(err)
}

func (f *flight) start(status int, h http.Header, how string) {
	f.status, f.header, f.how = status, h.Clone(), how
	close(f.head)
}

func (f *flight) write(p []byte) {
	if len(p) == 0 {
		return
	}
	f.mu.Lock()
	f.buf = append(f.buf, p...)
	if f.stream {
		f.shown = streamShown(f.buf, f.shown)
	}
	close(f.more)
	f.more = make(chan struct{})
	f.mu.Unlock()
}

// streamShown returns how much of a stream its readers may see before it
// ends: every complete event up to, not including, the [DONE] marker, so a
// caller that stops reading at the marker (as go-openai does) returns only
// after the answer is stored. from is the previous result.
func streamShown(buf []byte, from int) int {
	for {
		i := bytes.Index(buf[from:], []byte("\n\n"))
		if i < 0 {
			return from
		}
		event := buf[from : from+i]
		if data, ok := bytes.CutPrefix(bytes.TrimSpace(event), []byte("data:")); ok && string(bytes.TrimSpace(data)) == "[DONE]" {
			return from
		}
		from += i + 2
	}
}

func (f *flight) end(err error) {
	f.mu.Lock()
	f.done, f.readErr = true, err
	f.shown = len(f.buf)
	close(f.more)
	f.mu.Unlock()
}

// bytes returns the answer so far; the whole answer once the fill has
// read it.
func (f *flight) bytes() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf
}

// response waits for the status and header of the flight's answer, or for
// req's context, and returns a response whose body reads the answer as it
// arrives. The caller's context ends the caller's wait and its reads, not
// the flight.
func (f *flight) response(req *http.Request, k Key, how string) (*http.Response, error) {
	ctx := req.Context()
	select {
	case <-f.head:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if f.err != nil {
		return nil, f.err
	}
	h := f.header.Clone()
	if f.how != "" && how == "miss" {
		how = f.how
	}
	h.Set(HeaderCache, how)
	h.Set(HeaderCacheKey, k.String())
	return &http.Response{
		Status:     fmt.Sprintf("%d %s", f.status, http.StatusText(f.status)),
		StatusCode: f.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: &flightReader{f: f, ctx: ctx},
		ContentLength: -1, Request: req,
	}, nil
}

type flightReader struct {
	f      *flight
	ctx    context.Context
	off    int
	closed bool
}

func (r *flightReader) Read(p []byte) (int, error) {
	if r.closed {
		return 0, errors.New("llmcache: read on closed response body")
	}
	for {
		r.f.mu.Lock()
		if r.off < r.f.shown {
			n := copy(p, r.f.buf[r.off:r.f.shown])
			r.off += n
			r.f.mu.Unlock()
			return n, nil
		}
		if r.f.done {
			err := r.f.readErr
			r.f.mu.Unlock()
			if err == nil {
				err = io.EOF
			}
			return 0, err
		}
		more := r.f.more
		r.f.mu.Unlock()
		select {
		case <-more:
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		}
	}
}

func (r *flightReader) Close() error {
	r.closed = true
	return nil
}
