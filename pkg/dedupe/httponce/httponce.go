package httponce

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oncegate/oncegate/pkg/canon"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Headers of requests and responses.
const (
	// HeaderKey is the request header that names the work.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is set to "true" on a response replayed from the
	// ledger.
	HeaderReplayed = "Idempotent-Replayed"
)

// headerBodyOmitted marks a replayed response kept without its body:
// "omitted" if it was too large to keep, "no-store" if it was marked so.
const headerBodyOmitted = "Idempotent-Replayed-Body"

// Options configures [Middleware]. The zero value means the defaults,
// except that Client (or SharedKeys) must be set: see [ErrNoClient].
type Options struct {
	// Client names the authenticated client a request comes from (the
	// principal your authentication middleware verified, such as an
	// account or API key id), so that one client's key never names
	// another's work: keys are scoped by it. A gated request with an
	// Idempotency-Key whose Client is "" is answered 403 (see "Client
	// unknown") and not run, unless SharedKeys is set. It must not change
	// between a request and its retries (a token that rotates does; the
	// account it belongs to does not). There is no default: Middleware
	// refuses a nil Client unless SharedKeys is set.
	Client func(r *http.Request) string
	// SharedKeys puts the keys of requests whose client is unknown
	// (Client nil, or returning "") in one space that all such clients
	// share: two clients that send the same key name the same work, and
	// the second gets the first's response. Set it only where every
	// client sends keys nobody else can guess or learn (random UUIDs), or
	// where all clients are one party. The default is false.
	SharedKeys bool
	// Required answers a gated request without an Idempotency-Key with 400
	// (see "Key missing"). The default lets it through to the handler.
	Required bool
	// Methods are the request methods gated. The default is POST and
	// PATCH; other requests go to the handler untouched.
	Methods []string
	// Route names the operation a request is for: a key is scoped to its
	// route, so that one client string sent to two operations names two
	// pieces of work. The default is the pattern a ServeMux matched
	// (Request.Pattern, such as "POST /charges/{id}/refunds"; the
	// middleware must then wrap the route's handler, inside the mux), or
	// else the method and the path ("POST /charges/ch_1/refunds").
	Route func(r *http.Request) string
	// Headers are the response headers kept with a response and replayed.
	// The default is Content-Type, Content-Encoding, Content-Language,
	// Location, ETag, Last-Modified and Link.
	Headers []string
	// MaxBodyBytes bounds a request body, read whole before the handler
	// runs; a larger one is answered 413. The default is 1 MiB.
	MaxBodyBytes int64
	// RetryAfter is the longest Retry-After given with a 409 (the claim's
	// remaining lease, if shorter, rounded up to whole seconds). The
	// default is 1s.
	RetryAfter time.Duration
	// Lease is how long a claim on a key holds between renewals while the
	// handler runs; a dead server's claims are taken over after it (at
	// once on a Badger ledger reopened). The default is 30s.
	Lease time.Duration
	// Owner names this server in the ledger's records. The default is
	// "httponce".
	Owner string
	// Logger receives a record per ledger failure. The default discards.
	Logger *slog.Logger
}

// errInvalidOptions is wrapped by the error of Middleware for options it
// cannot use.
var errInvalidOptions = errors.New("httponce: invalid options")

// ErrNoClient is the error of [Middleware] for Options without a Client
// and without SharedKeys: nothing would tell one client's keys from
// another's, and a client sending another's key would get its response.
var ErrNoClient = errors.New("httponce: Options.Client is nil: set it to the authenticated client of a request, or set Options.SharedKeys to share one key space knowingly")

var defaultHeaders = []string{"Content-Type", "Content-Encoding", "Content-Language", "Location", "ETag", "Last-Modified", "Link"}

// Middleware returns the middleware that runs a handler once per
// Idempotency-Key and client, through l (a *badgerledger.Ledger for one
// process, or a *jskv.Ledger shared by the replicas behind a load
// balancer). The caller owns l. It returns [ErrNoClient] if opts has
// neither a Client nor SharedKeys, and an error for a nil l or negative
// durations and sizes.
func Middleware(l dedupe.Ledger, opts Options) (func(http.Handler) http.Handler, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil ledger", errInvalidOptions)
	}
	if opts.Client == nil && !opts.SharedKeys {
		return nil, ErrNoClient
	}
	if opts.MaxBodyBytes < 0 || opts.RetryAfter < 0 || opts.Lease < 0 {
		return nil, fmt.Errorf("%w: negative MaxBodyBytes, RetryAfter or Lease", errInvalidOptions)
	}
	if len(opts.Methods) == 0 {
		opts.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if opts.Route == nil {
		opts.Route = func(r *http.Request) string {
			if r.Pattern != "" {
				return r.Pattern
			}
			return r.Method + " " + r.URL.Path
		}
	}
	if opts.Headers == nil {
		opts.Headers = defaultHeaders
	}
	headers := make([]string, len(opts.Headers))
	for i, h := range opts.Headers {
		headers[i] = http.CanonicalHeaderKey(h)
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.RetryAfter == 0 {
		opts.RetryAfter = time.Second
	}
	if opts.Owner == "" {
		opts.Owner = "httponce"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	g := &gate{l: l, opts: opts, headers: headers}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g.serve(w, r, next)
		})
	}, nil
}

type gate struct {
	l       dedupe.Ledger
	opts    Options
	headers []string // canonical names of the headers kept
}

// errNotKept releases the claim of work whose response is not kept.
var errNotKept = errors.New("httponce: response not kept")

func (g *gate) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !slices.Contains(g.opts.Methods, r.Method) {
		next.ServeHTTP(w, r)
		return
	}
	values := r.Header.Values(HeaderKey)
	if len(values) == 0 {
		if g.opts.Required {
			problem(w, http.StatusBadRequest, "Key_missing", "Idempotency-Key missing",
				"This operation requires an Idempotency-Key header: a new unique value (a UUID) for each request, the same one on its retries.")
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	s, err := parseKey(values)
	if err != nil {
		problem(w, http.StatusBadRequest, "Key_invalid", "Idempotency-Key invalid", err.Error())
		return
	}
	var client string
	if g.opts.Client != nil {
		client = g.opts.Client(r)
	}
	if client == "" && !g.opts.SharedKeys {
		problem(w, http.StatusForbidden, "Client_unknown", "Client unknown",
			"The server cannot tell which client sent this request, so it cannot keep its Idempotency-Key apart from other clients' keys. Authenticate, then retry with the same key.")
		return
	}
	route := g.opts.Route(r)
	key, err := dedupe.ClientKey(s, route, client)
	if err != nil {
		problem(w, http.StatusBadRequest, "Key_invalid", "Idempotency-Key invalid", err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.opts.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			problem(w, http.StatusRequestEntityTooLarge, "Body_too_large", "Request body too large",
				fmt.Sprintf("The body is larger than %d bytes.", g.opts.MaxBodyBytes))
			return
		}
		problem(w, http.StatusBadRequest, "Key_invalid", "Request body unreadable", "The request body could not be read.")
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	in := dedupe.Intent{Key: key, Fingerprint: fingerprint(r, route, body)}

	var rec *recorder
	res, ran, err := g.l.Do(context.WithoutCancel(r.Context()), in, func(ctx context.Context) (dedupe.Result, error) {
		rec = newRecorder()
		r := r.WithContext(ctx)
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(rec, r)
		switch answerOf(rec.status) {
		case undone:
			return dedupe.Result{}, errNotKept
		case maybeDone:
			return dedupe.Result{}, dedupe.MaybeDone(errNotKept)
		}
		return dedupe.Result{Response: g.encode(rec)}, nil
	}, dedupe.DoOptions{Owner: g.opts.Owner, Lease: g.opts.Lease, NoWait: true, RejectMismatch: true})
	if ran {
		if err != nil && !errors.Is(err, errNotKept) {
			g.opts.Logger.Warn("httponce: the handler ran and its response was not recorded; a retry runs it again, taken over", "key", key.String(), "err", err)
		}
		rec.send(w)
		return
	}
	var held *dedupe.HeldError
	switch {
	case err == nil:
		replay(w, res.Response)
	case errors.Is(err, dedupe.ErrMismatch):
		problem(w, http.StatusUnprocessableEntity, "Key_reused", "Idempotency-Key reused",
			"This Idempotency-Key was used before with another request. Use a new key for a new request.")
	case errors.As(err, &held):
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(min(held.RetryAfter, g.opts.RetryAfter))))
		problem(w, http.StatusConflict, "Request_in_flight", "Request with this Idempotency-Key in flight",
			"Another request with this Idempotency-Key is being handled. Retry later to get its response.")
	default:
		g.opts.Logger.Warn("httponce: ledger unavailable", "key", key.String(), "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(g.opts.RetryAfter)))
		problem(w, http.StatusServiceUnavailable, "Ledger_unavailable", "Idempotency ledger unavailable",
			"The request was not handled. Retry later with the same Idempotency-Key.")
	}
}

// answer is what a handler's response status says of the work.
type answer uint8

const (
	// final: the work's answer (2xx, 3xx, and 4xx on the request's
	// merits), kept and replayed.
	final answer = iota
	// undone: the request was not taken up at that moment (its form,
	// credentials, permissions or target; the server's load), and nothing
	// was done. Not kept; the retry runs as new work.
	undone
	// maybeDone: the handler failed mid-work (a 5xx other than 503).
	// Not kept; the retry runs with dedupe.TakenOver.
	maybeDone
)

// answerOf says what a response with status says of the work.
func answerOf(status int) answer {
	switch status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
		http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return undone
	}
	if status >= 500 {
		return maybeDone
	}
	return final
}

func retrySeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// fingerprintDomain keeps these fingerprints apart from any other hash.
// v2 added the request target.
const fingerprintDomain = "oncegate/http-request-fingerprint/v2"

// fingerprint is the request's identity: the method, route, request target
// (path and query, as sent) and body, canonical if it is JSON.
func fingerprint(r *http.Request, route string, body []byte) dedupe.Fingerprint {
	media, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	kind := "raw"
	if media == "application/json" || strings.HasSuffix(media, "+json") {
		if c, err := canon.Append(nil, body); err == nil {
			kind, body = "json", c
		}
	}
	h := sha256.New()
	target := r.RequestURI // as the client sent it, whatever a handler before this one rewrote
	if target == "" {
		target = r.URL.RequestURI() // a request built in process
	}
	for _, p := range []string{fingerprintDomain, r.Method, route, target, kind, media} {
		h.Write(binary.AppendUvarint(nil, uint64(len(p))))
		h.Write([]byte(p))
	}
	h.Write(body)
	var f dedupe.Fingerprint
	copy(f[:], h.Sum(nil))
	return f
}
