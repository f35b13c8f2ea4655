package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Errors of [Server.Start].
var (
	// ErrStarted is returned by Start on a server already started.
	ErrStarted = errors.New("ops: server already started")
	// ErrClosed is returned by Start on a server that was shut down.
	ErrClosed = errors.New("ops: server closed")
)

// Timeouts of the ops HTTP server. A scrape gathers every collector,
// window table scans included, so writes get more time than reads.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 16 << 10
	// maxScrapes bounds concurrent /metrics requests; more are answered
	// 503, so a scrape storm cannot pile up table scans.
	maxScrapes = 4
)

// Server serves the operations endpoints over HTTP: /metrics, /healthz,
// /readyz and an index at /. Its methods are safe for concurrent use.
type Server struct {
	addr   string
	logger *slog.Logger
	srv    *http.Server

	mu     sync.Mutex
	state  int           // idle, started or closed
	served chan struct{} // closed when Serve has returned
}

const (
	idle = iota
	started
	closed
)

// NewServer returns a server that will listen on addr ("host:port"; port 0
// picks a free one) once started.
//
// /metrics serves m's registry; with a nil m it is not served (404).
// /healthz answers 200 "ok" for as long as the process serves HTTP.
// /readyz calls ready on every request: 200 "ok" when it returns nil, else
// 503 with the error's text. The endpoints are unauthenticated, so ready
// must return errors that are safe to show to anyone who can reach addr:
// no credentials, tokens or URLs with user info. It should also return
// quickly, from state the process already holds. A nil ready means always
// ready. A nil logger means slog.Default(); the server logs only its own
// failures.
func NewServer(addr string, m *Metrics, ready func() error, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	if ready == nil {
		ready = func() error { return nil }
	}
	s := &Server{addr: addr, logger: logger}
	mux := http.NewServeMux()
	paths := []string{"/healthz", "/readyz"}
	if reg := m.Registry(); reg != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
			ErrorLog:            promLogger{logger},
			ErrorHandling:       promhttp.ContinueOnError,
			MaxRequestsInFlight: maxScrapes,
		}))
		paths = append([]string{"/metrics"}, paths...)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		text(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			text(w, http.StatusServiceUnavailable, "not ready: "+err.Error()+"\n")
			return
		}
		text(w, http.StatusOK, "ok\n")
	})
	index := indexPage(paths)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("X-Content-Type-Options", "nosniff")
		_, _ = io.WriteString(w, index)
	})
	s.srv = &http.Server{
		Addr:              addr,
		Handler:           mux,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return s
}

// Start listens on the server's address and serves in a goroutine until
// [Server.Shutdown]. It returns the address it listens on, with the port
// chosen when the given one was 0. It returns [ErrStarted] or [ErrClosed]
// if called more than once, or the listen error.
func (s *Server) Start() (addr string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case started:
		return "", ErrStarted
	case closed:
		return "", ErrClosed
	}
	if s.addr == "" {
		return "", errors.New("ops: listen: empty address")
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return "", fmt.Errorf("ops: listen: %w", err)
	}
	s.state = started
	s.served = make(chan struct{})
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("ops: server stopped", "err", err)
		}
	}()
	return ln.Addr().String(), nil
}

// Shutdown stops the server: it closes the listener, so the port is free
// when it returns, and waits for requests in progress to finish until ctx
// is done, then closes the connections that remain and returns ctx's
// error. A handler still running then (a ready func that does not return)
// is not waited for. Shutdown on a server never started returns nil, and
// Start afterwards fails; a second Shutdown returns nil.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	was := s.state
	s.state = closed
	s.mu.Unlock()
	if was != started {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
		err = fmt.Errorf("ops: shutdown: %w", err)
	}
	<-s.served // Serve returns as soon as the listener is closed
	return err
}

// text writes a plain-text answer that no cache keeps.
func text(w http.ResponseWriter, code int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body)
}

// indexPage links the endpoints; paths are constants, so nothing needs
// escaping.
func indexPage(paths []string) string {
	page := "<!doctype html>\n<title>oncegate</title>\n<h1>oncegate</h1>\n<ul>\n"
	for _, p := range paths {
		page += `<li><a href="` + strings.TrimPrefix(p, "/") + `">` + p + "</a></li>\n"
	}
	return page + "</ul>\n"
}

// promLogger lets promhttp report gathering and encoding errors in the
// server's log.
type promLogger struct{ l *slog.Logger }

func (p promLogger) Println(v ...any) {
	p.l.Warn("ops: metrics: " + strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
}
