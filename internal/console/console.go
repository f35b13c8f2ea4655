// Package console is Oncegate's console: a few server-rendered pages
// (html/template, no JavaScript) over the admin operations (package
// admin): the dead letters, newest first, filtered (pipeline, effect,
// reason, status, time range, text, or a filter line), counted by reason,
// pipeline, effect and status, the handled ones hidden unless asked for,
// in pages with totals; each letter with what matters first (effect,
// status, the receiver's message, tries, next step), its story and buttons
// to redrive it and forget a failed record; bulk redrives (preview,
// confirm, progress, summary); the audit; a key lookup; pending leases and
// one-shot effects waiting in the outbox, with approve and cancel buttons;
// the LLM cache's figures.
//
// # Security
//
// Reading needs nothing but reaching the address, which is loopback unless
// the configuration says otherwise. Every change is a POST that needs a
// session, opened by signing in with an operator's token (Options.Operators:
// one token per operator, looked up by its SHA-256 digest; without any the
// console is read-only), and carries the session's CSRF token in the form;
// Go's cross-origin protection (http.CrossOriginProtection) refuses
// cross-site POSTs besides. Every change is made by the operator who signed
// in: the admin operations, the marks and the log lines name them. Session
// cookies are HttpOnly and SameSite=Strict, and sessions live in memory for
// 12 hours at most.
//
// Failed sign-ins are logged with the client's address and slowed down,
// per address and over all addresses: past a few failures, the next
// sign-in waits (1 s, doubling, up to 15 minutes per address and 1 minute
// over all), and is answered 429 with Retry-After until then, its token
// unread. The page a sign-in returns to (its back field) is a path on this
// site or nothing: see safeBack.
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/secretfile"
)

//go:embed templates/*.html
var templateFS embed.FS

// Options configures a [Server].
type Options struct {
	// API carries the operations out. Required.
	API admin.API
	// Config is the consumer's configuration. Required.
	Config *config.Config
	// Conn, if set, reads the outbox and sends approvals and
	// cancellations; without it the outbox is not shown.
	Conn *nats.Conn
	// Operators are the tokens people sign in with to change anything,
	// each with its operator's name, which every change they make is
	// made by. None (nil) makes the console read-only.
	Operators *secretfile.Set
	// CacheStats and CacheSummary, if set, give the LLM cache's figures.
	CacheStats   func() []llmhook.StepStats
	CacheSummary func() (llmhook.Summary, error)
	// Logger receives a line per change, with the client's address. The
	// default discards.
	Logger *slog.Logger
}

// LoneOperator is the name of an operator whose token came alone (the one
// token of ONCEGATE_CONSOLE_TOKEN or of a token file, with no name): what
// the audit says such a sign-in's changes are by. Give every person a
// line "name token" to have the audit name them.
const LoneOperator = "operator"

// sessionTTL is how long a sign-in lasts.
const sessionTTL = 12 * time.Hour

const cookieName = "oncegate_console"

// Server is the console's HTTP server.
type Server struct {
	opts Options
	tmpl *template.Template
	h    http.Handler
	srv  *http.Server

	mu       sync.Mutex
	sessions map[string]session

	backoff backoff
	now     func() time.Time // time.Now; tests set it (export_test.go)
}

type session struct {
	csrf     string
	operator string // who signed in
	expires  time.Time
}

// New returns a console; Start serves it.
func New(opts Options) (*Server, error) {
	if opts.API == nil || opts.Config == nil {
		return nil, errors.New("console: API and Config are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	t, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	s := &Server{opts: opts, tmpl: t, sessions: map[string]session{}, now: time.Now}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.overview)
	mux.HandleFunc("GET /dead", s.deadList)
	mux.HandleFunc("GET /dead/{seq}", s.deadShow)
	mux.HandleFunc("POST /dead/{seq}/redrive", s.change(s.redrive))
	mux.HandleFunc("POST /forget", s.change(s.forget))
	mux.HandleFunc("GET /key", s.keyPage)
	mux.HandleFunc("POST /key", s.keyPage)
	mux.HandleFunc("GET /pending", s.pending)
	mux.HandleFunc("POST /outbox/{action}", s.change(s.outboxDecide))
	mux.HandleFunc("POST /redrive/preview", s.change(s.preview))
	mux.HandleFunc("GET /redrive", s.jobsPage)
	mux.HandleFunc("GET /redrive/{id}", s.jobPage)
	mux.HandleFunc("POST /redrive/{id}/start", s.change(s.startJob))
	mux.HandleFunc("GET /audit", s.auditPage)
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)
	s.h = http.NewCrossOriginProtection().Handler(secureHeaders(mux))
	return s, nil
}

// Handler returns the console's handler.
func (s *Server) Handler() http.Handler { return s.h }

// Start listens on addr (host:port; no host means loopback) and serves
// until Shutdown. It returns the address it listens on.
func (s *Server) Start(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("console: %w", err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return "", fmt.Errorf("console: %w", err)
	}
	s.srv = &http.Server{Handler: s.h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	go s.srv.Serve(ln)
	return ln.Addr().String(), nil
}

// Shutdown stops the server, waiting for requests in flight until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	return s.srv.Shutdown(ctx)
}

func secureHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "same-origin")
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

func randomHex() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// session returns the request's live session, if any.
func (s *Server) session(r *http.Request) (session, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[c.Value]
	if !ok || s.now().After(ss.expires) {
		delete(s.sessions, c.Value)
		return session{}, false
	}
	return ss, true
}

// maxSignIn bounds a sign-in's form.
const maxSignIn = 16 << 10

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxSignIn)
	client, now := clientOf(r.RemoteAddr), s.now()
	if wait := s.backoff.wait(client, now); wait > 0 {
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		s.opts.Logger.Debug("console sign-in refused: too many failures", "client", r.RemoteAddr, "retry_after", secs)
		s.render(w, r, http.StatusTooManyRequests, "login", page{Title: "Sign in", Error: fmt.Sprintf("Too many failed sign-ins: try again in %d seconds.", secs)})
		return
	}
	if err := r.ParseForm(); err != nil {
		// Nothing was presented, so nothing was guessed: not a failure.
		status, msg := http.StatusBadRequest, "The sign-in form could not be read."
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			status, msg = http.StatusRequestEntityTooLarge, fmt.Sprintf("The sign-in form is larger than %d bytes.", maxSignIn)
		}
		s.render(w, r, status, "login", page{Title: "Sign in", Error: msg})
		return
	}
	operator, ok := s.opts.Operators.Lookup(r.PostFormValue("token"))
	if !ok {
		if s.opts.Operators.Len() == 0 {
			s.render(w, r, http.StatusForbidden, "login", page{Title: "Sign in"})
			return
		}
		n := s.backoff.failed(client, now)
		s.opts.Logger.Warn("console sign-in refused", "client", r.RemoteAddr, "failures", n)
		if wait := s.backoff.wait(client, now); wait > 0 {
			s.opts.Logger.Warn("console sign-ins wait: too many failures", "client", r.RemoteAddr, "wait", wait)
		}
		s.render(w, r, http.StatusForbidden, "login", page{Title: "Sign in", Error: "That is not an operator's token."})
		return
	}
	s.backoff.succeeded(client)
	id := randomHex()
	s.mu.Lock()
	for k, v := range s.sessions {
		if now.After(v.expires) {
			delete(s.sessions, k)
		}
	}
	s.sessions[id] = session{csrf: randomHex(), operator: operator, expires: now.Add(sessionTTL)}
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL.Seconds()), Secure: r.TLS != nil})
	s.opts.Logger.Info("console sign-in", "operator", operator, "client", r.RemoteAddr)
	http.Redirect(w, r, safeBack(r.PostFormValue("back"), "/dead"), http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(cookieName); err == nil {
		s.mu.Lock()
		delete(s.sessions, c.Value)
		s.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// change wraps a handler of a POST that changes state: it needs a session
// and the session's CSRF token in the form.
func (s *Server) change(h func(w http.ResponseWriter, r *http.Request, by admin.Caller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ss, ok := s.session(r)
		if !ok {
			s.render(w, r, http.StatusForbidden, "login", page{Title: "Sign in", Error: "Sign in with the console's token to change anything."})
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(ss.csrf)) != 1 {
			http.Error(w, "console: the form's CSRF token does not match your session: reload the page and try again", http.StatusForbidden)
			return
		}
		h(w, r, admin.Caller{Name: "console", User: ss.operator})
	}
}

// safeBack returns back if it is a path on this site, else def. A path
// on this site is one a browser resolves to this host whatever it makes
// of it: it starts with one '/' and not "//", holds no '\' (a browser
// reads "/\" as "//", another host), it is printable ASCII with no blank (a browser
// drops tabs and newlines, so "/\t/evil.example" would become
// "//evil.example"), and so is it once percent-decoded, and it parses as a
// URL with no scheme, host or user.
func safeBack(back, def string) string {
	if !localPath(back) {
		return def
	}
	if dec, err := url.PathUnescape(back); err != nil || !localPath(dec) {
		return def
	}
	if u, err := url.Parse(back); err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return def
	}
	return back
}

// localPath reports whether p starts with one '/' (not "//") and holds
// only printable ASCII, no blank and no '\'. A browser reads '\' as '/',
// and http.Redirect cleans the path it is given ("/./\evil" becomes
// "/\evil", which a browser takes for the host evil): no path of the
// console's has one, so none passes.
func localPath(p string) bool {
	if len(p) == 0 || p[0] != '/' || len(p) > 1 && p[1] == '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] >= 0x7f || p[i] == '\\' {
			return false
		}
	}
	return true
}
