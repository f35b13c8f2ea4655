package ops_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/oncegate/oncegate/internal/ops"
)

func TestReadyzFlips(t *testing.T) {
	var state atomic.Pointer[error]
	setReady := func(err error) { state.Store(&err) }
	setReady(errors.New("consumer: not connected to NATS"))
	base := startServer(t, ops.NewMetrics(ops.MetricsOptions{}), func() error { return *state.Load() }, discardLogger())

	steps := []struct {
		name     string
		err      error
		wantCode int
		wantBody string
	}{
		{"starting", errors.New("consumer: not connected to NATS"), 503, "not ready: consumer: not connected to NATS\n"},
		{"connected", nil, 200, "ok\n"},
		{"draining", errors.New("consumer: draining"), 503, "not ready: consumer: draining\n"},
		{"back", nil, 200, "ok\n"},
	}
	for _, st := range steps {
		setReady(st.err)
		code, ctype, body := get(t, http.MethodGet, base+"/readyz")
		if code != st.wantCode || body != st.wantBody {
			t.Errorf("%s: GET /readyz = %d %q; want %d %q", st.name, code, body, st.wantCode, st.wantBody)
		}
		if !strings.HasPrefix(ctype, "text/plain") {
			t.Errorf("%s: Content-Type = %q; want text/plain", st.name, ctype)
		}
		// Liveness does not depend on readiness.
		if code, _, body := get(t, http.MethodGet, base+"/healthz"); code != 200 || body != "ok\n" {
			t.Errorf("%s: GET /healthz = %d %q; want 200 \"ok\\n\"", st.name, code, body)
		}
	}
}

func TestRoutes(t *testing.T) {
	base := startServer(t, ops.NewMetrics(ops.MetricsOptions{}), nil, discardLogger())
	tests := []struct {
		method, path string
		wantCode     int
		wantType     string
		wantBody     string // substring
	}{
		{"GET", "/healthz", 200, "text/plain", "ok"},
		{"HEAD", "/healthz", 200, "text/plain", ""},
		{"GET", "/readyz", 200, "text/plain", "ok"}, // nil ready: always ready
		{"GET", "/", 200, "text/html", `<a href="metrics">/metrics</a>`},
		{"GET", "/metrics", 200, "text/plain", "# TYPE go_goroutines gauge"},
		{"POST", "/healthz", 405, "", ""},
		{"DELETE", "/metrics", 405, "", ""},
		{"GET", "/nope", 404, "", ""},
		{"GET", "/healthz/x", 404, "", ""},
	}
	for _, tt := range tests {
		code, ctype, body := get(t, tt.method, base+tt.path)
		if code != tt.wantCode {
			t.Errorf("%s %s = %d; want %d", tt.method, tt.path, code, tt.wantCode)
		}
		if !strings.HasPrefix(ctype, tt.wantType) {
			t.Errorf("%s %s Content-Type = %q; want %s", tt.method, tt.path, ctype, tt.wantType)
		}
		if !strings.Contains(body, tt.wantBody) {
			t.Errorf("%s %s body = %q; want it to contain %q", tt.method, tt.path, body, tt.wantBody)
		}
	}
}

func TestShutdownReleasesPort(t *testing.T) {
	s := ops.NewServer("127.0.0.1:0", ops.NewMetrics(ops.MetricsOptions{}), nil, discardLogger())
	addr, err := s.Start()
	if err != nil {
		t.Fatalf("Start() error = %v", err)
	}
	if code, _, _ := get(t, "GET", "http://"+addr+"/healthz"); code != 200 {
		t.Fatalf("GET /healthz = %d; want 200", code)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown() error = %v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on %s after Shutdown: %v", addr, err)
	}
	ln.Close()

	if _, err := s.Start(); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("Start() after Shutdown error = %v; want ErrClosed", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown() error = %v; want nil", err)
	}
}

func TestStartErrors(t *testing.T) {
	s := ops.NewServer("127.0.0.1:0", nil, nil, discardLogger())
	addr, err := s.Start()
	if err != nil {
		t.Fatalf("Start() error = %v", err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	if _, err := s.Start(); !errors.Is(err, ops.ErrStarted) {
		t.Errorf("second Start() error = %v; want ErrStarted", err)
	}

	busy := ops.NewServer(addr, nil, nil, discardLogger())
	if _, err := busy.Start(); err == nil || errors.Is(err, ops.ErrStarted) || !strings.HasPrefix(err.Error(), "ops: listen") {
		t.Errorf("Start() on a busy port error = %v; want an ops: listen error", err)
	}
	// A failed Start leaves the server startable and Shutdown harmless.
	if err := busy.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown() after a failed Start error = %v", err)
	}

	if _, err := ops.NewServer("", nil, nil, discardLogger()).Start(); err == nil {
		t.Errorf("Start() with an empty address error = nil; want an error")
	}

	never := ops.NewServer("127.0.0.1:0", nil, nil, discardLogger())
	if err := never.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown() of a server never started error = %v; want nil", err)
	}
	if _, err := never.Start(); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("Start() after Shutdown error = %v; want ErrClosed", err)
	}
}

// startBlockedReady starts a server whose readiness check, once called,
// closes entered and waits for release to close.
func startBlockedReady(t *testing.T) (s *ops.Server, addr string, entered, release chan struct{}) {
	t.Helper()
	entered, release = make(chan struct{}), make(chan struct{})
	ready := func() error {
		close(entered)
		<-release
		return nil
	}
	s = ops.NewServer("127.0.0.1:0", nil, ready, discardLogger())
	addr, err := s.Start()
	if err != nil {
		t.Fatalf("Start() error = %v", err)
	}
	return s, addr, entered, release
}

// A request in progress finishes during a graceful shutdown.
func TestShutdownWaitsForRequest(t *testing.T) {
	s, addr, entered, release := startBlockedReady(t)
	type answer struct {
		code int
		body string
		err  error
	}
	got := make(chan answer, 1)
	go func() { // not get: t.Fatal belongs to the test goroutine
		resp, err := client.Get("http://" + addr + "/readyz")
		if err != nil {
			got <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- answer{resp.StatusCode, string(b), err}
	}()
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	close(release)
	if err := <-shut; err != nil {
		t.Errorf("Shutdown() error = %v", err)
	}
	if a := <-got; a.err != nil || a.code != 200 || a.body != "ok\n" {
		t.Errorf("GET /readyz during Shutdown = %d %q, %v; want 200 \"ok\\n\"", a.code, a.body, a.err)
	}
}

// When ctx ends first, Shutdown closes the connections and returns ctx's
// error.
func TestShutdownDeadline(t *testing.T) {
	s, addr, entered, release := startBlockedReady(t)
	failed := make(chan error, 1)
	go func() {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		failed <- err
	}()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown(canceled ctx) error = %v; want context.Canceled", err)
	}
	if err := <-failed; err == nil {
		t.Errorf("GET /readyz cut by Shutdown: error = nil; want a connection error")
	}
	close(release) // let the handler return, so no goroutine is left
}
