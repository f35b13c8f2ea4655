package standin

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// Label starts the content of every answer.
const Label = "[stand-in model]"

// Fingerprint is the system_fingerprint of every answer and the owner of
// every listed model.
const Fingerprint = "oncegate-standin"

// DefaultModel is the model listed by GET /v1/models when
// [Options.Models] is empty.
const DefaultModel = "oncegate-standin"

// Options configures a [Server]. The zero value means the defaults: no
// latency, no faults, the real clock.
type Options struct {
	// Latency is added to every valid chat completion request. The wait
	// ends early, and nothing is answered, if the request context is done.
	// The default is 0.
	Latency time.Duration

	// TokenInterval is the wait between the events of a streamed answer,
	// after the first, as a model streams its tokens as it makes them. The
	// wait ends early, and the stream is cut, if the request context is
	// done. The default is 0: the events are written at once.
	TokenInterval time.Duration

	// ErrorRate is the fraction of valid chat completion requests answered
	// 500 with a server_error body. The default is 0.
	ErrorRate float64

	// TimeoutRate is the fraction of valid chat completion requests that
	// hang until the client gives up (the request context is done) or the
	// Server is closed. The default is 0.
	TimeoutRate float64

	// RateLimitRate is the fraction of valid chat completion requests
	// answered 429 with a Retry-After header and a rate_limit_exceeded
	// body. The default is 0.
	RateLimitRate float64

	// RetryAfter is the delay advertised in the Retry-After header of a
	// 429, rounded up to whole seconds. The default is 1s.
	RetryAfter time.Duration

	// Seed seeds the generator that picks the faults. The default is 0,
	// which is a valid seed like any other.
	Seed uint64

	// Clock gives the created field of answers. The default is time.Now.
	Clock func() time.Time

	// MaxBodyBytes limits a request body; a larger one is answered 413.
	// The default is 1 MiB.
	MaxBodyBytes int64

	// Models are the model ids listed by GET /v1/models. Chat completions
	// accept any model name and echo it. The default is [DefaultModel].
	Models []string

	// RequestsPerMinute, if positive, is a real request limit, as a
	// provider's: a valid chat completion request past it in any sliding
	// window of LimitWindow is answered 429 at once, with a Retry-After of
	// the whole seconds until the oldest request in the window leaves it,
	// and draws no fault. Requests answered 429 do not count against the
	// limit. The default is 0: no limit.
	RequestsPerMinute int

	// OffSchemaRate is the fraction of requests for structured output
	// (response_format json_schema) answered with JSON that breaks the
	// schema (a required property left out), as a model may; which ones is
	// a function of the request, so a request asked again with other
	// messages may get a valid answer. The default is 0.
	OffSchemaRate float64

	// LimitWindow is the sliding window RequestsPerMinute is counted over;
	// the requests allowed in one window are RequestsPerMinute scaled to
	// it (RequestsPerMinute × LimitWindow / 1m), at least 1. The default is
	// one minute.
	LimitWindow time.Duration
}

// Validate reports whether the options are usable: rates in [0, 1] whose
// sum is at most 1, and no negative durations or sizes.
func (o Options) Validate() error {
	var errs []error
	for _, r := range []struct {
		name string
		v    float64
	}{{"ErrorRate", o.ErrorRate}, {"TimeoutRate", o.TimeoutRate}, {"RateLimitRate", o.RateLimitRate}, {"OffSchemaRate", o.OffSchemaRate}} {
		if !(r.v >= 0 && r.v <= 1) { // also rejects NaN
			errs = append(errs, fmt.Errorf("standin: %s %v is not in [0, 1]", r.name, r.v))
		}
	}
	if sum := o.ErrorRate + o.TimeoutRate + o.RateLimitRate; sum > 1 {
		errs = append(errs, fmt.Errorf("standin: fault rates sum to %v, more than 1", sum))
	}
	if o.Latency < 0 {
		errs = append(errs, fmt.Errorf("standin: negative Latency %v", o.Latency))
	}
	if o.TokenInterval < 0 {
		errs = append(errs, fmt.Errorf("standin: negative TokenInterval %v", o.TokenInterval))
	}
	if o.RetryAfter < 0 {
		errs = append(errs, fmt.Errorf("standin: negative RetryAfter %v", o.RetryAfter))
	}
	if o.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("standin: negative MaxBodyBytes %d", o.MaxBodyBytes))
	}
	if o.RequestsPerMinute < 0 {
		errs = append(errs, fmt.Errorf("standin: negative RequestsPerMinute %d", o.RequestsPerMinute))
	}
	if o.LimitWindow < 0 {
		errs = append(errs, fmt.Errorf("standin: negative LimitWindow %v", o.LimitWindow))
	}
	return errors.Join(errs...)
}

// Stats counts what a [Server] has answered. Each request is counted once
// in Requests and once in exactly one outcome.
type Stats struct {
	Requests int64 // every HTTP request

	Completions int64 // chat completions answered 200, streamed or not
	Streams     int64 // of Completions, those streamed
	Models      int64 // model listings answered 200

	Invalid      int64 // 400, 404, 405 and 413 answers
	ServerErrors int64 // injected 500 answers
	RateLimited  int64 // injected 429 answers
	OverLimit    int64 // 429 answers past RequestsPerMinute
	Timeouts     int64 // injected hangs
	Canceled     int64 // requests whose context ended during Latency

	PromptTokens     int64 // prompt tokens of the Completions
	CompletionTokens int64 // completion tokens of the Completions
}

// Server is the stand-in model, an [http.Handler]. Create it with [New].
type Server struct {
	opts Options

	mu  sync.Mutex // guards rng
	rng *rand.Rand

	limit *window // nil without RequestsPerMinute

	closeOnce sync.Once
	closed    chan struct{}

	requests, completions, streams, models                 atomic.Int64
	invalid, serverErrors, rateLimited, timeouts, canceled atomic.Int64
	overLimit                                              atomic.Int64
	promptTokens, completionTokens                         atomic.Int64
}

// New returns a Server configured by opts, or the error of
// [Options.Validate] if opts are invalid (they may come from a config file).
func New(opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.RetryAfter == 0 {
		opts.RetryAfter = time.Second
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if len(opts.Models) == 0 {
		opts.Models = []string{DefaultModel}
	} else {
		opts.Models = append([]string(nil), opts.Models...)
	}
	var limit *window
	if opts.RequestsPerMinute > 0 {
		if opts.LimitWindow == 0 {
			opts.LimitWindow = time.Minute
		}
		n := max(1, int(int64(opts.RequestsPerMinute)*int64(opts.LimitWindow)/int64(time.Minute)))
		limit = &window{span: opts.LimitWindow, at: make([]time.Time, n)}
	}
	return &Server{
		opts:   opts,
		limit:  limit,
		rng:    rand.New(rand.NewPCG(opts.Seed, 0x6f6e636567617465)), // "oncegate"
		closed: make(chan struct{}),
	}, nil
}

// Stats returns a snapshot of the counters. Counters are read one by one,
// so a snapshot taken while requests are in flight may be off by those.
func (s *Server) Stats() Stats {
	return Stats{
		Requests:         s.requests.Load(),
		Completions:      s.completions.Load(),
		Streams:          s.streams.Load(),
		Models:           s.models.Load(),
		Invalid:          s.invalid.Load(),
		ServerErrors:     s.serverErrors.Load(),
		RateLimited:      s.rateLimited.Load(),
		OverLimit:        s.overLimit.Load(),
		Timeouts:         s.timeouts.Load(),
		Canceled:         s.canceled.Load(),
		PromptTokens:     s.promptTokens.Load(),
		CompletionTokens: s.completionTokens.Load(),
	}
}

// Close releases every request hanging because of [Options.TimeoutRate]
// (they are answered 503), and makes later hangs end at once. It does not
// stop the Server from answering other requests. Close is idempotent and
// always returns nil.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

// Start serves s on a listener at addr, such as "127.0.0.1:0", and returns
// the base URL to give an OpenAI client ("http://127.0.0.1:PORT/v1"). stop
// calls [Server.Close], then closes the listener and every connection, and
// waits for the serving goroutine to exit.
func (s *Server) Start(addr string) (baseURL string, stop func() error, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("standin: listen %s: %w", addr, err)
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	// HTTP/1.1, and HTTP/2 with prior knowledge (h2c): the OpenAI API is
	// reached over TLS, where clients negotiate HTTP/2 and multiplex their
	// calls on a few connections; a client of the stand-in can do the same
	// on plain TCP (see [Transport]).
	hs.Protocols = new(http.Protocols)
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	var once sync.Once
	var stopErr error
	stop = func() error {
		once.Do(func() {
			s.Close()
			stopErr = hs.Close()
			if err := <-done; !errors.Is(err, http.ErrServerClosed) && stopErr == nil {
				stopErr = err
			}
		})
		return stopErr
	}
	return "http://" + ln.Addr().String() + "/v1", stop, nil
}

// Transport returns an HTTP transport for a client of a stand-in: HTTP/2
// with prior knowledge over plain TCP, so that calls in flight share a few
// connections, as they do with the OpenAI API over TLS, rather than holding
// one connection each.
func Transport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	return tr
}

// Client returns a go-openai client of the stand-in at baseURL (see
// [Server.Start]), speaking to it over [Transport], and a function that
// closes the client's idle connections.
func Client(baseURL string) (*openai.Client, func()) {
	tr := Transport()
	oc := openai.DefaultConfig("standin")
	oc.BaseURL = baseURL
	oc.HTTPClient = &http.Client{Transport: tr}
	return openai.NewClientWithConfig(oc), tr.CloseIdleConnections
}

// ServeHTTP answers one OpenAI API request; see the package documentation.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	w.Header().Set("X-Oncegate-Standin", "1")
	switch r.URL.Path {
	case "/v1/chat/completions":
		if r.Method != http.MethodPost {
			s.reject(w, http.StatusMethodNotAllowed, "", "standin: %s %s: method not allowed, use POST", r.Method, r.URL.Path)
			return
		}
		s.chat(w, r)
	case "/v1/models":
		if r.Method != http.MethodGet {
			s.reject(w, http.StatusMethodNotAllowed, "", "standin: %s %s: method not allowed, use GET", r.Method, r.URL.Path)
			return
		}
		s.listModels(w)
	default:
		s.reject(w, http.StatusNotFound, "", "standin: unknown path %s", r.URL.Path)
	}
}

// fault is what the generator picked for one request.
type fault int

const (
	faultNone fault = iota
	faultError
	faultTimeout
	faultRateLimit
)

func (s *Server) drawFault() fault {
	o := &s.opts
	if o.ErrorRate == 0 && o.TimeoutRate == 0 && o.RateLimitRate == 0 {
		return faultNone
	}
	s.mu.Lock()
	x := s.rng.Float64()
	s.mu.Unlock()
	switch {
	case x < o.ErrorRate:
		return faultError
	case x < o.ErrorRate+o.TimeoutRate:
		return faultTimeout
	case x < o.ErrorRate+o.TimeoutRate+o.RateLimitRate:
		return faultRateLimit
	}
	return faultNone
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
	var req chatRequest
	dec := json.NewDecoder(body)
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.reject(w, http.StatusRequestEntityTooLarge, "", "standin: request body over %d bytes", tooBig.Limit)
			return
		}
		s.reject(w, http.StatusBadRequest, "", "standin: malformed JSON body: %v", err)
		return
	}
	if _, err := dec.Token(); err == nil {
		s.reject(w, http.StatusBadRequest, "", "standin: malformed JSON body: data after the request object")
		return
	} else if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
		s.reject(w, http.StatusRequestEntityTooLarge, "", "standin: request body over %d bytes", tooBig.Limit)
		return
	}
	p, param, err := req.prompt()
	if err != nil {
		s.reject(w, http.StatusBadRequest, param, "%v", err)
		return
	}

	if s.limit != nil {
		if wait, ok := s.limit.take(time.Now()); !ok {
			s.overLimit.Add(1)
			secs := int64((wait + time.Second - 1) / time.Second)
			w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
			code := "rate_limit_exceeded"
			writeError(w, http.StatusTooManyRequests, apiError{
				Message: fmt.Sprintf("standin: rate limit of %d requests per minute reached (Options.RequestsPerMinute), retry after %ds", s.opts.RequestsPerMinute, secs),
				Type:    "requests",
				Code:    &code,
			})
			return
		}
	}
	f := s.drawFault()
	if d := s.opts.Latency; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			s.canceled.Add(1)
			return
		}
	}
	switch f {
	case faultError:
		s.serverErrors.Add(1)
		writeError(w, http.StatusInternalServerError, apiError{
			Message: "standin: injected server error (Options.ErrorRate)",
			Type:    "server_error",
		})
		return
	case faultTimeout:
		s.timeouts.Add(1)
		select {
		case <-r.Context().Done():
		case <-s.closed:
			writeError(w, http.StatusServiceUnavailable, apiError{
				Message: "standin: server closed during an injected timeout",
				Type:    "server_error",
			})
		}
		return
	case faultRateLimit:
		s.rateLimited.Add(1)
		secs := int64((s.opts.RetryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		code := "rate_limit_exceeded"
		writeError(w, http.StatusTooManyRequests, apiError{
			Message: fmt.Sprintf("standin: injected rate limit (Options.RateLimitRate), retry after %ds", secs),
			Type:    "requests",
			Code:    &code,
		})
		return
	}

	a := answer(p, req.maxTokens(), s.opts.Clock().Unix(), s.opts.OffSchemaRate)
	s.completions.Add(1)
	s.promptTokens.Add(int64(a.promptTokens))
	s.completionTokens.Add(int64(a.completionTokens))
	if req.Stream {
		s.streams.Add(1)
		writeStream(r.Context(), w, a, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, s.opts.TokenInterval)
		return
	}
	writeJSON(w, http.StatusOK, a.completion())
}

func (s *Server) listModels(w http.ResponseWriter) {
	s.models.Add(1)
	l := modelList{Object: "list", Data: make([]model, 0, len(s.opts.Models))}
	for _, id := range s.opts.Models {
		l.Data = append(l.Data, model{ID: id, Object: "model", OwnedBy: Fingerprint})
	}
	writeJSON(w, http.StatusOK, l)
}

// reject answers an invalid request with an invalid_request_error.
func (s *Server) reject(w http.ResponseWriter, status int, param, format string, args ...any) {
	s.invalid.Add(1)
	e := apiError{Message: fmt.Sprintf(format, args...), Type: "invalid_request_error"}
	if param != "" {
		e.Param = &param
	}
	writeError(w, status, e)
}

// window is a sliding-window log of the requests let through: at most
// len(at) in any span.
type window struct {
	span time.Duration

	mu    sync.Mutex
	at    []time.Time // a ring of the times of the requests in the window
	head  int         // the oldest
	count int
}

// take lets a request through at now if the window has room, or returns how
// long until it has.
func (w *window) take(now time.Time) (wait time.Duration, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.count > 0 && !w.at[w.head].After(now.Add(-w.span)) {
		w.head = (w.head + 1) % len(w.at)
		w.count--
	}
	if w.count == len(w.at) {
		return w.at[w.head].Add(w.span).Sub(now), false
	}
	w.at[(w.head+w.count)%len(w.at)] = now
	w.count++
	return 0, true
}

// Compile-time check that a *Server is a handler.
var _ http.Handler = (*Server)(nil)
