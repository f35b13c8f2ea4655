package ingress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncegate/oncegate/internal/config"
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
)

// PathPrefix is where sources are served: POST PathPrefix + name.
const PathPrefix = "/hooks/"

// Options configure [New].
type Options struct {
	// Config is the ingress section of the configuration; required. Its
	// Listen is where Start listens.
	Config *config.Ingress
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
	// os.ReadFile.
	ReadFile func(string) ([]byte, error)
	// Now is the clock signed timestamps are checked against. The
	// default is time.Now.
	Now func() time.Time
}

// Server is the webhook ingress: an http.Handler serving every source at
// POST /hooks/<name>, and the HTTP server around it. Its methods are safe
// for concurrent use.
type Server struct {
	cfg     *config.Ingress
	js      jetstream.JetStream
	nc      *nats.Conn
	log     *slog.Logger
	now     func() time.Time
	m       *metrics
	sources map[string]*source
	unknown sourceMetrics

	mu   sync.Mutex
	srv  *http.Server
	done chan struct{}
}

// source is one configured sender and what it needs at request time.
type source struct {
	cfg      config.Source
	keys     [][]byte // one, or two during a rotation; nil when not set
	missing  string   // why keys is nil, for the log
	warnOnce sync.Once
	slots    chan struct{} // the in-flight limit
	sm       sourceMetrics
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
// not set is not an error: it answers 503, and logs why on its first
// request, so the rest of the ingress keeps working.
func New(o Options) (*Server, error) {
	if o.Config == nil || o.JetStream == nil {
		return nil, errors.New("ingress: Config and JetStream are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.ReadFile == nil {
		o.ReadFile = os.ReadFile
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	names := make([]string, 0, len(o.Config.Sources))
	for _, s := range o.Config.Sources {
		names = append(names, s.Name)
	}
	m, err := newMetrics(o.Registerer, names)
	if err != nil {
		return nil, fmt.Errorf("ingress: metrics: %w", err)
	}
	s := &Server{cfg: o.Config, js: o.JetStream, nc: o.JetStream.Conn(), log: o.Logger, now: o.Now, m: m,
		sources: map[string]*source{}}
	s.unknown = m.forSource(unknownSource)
	for _, c := range o.Config.Sources {
		if _, dup := s.sources[c.Name]; dup {
			return nil, fmt.Errorf("ingress: source %q is defined twice", c.Name)
		}
		src := &source{cfg: c, slots: make(chan struct{}, max(o.Config.MaxInFlight, 1)), sm: m.forSource(c.Name)}
		if c.Auth != config.AuthNone {
			src.keys, src.missing = loadKeys(c, o.Getenv, o.ReadFile)
		}
		s.sources[c.Name] = src
	}
	return s, nil
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

// loadKeys reads a source's secret, and the previous one if named. It
// returns no keys, and why, when the current secret is not set; the
// reason names the variable or file, never the value.
func loadKeys(c config.Source, getenv func(string) string, readFile func(string) ([]byte, error)) ([][]byte, string) {
	cur, why := readSecret(c.SecretEnv, c.SecretFile, getenv, readFile)
	if why != "" {
		return nil, why
	}
	vals := []string{cur}
	if c.PreviousSecretEnv != "" || c.PreviousSecretFile != "" {
		if prev, why := readSecret(c.PreviousSecretEnv, c.PreviousSecretFile, getenv, readFile); why == "" {
			vals = append(vals, prev)
		}
	}
	keys := make([][]byte, 0, len(vals))
	for _, v := range vals {
		if c.Kind == config.KindStandard {
			k, err := decodeStandardSecret(v)
			if err != nil {
				return nil, err.Error()
			}
			keys = append(keys, k)
			continue
		}
		keys = append(keys, []byte(v))
	}
	return keys, ""
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
// from its environment variable (through getenv) or its file.
func SourceSecret(c config.Source, getenv func(string) string) ([]byte, error) {
	v, why := readSecret(c.SecretEnv, c.SecretFile, getenv, os.ReadFile)
	if why != "" {
		return nil, fmt.Errorf("ingress: source %s: %s", c.Name, why)
	}
	return []byte(v), nil
}

// Start listens on the configured address and serves in the background
// until Shutdown. It returns the address it listens on (useful with port
// 0).
func (s *Server) Start() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return "", errors.New("ingress: already started")
	}
	ln, err := net.Listen("tcp", listenAddr(s.cfg.Listen))
	if err != nil {
		return "", fmt.Errorf("ingress: %w", err)
	}
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		// The answer waits for the PubAck, bounded by the publish timeout.
		WriteTimeout:   s.cfg.ReadTimeout + s.cfg.PublishTimeout,
		IdleTimeout:    s.cfg.IdleTimeout,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.done = make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("ingress stopped serving", "err", err)
		}
	}(s.srv, s.done)
	return ln.Addr().String(), nil
}

// listenAddr puts a listen address without a host (":8080") on
// loopback: serving every interface must be asked for ("0.0.0.0:8080").
func listenAddr(addr string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// Shutdown stops taking requests and waits, until ctx is done, for the
// ones in progress to be answered.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	<-done
	return err
}

// ServeHTTP answers one webhook request: 200 once every trigger it
// carries is in the stream, or the status that says why not.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	name, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
	src := s.sources[name]
	if !ok || src == nil {
		s.answer(w, &s.unknown, start, OutcomeUnknownSource, http.StatusNotFound, "no such webhook source")
		return
	}
	sm := &src.sm
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.answer(w, sm, start, OutcomeMethod, http.StatusMethodNotAllowed, "webhooks are POSTed")
		return
	}
	if !isJSON(r.Header.Get("Content-Type")) {
		s.answer(w, sm, start, OutcomeContentType, http.StatusUnsupportedMediaType, "the body must be application/json")
		return
	}
	select {
	case src.slots <- struct{}{}:
		defer func() { <-src.slots }()
	default:
		s.unavailable(w, sm, start, OutcomeBusy, "too many requests in flight for this source")
		return
	}
	sm.inflight.Inc()
	defer sm.inflight.Dec()
	if src.keys == nil && src.cfg.Auth != config.AuthNone {
		src.warnOnce.Do(func() {
			s.log.Error("webhook source has no secret: answering 503 until it is set and the process restarted",
				"source", src.cfg.Name, "why", src.missing)
		})
		s.unavailable(w, sm, start, OutcomeNoSecret, "this source's secret is not configured")
		return
	}
	limit := int64(s.cfg.MaxBodyBytes)
	if r.ContentLength > limit {
		s.answer(w, sm, start, OutcomeTooLarge, http.StatusRequestEntityTooLarge, "the body is over the limit of "+strconv.FormatInt(limit, 10)+" bytes")
		return
	}
	body, err := readBody(w, r, limit)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.answer(w, sm, start, OutcomeTooLarge, http.StatusRequestEntityTooLarge, "the body is over the limit of "+strconv.FormatInt(limit, 10)+" bytes")
			return
		}
		s.answer(w, sm, start, OutcomeBadRequest, http.StatusBadRequest, "the body could not be read")
		return
	}
	if err := s.verify(src, r.Header, body); err != nil {
		o := OutcomeBadSignature
		switch {
		case errors.Is(err, ErrNoSignature):
			o = OutcomeNoSignature
		case errors.Is(err, ErrStale):
			o = OutcomeStale
		}
		s.answer(w, sm, start, o, http.StatusUnauthorized, err.Error())
		return
	}
	ts, err := triggers(&src.cfg, r.Header, body)
	if errors.Is(err, errPing) {
		s.answer(w, sm, start, OutcomePing, http.StatusOK, "pong")
		return
	}
	if err != nil {
		s.answer(w, sm, start, OutcomeBadRequest, http.StatusBadRequest, err.Error())
		return
	}
	stored, dups, err := s.publish(r.Context(), src, ts, traceHeaders(r.Header))
	if err != nil {
		s.log.Warn("webhook not stored: answering 503", "source", src.cfg.Name, "err", err)
		s.unavailable(w, sm, start, OutcomeUnavailable, "the trigger could not be stored; retry later")
		return
	}
	o := OutcomeStored
	if stored == 0 && dups > 0 {
		o = OutcomeDuplicate
	}
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(http.StatusOK)
	b := make([]byte, 0, 64)
	b = append(b, `{"triggers":`...)
	b = strconv.AppendInt(b, int64(len(ts)), 10)
	b = append(b, `,"stored":`...)
	b = strconv.AppendInt(b, int64(stored), 10)
	b = append(b, `,"duplicates":`...)
	b = strconv.AppendInt(b, int64(dups), 10)
	b = append(b, "}\n"...)
	w.Write(b)
	sm.outcome[o].Inc()
	sm.latency.Observe(time.Since(start).Seconds())
}

func (s *Server) verify(src *source, h http.Header, body []byte) error {
	if src.cfg.Auth == config.AuthNone {
		return nil
	}
	if src.cfg.Kind == config.KindHMAC {
		return verifyHMAC(h.Get(src.cfg.Header), src.keys, body)
	}
	return verify(src.cfg.Kind, src.cfg.Auth, src.cfg.User, src.keys, h, body, s.now(), s.cfg.Tolerance)
}

// publish stores every trigger, waiting for each PubAck; a trigger that
// was in the stream already counts as stored (its PubAck says
// duplicate). It returns the first error: the caller answers 503, and the
// provider's retry re-publishes them all under the same ids.
func (s *Server) publish(ctx context.Context, src *source, ts []trigger, trace map[string]string) (stored, dups int, err error) {
	if !s.nc.IsConnected() {
		// Publishing now would sit in the reconnect buffer and might be
		// stored after we answered 503; better to refuse it outright.
		return 0, 0, fmt.Errorf("ingress: NATS connection is %s", s.nc.Status())
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout)
	defer cancel()
	for i := range ts {
		t := &ts[i]
		h := make(nats.Header, 4)
		h[nats.MsgIdHdr] = []string{src.cfg.Name + ":" + t.delivery}
		h[HeaderSource] = []string{src.cfg.Name}
		h[HeaderDelivery] = []string{t.delivery}
		if t.event != "" {
			h[HeaderEvent] = []string{t.event}
		}
		for k, v := range trace {
			h[k] = []string{v}
		}
		ack, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: src.cfg.Subject, Header: h, Data: t.body})
		if err != nil {
			return stored, dups, fmt.Errorf("ingress: publish to %s: %w", src.cfg.Subject, err)
		}
		if ack.Duplicate {
			dups++
			src.sm.dup.Inc()
		} else {
			stored++
			src.sm.stored.Inc()
		}
	}
	return stored, dups, nil
}

func (s *Server) answer(w http.ResponseWriter, sm *sourceMetrics, start time.Time, o Outcome, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	io.WriteString(w, msg+"\n")
	sm.outcome[o].Inc()
	if sm.latency != nil {
		sm.latency.Observe(time.Since(start).Seconds())
	}
}

func (s *Server) unavailable(w http.ResponseWriter, sm *sourceMetrics, start time.Time, o Outcome, msg string) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.cfg.RetryAfter.Round(time.Second)/time.Second))))
	s.answer(w, sm, start, o, http.StatusServiceUnavailable, msg)
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
}

var errPing = errors.New("ingress: ping")

// triggers turns a verified request into the triggers it carries.
func triggers(c *config.Source, h http.Header, body []byte) ([]trigger, error) {
	if !looksJSON(body) {
		return nil, errors.New("the body is not a JSON object or array")
	}
	switch c.Kind {
	case config.KindGitHub:
		ev := h.Get(HeaderGitHubEvent)
		if ev == "ping" {
			return nil, errPing
		}
		return one(h.Get(HeaderGitHubDelivery), HeaderGitHubDelivery, ev, body)
	case config.KindSentry:
		return one(h.Get(HeaderSentryRequestID), HeaderSentryRequestID, h.Get(HeaderSentryResource), body)
	case config.KindStandard:
		var p struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(body, &p) // the type is optional; the body is valid JSON
		return one(h.Get(HeaderStandardID), HeaderStandardID, p.Type, body)
	case config.KindStripe:
		var p struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		}
		if err := json.Unmarshal(body, &p); err != nil || p.ID == "" {
			return nil, errors.New("a Stripe event needs a string id")
		}
		return one(p.ID, "the event's id", p.Type, body)
	case config.KindAlertmanager:
		return splitAlerts(body)
	case config.KindHMAC:
		id := h.Get(c.DeliveryHeader)
		if id == "" {
			sum := sha256.Sum256(body)
			id = "sha256-" + hex.EncodeToString(sum[:])
		}
		ev := ""
		if c.EventHeader != "" {
			ev = h.Get(c.EventHeader)
		}
		return one(id, c.DeliveryHeader, ev, body)
	}
	return nil, fmt.Errorf("kind %q is not served", c.Kind)
}

// looksJSON reports whether body is framed as a JSON object or array:
// it catches a form-encoded or plain-text body at the door. It does not
// validate the document: the consumer does (RFC 8785, I-JSON), and
// dead-letters a payload that is not, with its reason; a kind whose
// delivery id is in the body (stripe, alertmanager) parses it here.
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

func one(id, from, event string, body []byte) ([]trigger, error) {
	if id == "" {
		return nil, fmt.Errorf("no delivery id (%s)", from)
	}
	if len(id) > maxDeliveryID || strings.ContainsAny(id, "\r\n\x00") {
		return nil, fmt.Errorf("the delivery id (%s) is over %d bytes or has a control character", from, maxDeliveryID)
	}
	if len(event) > maxDeliveryID || strings.ContainsAny(event, "\r\n\x00") {
		event = ""
	}
	return []trigger{{delivery: id, event: event, body: body}}, nil
}

// traceHeaderNames are the W3C trace context headers the ingress carries
// from a request onto its triggers, so the consumer's trace of a trigger
// continues the provider's (or a proxy's) trace.
var traceHeaderNames = [...]string{"traceparent", "tracestate"}

// maxTraceHeader bounds a carried trace header (W3C allows tracestate 512
// bytes); a longer one is dropped, not cut.
const maxTraceHeader = 512

// traceHeaders returns the trace context headers of h worth carrying, or
// nil.
func traceHeaders(h http.Header) map[string]string {
	var m map[string]string
	for _, k := range traceHeaderNames {
		v := h.Get(k)
		if v == "" || len(v) > maxTraceHeader {
			continue
		}
		if m == nil {
			m = make(map[string]string, len(traceHeaderNames))
		}
		m[k] = v
	}
	return m
}
