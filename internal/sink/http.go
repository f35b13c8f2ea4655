package sink

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/tmpl"
	"github.com/oncegate/oncegate/internal/version"
)

// ReplayHeader is the response header by which an HTTP receiver says that
// it replayed the stored response of an earlier request with the same
// Idempotency-Key ("Idempotent-Replayed: true", as Stripe sends it).
const ReplayHeader = "Idempotent-Replayed"

// HTTPOptions configures an [HTTP] sink. The zero value is not valid: URL
// is required.
type HTTPOptions struct {
	// URL is where effects are sent, http or https. Errors name its scheme,
	// host and path, without the query and with each path segment that
	// looks like a token (16 or more characters mixing letters with digits
	// or punctuation, as a webhook URL's secret does) redacted. Required.
	URL string

	// Method is POST, PUT or PATCH. The default is POST.
	Method string

	// Header holds static headers sent with every request, such as an
	// Authorization from the configuration. They replace an effect's
	// headers of the same name. Their values never appear in errors.
	Header map[string]string

	// Client sends the requests. The default is a client of its own that
	// does not follow redirects (a redirect is a permanent error: configure
	// the final URL); its idle connections are closed by Close.
	Client *http.Client

	// Timeout bounds one attempt, reading the response included. The
	// default is 10s.
	Timeout time.Duration

	// Attempts is how many times one Deliver tries before it gives up with
	// a retryable error. The default is 5.
	Attempts int

	// Backoff is the wait before the first retry; each further wait
	// doubles, up to MaxBackoff, and is drawn at random from its upper
	// half. The default is 200ms.
	Backoff time.Duration

	// MaxBackoff caps the wait between attempts, that of a Retry-After
	// header included. The default is 10s.
	MaxBackoff time.Duration

	// MaxResponseBytes limits the response body kept in Result.Body; the
	// rest is dropped. The default is MaxResultBytes (16 KiB).
	MaxResponseBytes int

	// OneShot is for receivers that do not honour Idempotency-Key: one
	// attempt per Deliver (Attempts is ignored), and a request that Go's
	// transport will not re-send by itself on a reused connection that
	// broke (it would, for a request carrying Idempotency-Key). The
	// default is false.
	OneShot bool

	// KeyReusedStatus is the status with which the receiver says that the
	// Idempotency-Key was used before for another request body: 422, as the
	// IETF Idempotency-Key draft specifies. Such an answer means the
	// intent's effect exists; Deliver's error wraps [ErrKeyConflict]. A
	// negative value turns this off, for a receiver that answers 422 for
	// other reasons (the error is then permanent like any other 4xx). The
	// default is 422.
	KeyReusedStatus int

	// UserAgent is the User-Agent of every request. The default is
	// "oncegate/<version>".
	UserAgent string

	// BodyFields are members set in the top-level JSON object of every
	// body when it is sent, replacing members of the same name: secrets
	// the body needs, such as PagerDuty's routing_key, which must not be
	// rendered into a body that the outbox, the ledger or a reply keeps.
	// A body that is not a JSON object is a permanent error. Their values
	// never appear in errors. The default is none.
	BodyFields map[string]string

	// SecretURL says the URL itself is a secret (a Slack incoming webhook
	// URL): errors name only its scheme and host. The default is false.
	SecretURL bool

	// RateLimit holds the requests within the receiver's quota: each
	// Deliver waits for room instead of being refused, and a 429 pauses
	// every request until its Retry-After and is tried again without
	// spending an attempt (up to maxThrottled times). The default is no
	// limit: a 429 is an attempt like a 5xx.
	RateLimit RateLimit

	// Coalesce returns the key under which requests waiting for room in
	// the RateLimit collapse: a Deliver whose body has the key of one
	// already waiting sends nothing, and returns that one's outcome (its
	// Result with Duplicate set). It is for what the receiver would
	// collapse anyway, such as PagerDuty's repeated triggers of one
	// dedup_key ([CoalescePagerDuty]). "" never coalesces. The default is
	// nil: none.
	Coalesce func(body []byte) string

	// Digest gathers the effects of one group (named by their
	// DigestHeader) into one request. The default is nil: none.
	Digest *Digest
}

// maxThrottled bounds the 429s one Deliver of a rate-limited sink waits
// out before it gives up with a retryable error.
const maxThrottled = 20

// CoalescePagerDuty is the pagerduty preset's [HTTPOptions.Coalesce]: a
// trigger event's dedup_key (PagerDuty adds a repeated trigger to the
// alert the first opened), "" for any other event.
func CoalescePagerDuty(body []byte) string {
	var ev struct {
		Action string `json:"event_action"`
		Dedup  string `json:"dedup_key"`
	}
	if json.Unmarshal(body, &ev) != nil || ev.Action != "trigger" {
		return ""
	}
	return ev.Dedup
}

// HTTP sends each effect as an HTTP request with the intent key as
// Idempotency-Key, retrying within one Deliver while the answer says that
// a retry may succeed.
//
// A retry after a lost response is safe only if the receiver honours
// Idempotency-Key; an effect on a receiver that does not is one-shot and
// belongs behind the outbox.
type HTTP struct {
	url        string
	target     string // scheme://host/path, tokens in the path redacted, for errors
	method     string
	header     http.Header
	client     *http.Client
	ownClient  bool
	timeout    time.Duration
	attempts   int
	oneShot    bool
	keyReused  int
	backoff    time.Duration
	maxBackoff time.Duration
	maxBody    int
	userAgent  string
	bodyFields map[string]string
	secrets    []string // values errors must not show
	limit      *limiter // nil without a RateLimit
	coalesce   func([]byte) string
	digest     *digests // nil without a Digest

	// wait blocks for d or until ctx is done; tests replace it.
	wait func(ctx context.Context, d time.Duration) error
}

// NewHTTP returns an HTTP sink. It fails with an error matching
// [ErrPermanent] if the options are invalid.
func NewHTTP(opts HTTPOptions) (*HTTP, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// Not even the host: an unparsable URL could be anything.
		return nil, optionsError("http", "URL must be an absolute http or https URL")
	}
	s := &HTTP{
		url:        opts.URL,
		target:     u.Scheme + "://" + u.Host + redactPath(u.EscapedPath()),
		userAgent:  cmp.Or(opts.UserAgent, DefaultUserAgent()),
		secrets:    secretsOf(opts),
		bodyFields: opts.BodyFields,
		method:     cmp.Or(opts.Method, http.MethodPost),
		header:     make(http.Header, len(opts.Header)),
		client:     opts.Client,
		timeout:    cmp.Or(opts.Timeout, 10*time.Second),
		attempts:   cmp.Or(opts.Attempts, 5),
		keyReused:  cmp.Or(opts.KeyReusedStatus, http.StatusUnprocessableEntity),
		oneShot:    opts.OneShot,
		backoff:    cmp.Or(opts.Backoff, 200*time.Millisecond),
		maxBackoff: cmp.Or(opts.MaxBackoff, 10*time.Second),
		maxBody:    cmp.Or(opts.MaxResponseBytes, MaxResultBytes),
		wait:       wait,
		limit:      newLimiter(opts.RateLimit),
		coalesce:   opts.Coalesce,
	}
	if s.oneShot {
		s.attempts = 1
	}
	if opts.SecretURL {
		s.target = u.Scheme + "://" + u.Host + "/REDACTED"
	}
	switch {
	case u.User != nil:
		return nil, optionsError("http", "URL %s must not hold credentials: use an Authorization header", s.target)
	case s.method != http.MethodPost && s.method != http.MethodPut && s.method != http.MethodPatch:
		return nil, optionsError("http", "Method %q is not POST, PUT or PATCH", s.method)
	case s.timeout < 0, s.backoff < 0, s.maxBackoff < 0, s.attempts < 0, s.maxBody < 0:
		return nil, optionsError("http", "negative Timeout, Attempts, Backoff, MaxBackoff or MaxResponseBytes")
	case s.backoff > s.maxBackoff:
		return nil, optionsError("http", "Backoff %v is over MaxBackoff %v", s.backoff, s.maxBackoff)
	case opts.RateLimit.Requests < 0, opts.RateLimit.Per < 0, opts.RateLimit.MaxWait < 0:
		return nil, optionsError("http", "negative RateLimit")
	case opts.Digest != nil && (opts.Digest.Window <= 0 || opts.Digest.Merge == nil):
		return nil, optionsError("http", "a Digest needs a positive Window and Merge")
	}
	if opts.Digest != nil {
		s.digest = &digests{Digest: *opts.Digest, open: map[string]*digestBatch{}}
	}
	for k, v := range opts.Header {
		if err := checkHeader(k, v); err != nil {
			return nil, optionsError("http", "%v", err)
		}
		s.header.Set(k, v)
	}
	if s.client == nil {
		s.ownClient = true
		s.client = &http.Client{
			Transport: http.DefaultTransport.(*http.Transport).Clone(),
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	}
	return s, nil
}

// Deliver sends e.Body with the headers Idempotency-Key (the key),
// Content-Type (application/json unless a header sets it),
// Oncegate-Pipeline and Oncegate-Step, and returns on the first 2xx answer
// with its status and body; Result.Duplicate is set if the answer carries
// "Idempotent-Replayed: true".
//
// An answer of 408, 409, 425, 429 or 5xx, or no answer at all, is retried
// after a jittered exponential backoff, or after the Retry-After the
// answer asks for, until Attempts are spent or ctx is done; the error is
// then retryable. Deliver gives up early, with the same error, when ctx's
// deadline would pass during the wait. Any other answer (3xx, other 4xx)
// is a permanent error at once. With an error, Result holds the status and
// body of the last answer, if there was one.
func (s *HTTP) Deliver(ctx context.Context, e Effect) (Result, error) {
	if err := checkKey("http", e.Key); err != nil {
		return Result{}, err
	}
	h := make(http.Header, len(e.Header)+len(s.header)+4)
	group := ""
	for k, v := range e.Header {
		if strings.EqualFold(k, DigestHeader) {
			group = v
			continue
		}
		if err := checkHeader(k, v); err != nil {
			return Result{}, &Error{Sink: "http", Key: e.Key, Err: err}
		}
		h.Set(k, v)
	}
	for k, v := range s.header {
		h[k] = v
	}
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	h.Set("Idempotency-Key", e.Key)
	h.Set(PipelineHeader, e.Pipeline)
	h.Set(StepHeader, e.Step)
	h.Set("User-Agent", s.userAgent)
	body := e.Body
	if len(s.bodyFields) > 0 {
		var err error
		if body, err = setFields(body, s.bodyFields); err != nil {
			return Result{}, &Error{Sink: "http", Key: e.Key, Err: err}
		}
	}

	if s.digest != nil && group != "" {
		return s.deliverDigest(ctx, e, group, func(ctx context.Context, body []byte) (Result, error) {
			return s.deliverBody(ctx, e.Key, h, body, nil)
		})
	}
	return s.deliverBody(ctx, e.Key, h, body, e.Fence)
}

// deliverBody sends body, through the rate limit if the sink has one.
func (s *HTTP) deliverBody(ctx context.Context, key string, h http.Header, body []byte, fence func() error) (Result, error) {
	if s.limit == nil {
		return s.send(ctx, key, h, body, fence, nil)
	}
	q := &queued{done: make(chan struct{})}
	ckey := ""
	if s.coalesce != nil {
		ckey = s.coalesce(body)
	}
	if w := s.limit.join(ckey, q); w != nil {
		// Another request with the key waits for room: the receiver would
		// collapse this one into it.
		select {
		case <-w.done:
		case <-ctx.Done():
			return Result{}, &Error{Sink: "http", Key: key, Retryable: true, Err: fmt.Errorf("waiting for a request it coalesced with: %w", ctx.Err())}
		}
		if w.err != nil {
			return w.res, w.err
		}
		res := w.res
		res.Duplicate = true
		return res, nil
	}
	defer close(q.done)
	q.res, q.err = s.send(ctx, key, h, body, fence, func() { s.limit.leave(ckey, q) })
	return q.res, q.err
}

// send makes the attempts of one Deliver; with a rate limit, each waits
// for room first, and going calls left once the first is on its way.
// fence, if set, is called right before the first attempt goes.
func (s *HTTP) send(ctx context.Context, key string, h http.Header, body []byte, fence func() error, going func()) (Result, error) {
	var res Result
	started := time.Now()
	throttled := 0
	for attempt := 1; ; attempt++ {
		if s.limit != nil {
			err := s.limit.reserve(ctx, started)
			if going != nil {
				going()
				going = nil
			}
			if err != nil {
				if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
					err = fmt.Errorf("waiting for room in the receiver's quota: %w", err)
				}
				return res, &Error{Sink: "http", Key: key, Status: res.Status, Retryable: true, Err: err}
			}
		}
		if fence != nil && attempt == 1 {
			if err := fence(); err != nil {
				return Result{}, &Error{Sink: "http", Key: key, Retryable: true, Err: fmt.Errorf("%w: %w", ErrFenced, err)}
			}
		}
		res = Result{Attempts: attempt}
		retryAfter, err := s.try(ctx, h, body, &res)
		if err == nil {
			return res, nil
		}
		if s.limit != nil && res.Status == http.StatusTooManyRequests && throttled < maxThrottled {
			// Past the quota after all: wait out the Retry-After, every
			// request with this one, and try again; not an attempt.
			throttled++
			s.limit.throttled(retryAfter)
			attempt--
			continue
		}
		serr := &Error{
			Sink:      "http",
			Key:       key,
			Status:    res.Status,
			Retryable: res.Status == 0 || retryableStatus(res.Status),
			Err:       fmt.Errorf("attempt %d of %d: %w", attempt, s.attempts, err),
		}
		if !serr.Retryable || attempt >= s.attempts {
			return res, serr
		}
		if err := ctx.Err(); err != nil {
			// Cancelled before the wait: the same answer as during it.
			serr.Err = fmt.Errorf("%w; not retried: %w", serr.Err, err)
			return res, serr
		}
		d := s.backoffFor(attempt, retryAfter)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d {
			return res, serr
		}
		if err := s.wait(ctx, d); err != nil {
			serr.Err = fmt.Errorf("%w; waiting to retry: %w", serr.Err, err)
			return res, serr
		}
	}
}

// try makes one attempt, filling in res.Status and res.Body when an answer
// comes. It returns the answer's Retry-After, or 0, and an error unless
// the answer is 2xx.
func (s *HTTP) try(ctx context.Context, h http.Header, body []byte, res *Result) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, s.method, s.url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("%s %q: building the request failed", s.method, s.target)
	}
	req.Header = h
	if s.oneShot {
		req.GetBody = nil // not replayable: net/http sends it at most once
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			// The URL's query, and tokens in its path, may hold a secret.
			err = &url.Error{Op: ue.Op, URL: s.target, Err: ue.Err}
		}
		return 0, err
	}
	defer func() {
		// Drain a little so that the connection can be reused.
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}()
	res.Status = resp.StatusCode
	res.Duplicate = strings.EqualFold(resp.Header.Get(ReplayHeader), "true")
	res.Body, err = io.ReadAll(io.LimitReader(resp.Body, int64(s.maxBody)))
	if err != nil && resp.StatusCode/100 == 2 {
		// The effect happened, but without the whole body the ledger
		// would store a wrong result; the retry gets a replay.
		res.Status = 0
		return 0, fmt.Errorf("%s %q: reading the response: %w", s.method, s.target, err)
	}
	if resp.StatusCode/100 == 2 {
		return 0, nil
	}
	if resp.StatusCode == s.keyReused {
		return 0, fmt.Errorf("%w: %s %q: %s%s", ErrKeyConflict, s.method, s.target, resp.Status, s.snippet(res.Body))
	}
	return parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
		fmt.Errorf("%s %q: %s%s", s.method, s.target, resp.Status, s.snippet(res.Body))
}

// snippetBytes is how much of a refusing answer's body an error quotes:
// often the whole clue (Slack's "invalid_payload", PagerDuty's "Event
// object is invalid" with the field, Jira's errors by field).
const snippetBytes = 300

// snippet is ": " and the start of a response body on one line, or "",
// with the sink's secrets (header values, body fields, a secret URL) that
// a receiver may echo replaced by REDACTED.
func (s *HTTP) snippet(b []byte) string {
	for _, sec := range s.secrets {
		b = bytes.ReplaceAll(b, []byte(sec), []byte("REDACTED"))
	}
	if t := tmpl.Snippet(b, snippetBytes); t != "" {
		return ": " + t
	}
	return ""
}

// secretsOf lists the values errors must not show, longest first, so that
// a value is replaced whole before a part of it is.
func secretsOf(opts HTTPOptions) []string {
	var out []string
	add := func(v string) {
		if len(v) >= 4 {
			out = append(out, v)
		}
	}
	for _, v := range opts.Header {
		add(v)
		if _, tok, ok := strings.Cut(v, " "); ok {
			add(strings.TrimSpace(tok)) // "Bearer <token>": the token alone too
		}
	}
	for _, v := range opts.BodyFields {
		add(v)
	}
	if opts.SecretURL {
		add(opts.URL)
		if u, err := url.Parse(opts.URL); err == nil {
			add(u.EscapedPath())
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// DefaultUserAgent is "oncegate/<version>", the User-Agent of HTTP effects.
func DefaultUserAgent() string { return "oncegate/" + version.Get().Version }

// setFields returns the JSON object body with the members fields set.
func setFields(body []byte, fields map[string]string) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		return nil, errors.New("the body is not a JSON object, and the sink sets members of it")
	}
	for k, v := range fields {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		obj[k] = b
	}
	return json.Marshal(obj)
}

// backoffFor returns the wait after the given failed attempt: the server's
// Retry-After if it gave one, or Backoff doubled attempt-1 times and drawn
// from its upper half; either way at most MaxBackoff.
func (s *HTTP) backoffFor(attempt int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, s.maxBackoff)
	}
	d := s.backoff
	for i := 1; i < attempt && d < s.maxBackoff; i++ {
		d *= 2
	}
	d = min(d, s.maxBackoff)
	if half := d / 2; half > 0 {
		d = half + rand.N(d-half+1)
	}
	return d
}

// Close closes the idle connections of the sink's own client; a client
// from the options is left alone.
func (s *HTTP) Close() error {
	if s.ownClient {
		s.client.CloseIdleConnections()
	}
	return nil
}

// parseRetryAfter returns the wait a Retry-After value asks for, in
// seconds or as an HTTP date, or 0 if there is none.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// wait blocks for d or until ctx is done, returning ctx's error then.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkHeader returns an error, naming the header but not its value, if
// the name is not an HTTP token or the value holds control characters.
func checkHeader(name, value string) error {
	if name == "" {
		return errors.New("empty header name")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return fmt.Errorf("header name %q is not a token", name)
		}
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("value of header %q holds a control character", name)
		}
	}
	return nil
}

// redactPath returns path with each segment that looks like a secret
// replaced by "REDACTED": a segment of 16 or more characters that mixes
// letters with digits or '-' and '_' (a webhook token such as a Slack or
// Discord URL carries). Words and numeric ids stay, so that an error
// still says which endpoint refused.
func redactPath(path string) string {
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		if len(seg) < 16 {
			continue
		}
		var letters, others bool
		for _, c := range seg {
			switch {
			case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
				letters = true
			default:
				others = true
			}
		}
		if letters && others {
			segs[i] = "REDACTED"
		}
	}
	return strings.Join(segs, "/")
}
