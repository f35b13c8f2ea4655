package ingress

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncegate/oncegate/internal/ingress/spec"
	"github.com/oncegate/oncegate/internal/secretfile"
	"github.com/oncegate/oncegate/internal/serve"
	"github.com/oncegate/oncegate/pkg/canon"
)

// Headers the ingress sets on every trigger it publishes, besides
// Nats-Msg-Id.
const (
	// HeaderSource is the name of the source the trigger came in through.
	HeaderSource = "Oncegate-Source"
	// HeaderEvent is the provider's event type: GitHub's X-GitHub-Event,
	// Stripe's and Standard Webhooks' payload type, Sentry's
	// Sentry-Hook-Resource, an Alertmanager alert's status. Absent when
	// the provider gave none.
	HeaderEvent = "Oncegate-Event"
	// HeaderDelivery is the provider's delivery id (for Alertmanager, the
	// one the ingress derived for the alert).
	HeaderDelivery = "Oncegate-Delivery"
	// HeaderTenant is the tenant of a per-tenant source, from the path
	// /hooks/<source>/<tenant>: keys, routes and budgets can use it.
	HeaderTenant = "Oncegate-Tenant"
)

// PathPrefix is where sources are served: POST PathPrefix + name, or
// PathPrefix + name + "/" + tenant for a per-tenant source.
const PathPrefix = "/hooks/"

// Defaults of the Options fields that have one.
const (
	DefaultListen            = "127.0.0.1:0"
	DefaultMaxBodyBytes      = 1 << 20
	DefaultTolerance         = 5 * time.Minute
	DefaultPublishTimeout    = 5 * time.Second
	DefaultRetryAfter        = 5 * time.Second
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxInFlight       = 256
)

// Options configure [New]. JetStream is required; every other field's
// zero value (or a negative number) means its default. internal/app fills
// them in from the configuration's ingress section.
type Options struct {
	// Listen is the address Start listens on, such as "127.0.0.1:8080";
	// without a host (":8080") it is on loopback, and every interface must
	// be asked for ("0.0.0.0:8080"). The default is DefaultListen, a free
	// port on loopback; Start returns the address.
	Listen string
	// MaxBodyBytes bounds a request body; a larger one is answered 413
	// before it is read whole. The default is DefaultMaxBodyBytes, 1MiB.
	MaxBodyBytes int64
	// Tolerance is how far a signed timestamp (Stripe, Standard Webhooks)
	// may be from Now, either way. Twice it must not exceed the trigger
	// stream's duplicate window, or a request replayed late in its
	// tolerance would be stored as a second trigger (the configuration
	// checks this). The default is DefaultTolerance, 5m.
	Tolerance time.Duration
	// PublishTimeout bounds the wait for JetStream's PubAck; past it the
	// request is answered 503 with Retry-After. The default is
	// DefaultPublishTimeout, 5s.
	PublishTimeout time.Duration
	// RetryAfter is the Retry-After of a 503, in whole seconds (at least
	// one). The default is DefaultRetryAfter, 5s.
	RetryAfter time.Duration
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout are the HTTP
	// server's; its WriteTimeout is ReadTimeout plus PublishTimeout. The
	// defaults are DefaultReadHeaderTimeout, DefaultReadTimeout and
	// DefaultIdleTimeout: 5s, 30s and 2m.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration
	// MaxInFlight bounds the requests of one source being worked on at
	// once; more are answered 503 with Retry-After. The default is
	// DefaultMaxInFlight, 256.
	MaxInFlight int
	// Sources are the webhook senders, each served at PathPrefix + Name,
	// as configured: New resolves each one's kind (spec.Source.Resolved).
	// Names must be unique. No sources: every request is answered 404.
	Sources []spec.Source
	// JetStream publishes the triggers; required.
	JetStream jetstream.JetStream
	// Registerer, if set, gets the ingress's metrics
	// (oncegate_ingress_*). The default registers them nowhere.
	Registerer prometheus.Registerer
	// Logger receives the ingress's logs; it never sees a secret. The
	// default discards.
	Logger *slog.Logger
	// Getenv reads the environment variables that hold secrets. The
	// default is os.Getenv.
	Getenv func(string) string
	// ReadFile reads the files that hold secrets. The default is
	// secretfile.ReadFile, which refuses a file open to others.
	ReadFile func(string) ([]byte, error)
	// Now is the clock signed timestamps are checked against. The
	// default is time.Now.
	Now func() time.Time
}

// Server is the webhook ingress: an http.Handler serving every source at
// POST /hooks/<name>, and the HTTP server around it. Its methods are safe
// for concurrent use.
type Server struct {
	o       Options // with the defaults filled in
	js      jetstream.JetStream
	nc      *nats.Conn
	log     *slog.Logger
	now     func() time.Time
	m       *metrics
	sources map[string]*source
	unknown sourceMetrics
	canons  *sync.Pool

	mu  sync.Mutex
	srv *serve.Server
}

// source is one configured sender and what it needs at request time.
type source struct {
	cfg   spec.Source // resolved
	sc    *scheme
	creds // the source's own, unless tenanted
	// tenants holds the credentials of each tenant of a per-tenant
	// source, nil otherwise.
	tenants map[string]*creds
	slots   chan struct{} // the in-flight limit
	sm      sourceMetrics
}

// creds are the keys a request is checked against.
type creds struct {
	keys    [][]byte // one, or two during a rotation; nil when not set
	missing string   // why keys is nil
}

// sourceMetrics are one source's collectors, looked up once.
type sourceMetrics struct {
	name     string
	outcome  map[Outcome]prometheus.Counter
	latency  prometheus.Observer
	stored   prometheus.Counter
	dup      prometheus.Counter
	inflight prometheus.Gauge
}

// New checks o and reads each source's secrets. A source whose secret is
// not set is not an error: it is logged now, and answers 503, so the rest
// of the ingress keeps working.
func New(o Options) (*Server, error) {
	if o.JetStream == nil {
		return nil, errors.New("ingress: JetStream is required")
	}
	o.setDefaults()
	names := make([]string, 0, len(o.Sources))
	for _, s := range o.Sources {
		names = append(names, s.Name)
	}
	m, err := newMetrics(o.Registerer, names)
	if err != nil {
		return nil, fmt.Errorf("ingress: metrics: %w", err)
	}
	s := &Server{o: o, js: o.JetStream, nc: o.JetStream.Conn(), log: o.Logger, now: o.Now, m: m,
		sources: map[string]*source{}, canons: newCanonPool(o.MaxBodyBytes)}
	s.unknown = m.forSource(unknownSource)
	for _, c := range o.Sources {
		if _, dup := s.sources[c.Name]; dup {
			return nil, fmt.Errorf("ingress: source %q is defined twice", c.Name)
		}
		src, err := newSource(c, o.Getenv, o.ReadFile)
		if err != nil {
			return nil, err
		}
		src.slots = make(chan struct{}, o.MaxInFlight)
		src.sm = m.forSource(c.Name)
		s.sources[c.Name] = src
		for _, why := range src.unset() {
			s.log.Error("webhook source has no secret: answering 503 until it is set and the process restarted",
				"source", c.Name, "why", why)
		}
	}
	return s, nil
}

// setDefaults fills in the fields o leaves unset.
func (o *Options) setDefaults() {
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	orDefault(&o.MaxBodyBytes, DefaultMaxBodyBytes)
	orDefault(&o.Tolerance, DefaultTolerance)
	orDefault(&o.PublishTimeout, DefaultPublishTimeout)
	orDefault(&o.RetryAfter, DefaultRetryAfter)
	orDefault(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	orDefault(&o.ReadTimeout, DefaultReadTimeout)
	orDefault(&o.IdleTimeout, DefaultIdleTimeout)
	orDefault(&o.MaxInFlight, DefaultMaxInFlight)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.ReadFile == nil {
		o.ReadFile = secretfile.ReadFile
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// orDefault sets *v to def unless it is positive.
func orDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// newSource compiles a source and reads its secrets.
func newSource(c spec.Source, getenv func(string) string, readFile func(string) ([]byte, error)) (*source, error) {
	r := c.Resolved()
	sc, err := compile(r)
	if err != nil {
		return nil, fmt.Errorf("ingress: source %s: %w", c.Name, err)
	}
	src := &source{cfg: r, sc: sc}
	if sc.auth == spec.AuthNone {
		return src, nil
	}
	enc := ""
	if sc.signs() {
		enc = sc.secretEncoding
	}
	switch {
	case c.TenantSecretDir != "":
		src.tenants = map[string]*creds{}
		entries, err := os.ReadDir(c.TenantSecretDir)
		if err != nil {
			src.missing = fmt.Sprintf("tenant secret directory: %v", err)
			return src, nil
		}
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || strings.HasSuffix(name, ".previous") || !spec.ValidTenant(name) {
				continue
			}
			file := filepath.Join(c.TenantSecretDir, name)
			src.tenants[name] = loadCreds(secretRef{file: file}, secretRef{file: file + ".previous", optional: true}, enc, sc.alg, getenv, readFile)
		}
		if len(src.tenants) == 0 {
			src.missing = "no tenant's secret in " + c.TenantSecretDir
		}
	case len(c.TenantSecretEnv) > 0:
		src.tenants = map[string]*creds{}
		for t, env := range c.TenantSecretEnv {
			src.tenants[t] = loadCreds(secretRef{env: env}, secretRef{}, enc, sc.alg, getenv, readFile)
		}
	default:
		src.creds = *loadCreds(secretRef{env: c.SecretEnv, file: c.SecretFile},
			secretRef{env: c.PreviousSecretEnv, file: c.PreviousSecretFile, optional: true}, enc, sc.alg, getenv, readFile)
	}
	return src, nil
}

// unset lists why the source, or any of its tenants, has no secret.
func (src *source) unset() []string {
	if src.sc.auth == spec.AuthNone {
		return nil
	}
	if src.tenants == nil || src.missing != "" {
		if src.keys == nil {
			return []string{src.missing}
		}
		return nil
	}
	var out []string
	for _, t := range slices.Sorted(maps.Keys(src.tenants)) {
		if c := src.tenants[t]; c.keys == nil {
			out = append(out, "tenant "+t+": "+c.missing)
		}
	}
	return out
}

// CheckSecrets reads the secrets of every source of o, through o.Getenv
// and o.ReadFile, as New would, and lists the sources whose secret is not
// set or does not decode, saying why (naming the variable or file, never a
// value), one line each ("source NAME: why"): what the start and
// `consumer config check` check first. o.JetStream is not needed.
func CheckSecrets(o Options) []string {
	o.setDefaults()
	var out []string
	for _, c := range o.Sources {
		src, err := newSource(c, o.Getenv, o.ReadFile)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		for _, why := range src.unset() {
			out = append(out, fmt.Sprintf("source %s: %s", c.Name, why))
		}
	}
	return out
}

func (m *metrics) forSource(name string) sourceMetrics {
	sm := sourceMetrics{name: name, outcome: map[Outcome]prometheus.Counter{}}
	for _, o := range outcomes {
		sm.outcome[o] = m.requests.WithLabelValues(name, string(o))
	}
	if name != unknownSource {
		sm.latency = m.latency.WithLabelValues(name)
		sm.stored = m.triggers.WithLabelValues(name, "stored")
		sm.dup = m.triggers.WithLabelValues(name, "duplicate")
		sm.inflight = m.inflight.WithLabelValues(name)
	}
	return sm
}

// secretRef names where a secret is.
type secretRef struct {
	env, file string
	optional  bool // a previous secret: absent is fine
}

// loadCreds reads a secret, and the previous one if there is one, and
// decodes them with enc (a signature scheme's secret encoding; empty for
// credentials, compared as they are). Without the current secret it
// returns no keys, and why; the reason names the variable or file, never
// the value.
func loadCreds(cur, prev secretRef, enc, alg string, getenv func(string) string, readFile func(string) ([]byte, error)) *creds {
	v, why := readSecret(cur.env, cur.file, getenv, readFile)
	if why != "" {
		return &creds{missing: why}
	}
	vals := []string{v}
	if prev.env != "" || prev.file != "" {
		if p, why := readSecret(prev.env, prev.file, getenv, readFile); why == "" {
			vals = append(vals, p)
		}
	}
	keys := make([][]byte, 0, len(vals))
	for _, v := range vals {
		k, err := decodeSecret(v, enc)
		if err != nil {
			return &creds{missing: err.Error() + " (" + cmp.Or(cur.env, cur.file) + ")"}
		}
		if alg == spec.Ed25519 && len(k) != ed25519.PublicKeySize {
			return &creds{missing: fmt.Sprintf("an ed25519 public key is %d bytes, got %d (%s)", ed25519.PublicKeySize, len(k), cmp.Or(cur.env, cur.file))}
		}
		keys = append(keys, k)
	}
	return &creds{keys: keys}
}

// readSecret reads a secret from the environment variable env or the
// file, or says why it could not (never with the value).
func readSecret(env, file string, getenv func(string) string, readFile func(string) ([]byte, error)) (string, string) {
	switch {
	case env != "":
		v := getenv(env)
		if v == "" {
			return "", fmt.Sprintf("environment variable %s is not set", env)
		}
		return v, ""
	case file != "":
		b, err := readFile(file)
		if err != nil {
			return "", fmt.Sprintf("secret file: %v", err)
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", fmt.Sprintf("secret file %s is empty", file)
		}
		return v, ""
	}
	return "", "no secret_env or secret_file"
}

// SourceSecret returns the current secret of c, as Sign takes it, read
// from its environment variable (through getenv) or its file; for a
// per-tenant source, the tenant's.
func SourceSecret(c spec.Source, tenant string, getenv func(string) string) ([]byte, error) {
	env, file := c.SecretEnv, c.SecretFile
	switch {
	case c.TenantSecretDir != "":
		if !spec.ValidTenant(tenant) {
			return nil, fmt.Errorf("ingress: source %s has a secret per tenant: name a tenant", c.Name)
		}
		env, file = "", filepath.Join(c.TenantSecretDir, tenant)
	case len(c.TenantSecretEnv) > 0:
		e, ok := c.TenantSecretEnv[tenant]
		if !ok {
			return nil, fmt.Errorf("ingress: source %s has no tenant %q (the tenants are: %s)", c.Name, tenant, strings.Join(slices.Sorted(maps.Keys(c.TenantSecretEnv)), ", "))
		}
		env, file = e, ""
	}
	v, why := readSecret(env, file, getenv, secretfile.ReadFile)
	if why != "" {
		return nil, fmt.Errorf("ingress: source %s: %s", c.Name, why)
	}
	return []byte(v), nil
}

// Start listens on Options.Listen and serves in the background
// until Shutdown. It returns the address it listens on (useful with port
// 0).
func (s *Server) Start() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return "", errors.New("ingress: already started")
	}
	srv, addr, err := serve.Start(&http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.o.ReadHeaderTimeout,
		ReadTimeout:       s.o.ReadTimeout,
		// The answer waits for the PubAck, bounded by the publish timeout.
		WriteTimeout:   s.o.ReadTimeout + s.o.PublishTimeout,
		IdleTimeout:    s.o.IdleTimeout,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}, s.o.Listen, "ingress", s.log)
	if err != nil {
		return "", err
	}
	s.srv = srv
	return addr, nil
}

// Shutdown stops taking requests and waits, until ctx is done, for the
// ones in progress to be answered.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	return srv.Shutdown(ctx)
}

// exchange is one request being answered: what the answer and the log of
// a refusal need.
type exchange struct {
	w      http.ResponseWriter
	r      *http.Request
	sm     *sourceMetrics
	start  time.Time
	tenant string
	read   bool // the body was read
}

// ServeHTTP answers one webhook request: 200 once every trigger it
// carries is in the stream, or the status that says why not, as JSON
// {"error": "...", "code": "<outcome>"}.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{w: w, r: r, sm: &s.unknown, start: time.Now()}
	rest, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
	name, tenant, _ := strings.Cut(rest, "/")
	src := s.sources[name]
	if !ok || src == nil {
		s.answer(x, OutcomeUnknownSource, http.StatusNotFound, "no such webhook source")
		return
	}
	x.sm = &src.sm
	c := &src.creds
	if src.tenants != nil {
		x.tenant = tenant
		if c = src.tenants[tenant]; c == nil {
			s.answer(x, OutcomeUnknownSource, http.StatusNotFound, "no such tenant of this webhook source")
			return
		}
	} else if tenant != "" {
		s.answer(x, OutcomeUnknownSource, http.StatusNotFound, "no such webhook source")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.answer(x, OutcomeMethod, http.StatusMethodNotAllowed, "webhooks are POSTed")
		return
	}
	ct := r.Header.Get("Content-Type")
	form := src.sc.form && isForm(ct)
	if !form && !isJSON(ct) {
		want := "the body must be application/json"
		if src.sc.form {
			want += " or application/x-www-form-urlencoded"
		}
		s.answer(x, OutcomeContentType, http.StatusUnsupportedMediaType, want)
		return
	}
	select {
	case src.slots <- struct{}{}:
		defer func() { <-src.slots }()
	default:
		s.unavailable(x, OutcomeBusy, "too many requests in flight for this source")
		return
	}
	x.sm.inflight.Inc()
	defer x.sm.inflight.Dec()
	if c.keys == nil && src.sc.auth != spec.AuthNone {
		s.unavailable(x, OutcomeNoSecret, "this source's secret is not configured")
		return
	}
	limit := s.o.MaxBodyBytes
	if r.ContentLength > limit {
		s.answer(x, OutcomeTooLarge, http.StatusRequestEntityTooLarge, "the body is over the limit of "+strconv.FormatInt(limit, 10)+" bytes")
		return
	}
	body, err := readBody(w, r, limit)
	x.read = true
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.answer(x, OutcomeTooLarge, http.StatusRequestEntityTooLarge, "the body is over the limit of "+strconv.FormatInt(limit, 10)+" bytes")
			return
		}
		s.answer(x, OutcomeBadRequest, http.StatusBadRequest, "the body could not be read")
		return
	}
	rq := &request{h: r.Header, raw: body, body: body, uri: r.RequestURI, canons: s.canons}
	if form {
		if err := rq.readForm(src.sc.payload); err != nil {
			s.answer(x, OutcomeBadRequest, http.StatusBadRequest, err.Error())
			return
		}
	}
	if err := src.sc.verify(c.keys, rq, s.now(), s.o.Tolerance); err != nil {
		o := OutcomeBadSignature
		switch {
		case errors.Is(err, ErrNoSignature):
			o = OutcomeNoSignature
		case errors.Is(err, ErrStale):
			o = OutcomeStale
		}
		s.answer(x, o, http.StatusUnauthorized, err.Error())
		return
	}
	ts, err := src.triggers(rq)
	var hs *handshake
	if errors.As(err, &hs) {
		s.answerJSON(x, OutcomePing, hs.answer)
		return
	}
	if err != nil {
		s.answer(x, OutcomeBadRequest, http.StatusBadRequest, err.Error())
		return
	}
	stored, dups, err := s.publish(r.Context(), src, tenant, ts, extraHeaders(r.Header, src.sc.copy))
	if err != nil {
		s.log.Warn("webhook not stored: answering 503", "source", src.cfg.Name, "err", err)
		s.unavailable(x, OutcomeUnavailable, "the trigger could not be stored; retry later")
		return
	}
	o := OutcomeStored
	if stored == 0 && dups > 0 {
		o = OutcomeDuplicate
	}
	b := make([]byte, 0, 64)
	b = append(b, `{"triggers":`...)
	b = strconv.AppendInt(b, int64(len(ts)), 10)
	b = append(b, `,"stored":`...)
	b = strconv.AppendInt(b, int64(stored), 10)
	b = append(b, `,"duplicates":`...)
	b = strconv.AppendInt(b, int64(dups), 10)
	b = append(b, "}\n"...)
	s.answerJSON(x, o, b)
}

// publish stores every trigger: one waits for its PubAck; several are
// published at once and then waited for, all of them before the answer.
// A trigger that was in the stream already counts as stored (its PubAck
// says duplicate). It returns the first error: the caller answers 503,
// and the provider's retry re-publishes them all under the same ids.
func (s *Server) publish(ctx context.Context, src *source, tenant string, ts []trigger, extra map[string]string) (stored, dups int, err error) {
	if !s.nc.IsConnected() {
		// Publishing now would sit in the reconnect buffer and might be
		// stored after we answered 503; better to refuse it outright.
		return 0, 0, fmt.Errorf("ingress: NATS connection is %s", s.nc.Status())
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.PublishTimeout)
	defer cancel()
	prefix := src.cfg.Name
	if tenant != "" {
		prefix += "/" + tenant
	}
	msgs := make([]*nats.Msg, len(ts))
	for i := range ts {
		t := &ts[i]
		h := make(nats.Header, 5+len(extra))
		h[nats.MsgIdHdr] = []string{prefix + ":" + t.msgID()}
		h[HeaderSource] = []string{src.cfg.Name}
		h[HeaderDelivery] = []string{t.delivery}
		if t.event != "" {
			h[HeaderEvent] = []string{t.event}
		}
		if tenant != "" {
			h[HeaderTenant] = []string{tenant}
		}
		for k, v := range extra {
			h[k] = []string{v}
		}
		msgs[i] = &nats.Msg{Subject: src.cfg.Subject, Header: h, Data: t.body}
	}
	count := func(ack *jetstream.PubAck) {
		if ack.Duplicate {
			dups++
			src.sm.dup.Inc()
		} else {
			stored++
			src.sm.stored.Inc()
		}
	}
	if len(msgs) == 1 {
		ack, err := s.js.PublishMsg(ctx, msgs[0])
		if err != nil {
			return 0, 0, fmt.Errorf("ingress: publish to %s: %w", src.cfg.Subject, err)
		}
		count(ack)
		return stored, dups, nil
	}
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		if futures[i], err = s.js.PublishMsgAsync(m); err != nil {
			return stored, dups, fmt.Errorf("ingress: publish to %s: %w", src.cfg.Subject, err)
		}
	}
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			count(ack)
		case err := <-f.Err():
			return stored, dups, fmt.Errorf("ingress: publish to %s: %w", src.cfg.Subject, err)
		case <-ctx.Done():
			return stored, dups, fmt.Errorf("ingress: publish to %s: %w", src.cfg.Subject, ctx.Err())
		}
	}
	return stored, dups, nil
}

// answer refuses a request: a JSON error with its code, counted by its
// outcome and logged at debug with the source, the reason and the remote
// address (never the body or a secret).
func (s *Server) answer(x *exchange, o Outcome, status int, msg string) {
	h := x.w.Header()
	h["Content-Type"] = jsonType
	h.Set("X-Content-Type-Options", "nosniff")
	if !x.read && x.r.ContentLength != 0 {
		// Refused before its body was read: close the connection rather
		// than read a body nobody wants (net/http would, up to 256KiB,
		// before answering).
		h.Set("Connection", "close")
	}
	x.w.WriteHeader(status)
	b, _ := json.Marshal(struct {
		Error string  `json:"error"`
		Code  Outcome `json:"code"`
	}{msg, o})
	x.w.Write(append(b, '\n'))
	x.sm.outcome[o].Inc()
	if x.sm.latency != nil {
		x.sm.latency.Observe(time.Since(x.start).Seconds())
	}
	if s.log.Enabled(x.r.Context(), slog.LevelDebug) {
		attrs := []any{"source", x.sm.name, "status", status, "code", string(o), "reason", msg, "remote", x.r.RemoteAddr}
		if x.tenant != "" {
			attrs = append(attrs, "tenant", x.tenant)
		}
		if x.sm.name == unknownSource {
			attrs = append(attrs, "path", truncate(x.r.URL.Path))
		}
		s.log.Debug("webhook refused", attrs...)
	}
}

// answerJSON answers 200 with body.
func (s *Server) answerJSON(x *exchange, o Outcome, body []byte) {
	x.w.Header()["Content-Type"] = jsonType
	x.w.WriteHeader(http.StatusOK)
	x.w.Write(body)
	x.sm.outcome[o].Inc()
	x.sm.latency.Observe(time.Since(x.start).Seconds())
}

func (s *Server) unavailable(x *exchange, o Outcome, msg string) {
	x.w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.o.RetryAfter.Round(time.Second)/time.Second))))
	s.answer(x, o, http.StatusServiceUnavailable, msg)
}

var jsonType = []string{"application/json"}

// readBody reads the request body, up to limit bytes: into a buffer of
// the announced size when there is one, else growing.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	if n := r.ContentLength; n > 0 && n <= limit {
		buf := make([]byte, n)
		// net/http's body reader stops at Content-Length.
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	return io.ReadAll(rd)
}

// isJSON reports whether a Content-Type is application/json, or a
// +json type.
func isJSON(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// trigger is one message to publish.
type trigger struct {
	delivery string
	event    string
	body     []byte
	// bound is set when the delivery id or the event type came from a
	// header the provider does not sign: the message id then binds them
	// to the body (see msgID).
	bound bool
}

// msgID is the trigger's Nats-Msg-Id, after "<source>:" (or
// "<source>/<tenant>:").
//
// Where the provider signs the delivery id (Standard Webhooks signs
// webhook-id with the body) or it comes from the body (Stripe's event id,
// PagerDuty's, an Alertmanager alert's fingerprint, startsAt and status),
// it is the delivery id: a provider's retry, re-signed, is the same
// message, and an old body can only ever bring its own old id.
//
// Where the delivery id or the event type comes from a header the
// signature does not cover (GitHub's X-GitHub-Delivery and X-GitHub-Event,
// Sentry's, Shopify's, Jira's X-Atlassian-Webhook-Identifier, an hmac
// source's headers, any header under token, bearer or basic auth), it is
// whatever the request says. Keyed by the delivery id alone, anyone
// holding one old signed body could send it under a delivery id still to
// come, and the real delivery would be answered 200 as a duplicate and
// stored nowhere. So the id is "<delivery>:<digest>", the digest a
// SHA-256 of the event type and the body (128 bits, base64url):
//   - a provider's genuine retry (same delivery id, event and body) is the
//     same message, dropped by the stream's duplicate window;
//   - a replayed body under another delivery id, or under another event
//     type, is another message: it can never take the place of the real
//     delivery, whose 200 always means its own body, under its own id and
//     event, is in the stream. What it stores is a copy of an old body,
//     which a pipeline keyed on the body finds committed (the ledger);
//   - the event type is bound too, not only the body, so that a request
//     carrying another event type cannot make the stream keep the wrong
//     label on a delivery whose body repeats an earlier one.
//
// A replay that the stream stores is no new work only for keys the
// provider's signature covers: config.Validate refuses a pipeline fed by
// such a source whose key.headers name the unsigned values
// (Oncegate-Event, Oncegate-Delivery, a copied header), since nothing can
// tell a replay under a flipped event type from a real delivery of that
// type.
func (t *trigger) msgID() string {
	if !t.bound {
		return t.delivery
	}
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(t.event)))])
	h.Write([]byte(t.event))
	h.Write(t.body)
	sum := h.Sum(nil)
	return t.delivery + ":" + base64.RawURLEncoding.EncodeToString(sum[:16])
}

// handshake is a provider's endpoint check, verified: it is answered 200
// with its answer, and publishes nothing.
type handshake struct{ answer []byte }

func (*handshake) Error() string { return "ingress: handshake" }

// noTriggers is the answer to a handshake that echoes nothing.
var noTriggers = []byte(`{"triggers":0,"stored":0,"duplicates":0}` + "\n")

// triggers turns a verified request into the triggers it carries.
func (src *source) triggers(rq *request) ([]trigger, error) {
	sc := src.sc
	if !looksJSON(rq.body) {
		return nil, errors.New("the body is not a JSON object or array")
	}
	if sc.split {
		return splitAlerts(rq.body)
	}
	event, evFrom, err := rq.first(sc.event)
	if err != nil {
		return nil, err
	}
	if len(event) > maxDeliveryID || strings.ContainsAny(event, "\r\n\x00") {
		event = ""
	}
	if sc.handshake.Event != "" && event == sc.handshake.Event {
		if sc.handshake.Echo == "" {
			return nil, &handshake{noTriggers}
		}
		doc, err := rq.canonBody()
		if err != nil {
			return nil, err
		}
		v, ok, err := canon.Lookup(doc, sc.echo)
		if err != nil || !ok {
			return nil, fmt.Errorf("the %s handshake has no %s", event, sc.handshake.Echo)
		}
		return nil, &handshake{append(append([]byte(`{"challenge":`), v...), "}\n"...)}
	}
	id, idFrom, err := rq.delivery(sc)
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, fmt.Errorf("no delivery id (%s)", describeFroms(sc.delivery))
	}
	if len(id) > maxDeliveryID || strings.ContainsAny(id, "\r\n\x00") {
		return nil, fmt.Errorf("the delivery id (%s) is over %d bytes or has a control character", idFrom.Describe(), maxDeliveryID)
	}
	bound := !sc.covered(idFrom, true) || event != "" && !sc.covered(evFrom, false)
	return []trigger{{delivery: id, event: event, body: rq.body, bound: bound}}, nil
}

// looksJSON reports whether body is framed as a JSON object or array:
// it catches a form-encoded or plain-text body at the door. It does not
// validate the document: the consumer does (RFC 8785, I-JSON), and
// dead-letters a payload that is not, with its reason; a source whose
// delivery id is in the body parses it here.
func looksJSON(body []byte) bool {
	b := bytes.TrimSpace(body)
	if len(b) < 2 {
		return false
	}
	first, last := b[0], b[len(b)-1]
	return first == '{' && last == '}' || first == '[' && last == ']'
}

// maxDeliveryID bounds a delivery id: it goes into headers.
const maxDeliveryID = 256

// traceHeaderNames are the W3C trace context headers the ingress carries
// from a request onto its triggers, so the consumer's trace of a trigger
// continues the provider's (or a proxy's) trace.
var traceHeaderNames = [...]string{"traceparent", "tracestate"}

// maxTraceHeader bounds a carried header (W3C allows tracestate 512
// bytes); a longer one is dropped, not cut.
const maxTraceHeader = 512

// extraHeaders returns the request headers carried onto the triggers:
// the trace context, and the source's copied headers; or nil.
func extraHeaders(h http.Header, copied []string) map[string]string {
	var m map[string]string
	add := func(k, v string) {
		if v == "" || len(v) > maxTraceHeader || strings.ContainsAny(v, "\r\n\x00") {
			return
		}
		if m == nil {
			m = make(map[string]string, len(traceHeaderNames)+len(copied))
		}
		m[k] = v
	}
	for _, k := range traceHeaderNames {
		add(k, h.Get(k))
	}
	for _, k := range copied {
		add(k, h.Get(k))
	}
	return m
}
