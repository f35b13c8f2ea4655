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

	"github.com/oncegate/oncegate/pkg/dedupe"
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

// ErrRequestTooLarge is wrapped by the error returned for a request body
// over Options.MaxRequestBytes under a token budget or a spend limit: the
// cache can neither key it nor count what it may cost, so it is not
// sent. Without a budget or a limit such a request goes to the model past
// the cache.
var ErrRequestTooLarge = errors.New("llmcache: request too large to check against its limits")

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
	if call.Intent == "" {
		if in, ok := dedupe.IntentFrom(req.Context()); ok {
			call.Intent = in.Key.String()
		}
	}
	st := c.stats.step(call.Namespace, call.Step)
	st.requests.Add(1)

	body, whole, err := readBody(req, c.opts.MaxRequestBytes)
	if err != nil {
		st.invalid.Add(1)
		return nil, fmt.Errorf("llmcache: read request body: %w", err)
	}
	if !whole { // too large to key: send it as it is, unless a limit applies
		if len(call.Limits) > 0 || call.Budget > 0 || call.Budget == 0 && c.opts.Budget > 0 {
			req.Body.Close()
			st.invalid.Add(1)
			return nil, fmt.Errorf("%w: the request is over %d bytes (Options.MaxRequestBytes), and a budget or spend limit applies", ErrRequestTooLarge, c.opts.MaxRequestBytes)
		}
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
	for _, l := range call.Limits {
		if l.Name == "" || !(l.Max >= 0) || l.Period < 0 {
			st.invalid.Add(1)
			return nil, fmt.Errorf("%w: spend limit %+v: a name, a Max of 0 or more and a Period of 0 or more are needed", ErrInvalidOptions, l)
		}
	}
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
		f.need = satAdd(f.estimate, completionTokens(q, call.CompletionTokens))
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
		c.workers.run(func() { f.run(fl, false) })
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
	store := call.Mode != ModeNoStore
	c.workers.run(func() { f.run(fl, store) })
	return fl.response(req, key, "miss")
}

func (t *transport) denied(st *stepCounters, err error) error {
	if errors.Is(err, ErrBudgetExceeded) || errors.Is(err, ErrSpendLimit) {
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
func (t *transport) lookup(ctx context.Context, k Key) (*storedAnswer, bool, error) {
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

func (t *transport) hit(req *http.Request, k Key, a *storedAnswer, st *stepCounters) *http.Response {
	st.hits.Add(1)
	st.save(a.Usage, t.c.opts.Prices.cost(a.Model, a.Usage))
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
