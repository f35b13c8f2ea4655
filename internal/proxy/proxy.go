// Package proxy is Oncegate's OpenAI-compatible proxy: an HTTP endpoint
// that agents and services in any language call as they would call their
// model provider, answered through the LLM cache.
//
// POST /v1/chat/completions, streamed or not, goes through the cache
// (package llmcache, on the process's store: JetStream KV buckets shared by
// every replica with llm.cache.store: kv), so that
//
//   - a retried call (the same request, from the same client) is answered
//     with the first answer's bytes, a stream replayed event for event, and
//     the provider is paid once, on whichever replica the retry lands;
//   - identical calls in flight at once, on one replica or several, make
//     one provider call (single flight across replicas);
//   - an Idempotency-Key or X-Oncegate-Intent header names the call's
//     intent (an agent's step): the answer is kept for that intent, its
//     retries get it, and its calls draw from one token budget
//     (proxy.budget_tokens);
//   - each client key spends at most proxy.max_budget dollars per
//     proxy.budget_duration: a call that could pass it is refused with 429
//     and a body that names the limit, and never sent. A call that sets no
//     max_tokens reserves proxy.completion_tokens, or the model's
//     llm.prices max_output_tokens, per choice (400 max_tokens_required
//     with neither), so that calls in flight together stop at the limit;
//     a model llm.prices does not price is refused 403 (model_not_priced);
//   - proxy.models, if set, lists the only models served (403
//     model_not_allowed);
//   - the provider's rate limits (llm.rate_limit) pace the calls, and its
//     429s are waited out.
//
// GET /v1/models and GET /v1/models/{id} go to the provider. Clients
// authenticate with keys of their own (Authorization: Bearer), from
// proxy.keys_file; the provider's key stays in the proxy. Errors are
// answered in the OpenAI API's error format.
//
// # Trust
//
// A client key is trusted with chat completions, never with the provider
// account. The proxy forwards three routes and no other: POST
// {base}/chat/completions, GET {base}/models and GET {base}/models/{id},
// each built from the parsed base URL, a fixed route and a model id that
// [ValidModelID] accepts; it never builds an upstream URL from the
// client's path, and never forwards the client's query or headers (but
// Accept). A path with a dot segment, an empty segment, an encoded '/',
// '?', '#' or '%', a '\', a ';' or a control character is answered 400
// ([ErrPath]), nothing sent. A request body the cache would read otherwise
// than a provider (a member twice, or "Model" beside "model") is 400. When
// the provider refuses the proxy's own key (401, 403), the client gets a
// 502 that says so, with none of the provider's text, and the proxy logs
// it at ERROR; the provider's other errors are passed on without its key
// or the account's organization and project ids.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/serve"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/ratelimit"
)

// Request headers that name a call's intent.
const (
	// HeaderIntent names the intent: a dedupe key's text form (32 hex
	// digits, such as a trigger's intent key) is taken as it is; any other
	// string is a client's own, derived into a key in the client's scope.
	HeaderIntent = "X-Oncegate-Intent"
	// HeaderIdempotencyKey names the intent when HeaderIntent is absent:
	// a client's string (a structured-field string or a bare one).
	HeaderIdempotencyKey = "Idempotency-Key"
)

// Options configures [New].
type Options struct {
	// Config is the proxy's configuration. Required.
	Config *config.Proxy
	// Keys are the clients' keys. Required.
	Keys *Keys
	// Cache answers the chat completions. Required.
	Cache *llmcache.Cache
	// Upstream carries requests to the provider, under the cache: the
	// rate limiter of llm.rate_limit over an HTTP transport. The default
	// is http.DefaultTransport.
	Upstream http.RoundTripper
	// BaseURL is the provider's base URL, such as
	// "https://api.openai.com/v1". Required.
	BaseURL string
	// APIKey is the provider's key, sent upstream as a bearer token.
	APIKey string
	// Prices are the models' prices (llm.prices), the ones Cache prices
	// tokens with: a client under a spend limit is refused a model they
	// do not price, and its calls that set no max_tokens reserve
	// Config.CompletionTokens or the model's MaxOutputTokens, whichever
	// is set and smaller. Nil prices no model.
	Prices map[string]config.Price
	// Registerer registers the proxy's metrics (requests by client and
	// outcome, their time, each client's usage and spending); nil records
	// none.
	Registerer prometheus.Registerer
	// Logger logs failures; nil discards.
	Logger *slog.Logger
}

// Server is the proxy. It is safe for concurrent use.
type Server struct {
	opts     Options
	cfg      *config.Proxy
	cached   http.RoundTripper // the cache's transport, over Upstream
	base     *url.URL          // BaseURL, parsed
	log      *slog.Logger
	clientOf func(string) (string, bool)
	metrics  *metrics // nil without a Registerer

	mu  sync.Mutex
	srv *serve.Server
}

// New returns a proxy; Start serves it, or mount it as an http.Handler.
func New(opts Options) (*Server, error) {
	if opts.Config == nil || opts.Keys == nil || opts.Cache == nil || opts.BaseURL == "" {
		return nil, errors.New("proxy: Config, Keys, Cache and BaseURL are required")
	}
	base, err := url.Parse(opts.BaseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" || base.RawQuery != "" || base.Fragment != "" {
		return nil, fmt.Errorf("proxy: BaseURL %q is not an http or https URL with a host and no query", opts.BaseURL)
	}
	if opts.Upstream == nil {
		opts.Upstream = http.DefaultTransport
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		opts: opts, cfg: opts.Config,
		cached:   opts.Cache.Transport(opts.Upstream),
		base:     base,
		log:      opts.Logger,
		clientOf: opts.Keys.Client,
	}
	if opts.Registerer != nil {
		if s.metrics, err = newMetrics(opts.Registerer, opts.Keys.Clients(), func() []llmhook.StepStats { return llmhook.Stats(opts.Cache) }, s.Spend); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Start serves the proxy on its configured address and returns the
// address it listens on.
func (s *Server) Start() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return "", errors.New("proxy: already started")
	}
	srv, addr, err := serve.Start(&http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}, s.cfg.Listen, "proxy", s.log)
	if err != nil {
		return "", err
	}
	s.srv = srv
	return addr, nil
}

// Shutdown stops taking requests and waits for those in progress (streams
// included) until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	return srv.Shutdown(ctx)
}

// ServeHTTP answers one request; see the package documentation.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	client, ok := s.authenticate(r)
	if !ok {
		s.fail(w, "", start, OutcomeUnauthorized, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
			"Incorrect or missing proxy key: send your Oncegate proxy key as a bearer token (Authorization: Bearer <key>), as an OpenAI client sends its API key.")
		return
	}
	rt, err := routeOf(r.URL)
	if err != nil {
		s.fail(w, client, start, OutcomeInvalid, http.StatusBadRequest, "invalid_request_error", "invalid_path",
			"Oncegate's proxy refuses this request path, and sent nothing: "+strings.TrimPrefix(err.Error(), "proxy: ")+". It serves POST /v1/chat/completions, GET /v1/models and GET /v1/models/{model id}.")
		return
	}
	switch rt.kind {
	case routeChat:
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			s.fail(w, client, start, OutcomeInvalid, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "POST chat completions.")
			return
		}
		s.chat(w, r, client, start)
	case routeModels, routeModel:
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			s.fail(w, client, start, OutcomeInvalid, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "GET models.")
			return
		}
		if rt.kind == routeModel && !s.cfg.Allowed(rt.id) {
			s.fail(w, client, start, OutcomeInvalid, http.StatusNotFound, "invalid_request_error", "model_not_found",
				fmt.Sprintf("The model %q is not one this Oncegate proxy serves (proxy.models lists them).", rt.id))
			return
		}
		s.models(w, r, client, rt, start)
	default:
		s.fail(w, client, start, OutcomeInvalid, http.StatusNotFound, "invalid_request_error", "unknown_url",
			fmt.Sprintf("Unknown request URL: %s %s. The proxy serves POST /v1/chat/completions and GET /v1/models.", r.Method, r.URL.Path))
	}
}

// authenticate returns the client whose key the request carries.
func (s *Server) authenticate(r *http.Request) (string, bool) {
	auth := r.Header.Get("Authorization")
	key, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		key, ok = strings.CutPrefix(auth, "bearer ")
	}
	if !ok || key == "" {
		return "", false
	}
	return s.clientOf(strings.TrimSpace(key))
}

// chat answers a chat completion through the cache.
func (s *Server) chat(w http.ResponseWriter, r *http.Request, client string, start time.Time) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.cfg.MaxBodyBytes)))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			s.fail(w, client, start, OutcomeInvalid, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
				fmt.Sprintf("The request body is larger than %d bytes (proxy.max_body_bytes).", s.cfg.MaxBodyBytes))
			return
		}
		return // the client went away
	}
	intent, err := intentOf(r, client)
	if err != nil {
		s.fail(w, client, start, OutcomeInvalid, http.StatusBadRequest, "invalid_request_error", "invalid_intent", err.Error())
		return
	}
	req, err := llmhook.ReadRequest(body)
	if err != nil {
		s.fail(w, client, start, OutcomeInvalid, http.StatusBadRequest, "invalid_request_error", "invalid_request",
			"Oncegate's proxy cannot read this request, and sent nothing: "+err.Error())
		return
	}
	if !s.cfg.Allowed(req.Model) {
		s.fail(w, client, start, OutcomeInvalid, http.StatusForbidden, "invalid_request_error", "model_not_allowed",
			fmt.Sprintf("The model %q is not one this Oncegate proxy serves (proxy.models lists them): the call was not sent.", req.Model))
		return
	}
	limits := s.limits(client)
	price, priced := s.price(req.Model)
	if len(limits) > 0 && !priced {
		s.fail(w, client, start, OutcomeInvalid, http.StatusForbidden, "invalid_request_error", "model_not_priced",
			fmt.Sprintf("Client key %q has a spend limit, and the model %q has no price in this Oncegate proxy's llm.prices (nor a \"*\" price), so what it costs cannot be counted: the call was not sent. The proxy's operator can price it in llm.prices.", client, req.Model))
		return
	}
	// What a call that sets no max_tokens reserves for its answer.
	completion := s.cfg.CompletionTokens
	if mo := price.MaxOutputTokens; mo > 0 && (completion == 0 || completion > mo) {
		completion = mo
	}
	if len(limits) > 0 && req.MaxTokens == 0 && completion == 0 {
		s.fail(w, client, start, OutcomeInvalid, http.StatusBadRequest, "invalid_request_error", "max_tokens_required",
			fmt.Sprintf("Client key %q has a spend limit, and this request sets no max_tokens (nor max_completion_tokens), so its worst cost cannot be reserved: set max_tokens. The call was not sent. (The proxy's operator can set proxy.completion_tokens, or llm.prices[%s].max_output_tokens, to reserve for such calls.)", client, req.Model))
		return
	}
	budget := s.cfg.BudgetTokens
	if budget == 0 {
		budget = -1 // no cap; not llm.cache.budget_tokens, which is the pipelines'
	}
	call := llmcache.Call{
		Namespace: Namespace(client, s.cfg.SharedAnswers), Step: client,
		Intent: intent, KeyByIntent: intent != "", Budget: budget, Limits: limits,
		CompletionTokens: completion,
	}
	up, err := http.NewRequestWithContext(llmcache.WithCall(r.Context(), call), http.MethodPost, s.base.JoinPath("chat", "completions").String(), bytes.NewReader(body))
	if err != nil {
		s.fail(w, client, start, OutcomeError, http.StatusInternalServerError, "server_error", "proxy_error", err.Error())
		return
	}
	up.Header.Set("Content-Type", "application/json")
	if a := r.Header.Get("Accept"); a != "" {
		up.Header.Set("Accept", a)
	}
	s.authorize(up)
	resp, err := s.cached.RoundTrip(up)
	if err != nil {
		s.refuse(w, r, client, start, err)
		return
	}
	o := Outcome(resp.Header.Get(llmcache.HeaderCache))
	if o == "" {
		o = OutcomeBypass // too large to key, sent past the cache
	}
	s.answer(w, client, "chat/completions", start, resp, o)
}

// price returns the price of model in Options.Prices: its own, else the
// "*" entry's.
func (s *Server) price(model string) (config.Price, bool) {
	if p, ok := s.opts.Prices[model]; ok {
		return p, true
	}
	p, ok := s.opts.Prices["*"]
	return p, ok
}

// limits returns the spend limits a call of client draws from.
func (s *Server) limits(client string) []llmcache.SpendLimit {
	max, period := s.cfg.Limit(client)
	if max <= 0 {
		return nil
	}
	return []llmcache.SpendLimit{{Name: "client:" + client, Max: max, Period: period}}
}

// Spend returns each client's spending against its limit, for the
// metrics; clients without a limit are left out.
func (s *Server) Spend() []Spend {
	var out []Spend
	for _, c := range s.opts.Keys.Clients() {
		for _, l := range s.limits(c) {
			spent, reset, err := s.opts.Cache.Spending(l)
			if err != nil {
				continue
			}
			p := Spend{Client: c, SpentUSD: spent, LimitUSD: l.Max}
			if !reset.IsZero() {
				p.ResetsUnix = float64(reset.Unix())
			}
			out = append(out, p)
		}
	}
	return out
}

// intentOf returns the intent key a request names, as text, or "".
func intentOf(r *http.Request, client string) (string, error) {
	name, v := HeaderIntent, r.Header.Get(HeaderIntent)
	if v == "" {
		name, v = HeaderIdempotencyKey, r.Header.Get(HeaderIdempotencyKey)
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	if name == HeaderIntent {
		if k, err := dedupe.ParseKey(v); err == nil {
			return k.String(), nil
		}
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' { // a structured-field string
		v = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(v[1 : len(v)-1])
	}
	k, err := dedupe.ClientKey(v, "oncegate-proxy", client)
	if err != nil {
		return "", fmt.Errorf("The %s header is not an intent: %w", name, err) //nolint:staticcheck // ST1005: a sentence of the error sent to the client
	}
	return k.String(), nil
}

// authorize sets the provider's key on a request going upstream.
func (s *Server) authorize(up *http.Request) {
	if s.opts.APIKey != "" {
		up.Header.Set("Authorization", "Bearer "+s.opts.APIKey)
	}
}

// refuse answers a call the cache did not send, or whose provider could
// not be reached, saying why.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, client string, start time.Time, err error) {
	if r.Context().Err() != nil {
		s.metrics.request(client, OutcomeError, time.Since(start))
		return // the client went away
	}
	if sl, ok := errors.AsType[*llmcache.SpendLimitError](err); ok {
		w.Header().Set("X-Should-Retry", "false")
		reset := "The limit does not reset."
		if !sl.Reset.IsZero() {
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(time.Until(sl.Reset).Seconds())))))
			reset = "The limit resets at " + sl.Reset.UTC().Format(time.RFC3339) + "."
		}
		s.fail(w, client, start, OutcomeSpendLimited, http.StatusTooManyRequests, "spend_limit_exceeded", "spend_limit_exceeded",
			fmt.Sprintf("Spend limit reached: %s may spend $%.2f %s, has spent $%.4f, and this call may cost $%.4f more. It was not sent. %s",
				limitName(sl.Limit), sl.Limit.Max, per(sl.Limit.Period), sl.Spent+sl.Reserved, sl.Need, reset))
		return
	}
	if be, ok := errors.AsType[*llmcache.BudgetError](err); ok {
		w.Header().Set("X-Should-Retry", "false")
		s.fail(w, client, start, OutcomeBudgetDenied, http.StatusTooManyRequests, "intent_budget_exceeded", "intent_budget_exceeded",
			fmt.Sprintf("Token budget reached: the calls of this intent may spend %d tokens (proxy.budget_tokens), have spent %d, and this call may spend %d more. It was not sent.",
				be.Budget, be.Spent+be.Reserved, be.Need))
		return
	}
	switch {
	case errors.Is(err, ratelimit.ErrWait):
		w.Header().Set("Retry-After", "1")
		s.fail(w, client, start, OutcomeRateLimited, http.StatusTooManyRequests, "rate_limit_exceeded", "rate_limit_exceeded",
			"The provider's rate limit (llm.rate_limit) would make this call wait longer than allowed. Retry later.")
	case errors.Is(err, llmcache.ErrStoreUnavailable):
		w.Header().Set("Retry-After", "1")
		s.fail(w, client, start, OutcomeUnavailable, http.StatusServiceUnavailable, "server_error", "cache_unavailable",
			"The shared cache cannot be read now, and its answer may be there: the call was not sent. Retry later.")
	case errors.Is(err, llmcache.ErrRequestTooLarge):
		s.fail(w, client, start, OutcomeInvalid, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
			"The request body is too large for Oncegate's proxy to check against your spend limit or intent budget: it was not sent.")
	case errors.Is(err, llmcache.ErrInvalidRequest), errors.Is(err, llmcache.ErrInvalidOptions):
		s.fail(w, client, start, OutcomeInvalid, http.StatusBadRequest, "invalid_request_error", "invalid_request", err.Error())
	case errors.Is(err, llmcache.ErrClosed):
		s.fail(w, client, start, OutcomeUnavailable, http.StatusServiceUnavailable, "server_error", "shutting_down", "The proxy is shutting down. Retry on another replica.")
	default:
		s.log.Warn("proxy: the provider could not be reached", "client", client, "err", err)
		s.fail(w, client, start, OutcomeError, http.StatusBadGateway, "server_error", "upstream_unreachable", "The provider could not be reached. Retry later.")
	}
}

func limitName(l llmcache.SpendLimit) string {
	if c, ok := strings.CutPrefix(l.Name, "client:"); ok {
		return fmt.Sprintf("client key %q", c)
	}
	return l.Name
}

func per(d time.Duration) string {
	if d <= 0 {
		return "in all"
	}
	return "per " + config.Period(d).String()
}

// models passes a model listing, or one model's description, through to
// the provider. The upstream URL is the base URL and a fixed route, with
// the model id (one segment, valid as ValidModelID says) for one model;
// the client's query is not forwarded.
func (s *Server) models(w http.ResponseWriter, r *http.Request, client string, rt route, start time.Time) {
	u := s.base.JoinPath("models")
	if rt.kind == routeModel {
		u = s.base.JoinPath("models", rt.id)
	}
	up, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u.String(), nil)
	if err != nil {
		s.fail(w, client, start, OutcomeError, http.StatusInternalServerError, "server_error", "proxy_error", err.Error())
		return
	}
	s.authorize(up)
	resp, err := s.cached.RoundTrip(up)
	if err != nil {
		s.refuse(w, r, client, start, err)
		return
	}
	s.answer(w, client, "models", start, resp, OutcomePassThrough)
}

// answer passes the provider's answer resp on to w, and records it as o.
// A refusal of the proxy's own credentials (401, 403) is not passed on: it
// would tell the client its own key is wrong, and may name the provider
// key; it is answered 502 with none of the provider's text, logged at
// ERROR and counted as upstream_auth. Another error is passed on with its
// status and body, less what names the provider account (redact).
func (s *Server) answer(w http.ResponseWriter, client, route string, start time.Time, resp *http.Response, o Outcome) {
	switch code := resp.StatusCode; {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
		s.log.Error("proxy: the provider refused the proxy's credentials: check the provider key (llm.api_key_env) and its access", "status", code, "route", route, "client", client)
		w.Header().Set("X-Should-Retry", "false")
		s.fail(w, client, start, OutcomeUpstreamAuth, http.StatusBadGateway, "server_error", "upstream_auth_failed",
			fmt.Sprintf("Oncegate's proxy could not answer: its provider refused the proxy's own credentials (HTTP %d). Your proxy key is valid; the provider key the proxy sends is wrong, revoked or not allowed this call. Tell the proxy's operator.", code))
		return
	case code >= 400:
		s.relayError(w, resp)
		o = OutcomeUpstream
	default:
		s.relay(w, resp)
	}
	s.metrics.request(client, o, time.Since(start))
}

// maxErrorBody is the largest error answer of the provider passed on.
const maxErrorBody = 64 << 10

// accountIDs match what, in a provider's error message, names the
// provider account: API keys, whole or masked ("sk-proj-****abcd"), and
// OpenAI organization and project ids.
var accountIDs = regexp.MustCompile(`\b(sk-[A-Za-z0-9_*\-]{3,}|org-[A-Za-z0-9]{6,}|proj_[A-Za-z0-9]{6,})`)

// redact returns b without the provider key and what accountIDs matches.
func (s *Server) redact(b []byte) []byte {
	if k := s.opts.APIKey; len(k) >= 8 {
		b = bytes.ReplaceAll(b, []byte(k), []byte("[redacted]"))
	}
	return accountIDs.ReplaceAllFunc(b, func(m []byte) []byte {
		switch {
		case bytes.HasPrefix(m, []byte("sk-")):
			return []byte("sk-[redacted]")
		case bytes.HasPrefix(m, []byte("org-")):
			return []byte("org-[redacted]")
		}
		return []byte("proj_[redacted]")
	})
}

// relayError sends the provider's error answer resp to w, redacted, and
// closes it. An answer over maxErrorBody is not passed on: the client gets
// a 502 in its place.
func (s *Server) relayError(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody+1))
	if err != nil || len(b) > maxErrorBody {
		writeError(w, http.StatusBadGateway, "server_error", "upstream_error",
			fmt.Sprintf("Oncegate's proxy got an error answer (HTTP %d) from its provider that it could not read whole; it was not passed on.", resp.StatusCode))
		return
	}
	b = s.redact(b)
	h := w.Header()
	for k, vs := range resp.Header {
		if !dropped[k] {
			h[k] = vs
		}
	}
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(resp.StatusCode)
	w.Write(b)
}

// dropped are the provider's response headers the proxy does not pass on:
// hop-by-hop ones, the length (the body is relayed as it comes), cookies
// and the provider account's identity.
var dropped = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Transfer-Encoding": true, "Upgrade": true,
	"Te": true, "Trailer": true, "Content-Length": true, "Set-Cookie": true,
	"Openai-Organization": true, "Openai-Project": true,
}

// relay sends resp to w as it arrives, flushing each read, and closes it.
func (s *Server) relay(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	h := w.Header()
	for k, vs := range resp.Header {
		if !dropped[k] {
			h[k] = vs
		}
	}
	if resp.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return // the client went away; the cache finishes the call
			}
			rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// fail answers an error in the OpenAI API's format.
func (s *Server) fail(w http.ResponseWriter, client string, start time.Time, o Outcome, status int, typ, code, msg string) {
	writeError(w, status, typ, code, msg)
	s.metrics.request(client, o, time.Since(start))
}
