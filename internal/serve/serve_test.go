package serve

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"
)

func TestListenAddr(t *testing.T) {
	for in, want := range map[string]string{
		":8080":         "127.0.0.1:8080",
		"0.0.0.0:8080":  "0.0.0.0:8080",
		"[::]:8080":     "[::]:8080",
		"10.0.0.5:9000": "10.0.0.5:9000",
	} {
		if got := ListenAddr(in); got != want {
			t.Errorf("ListenAddr(%q) = %q; want %q", in, got, want)
		}
	}
}

// TestStartShutdown serves a request, then checks that a request in
// progress when Shutdown begins is answered in full, and that the address
// refuses connections afterwards.
func TestStartShutdown(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "ok")
	})
	s, addr, err := Start(&http.Server{Handler: h}, ":0", "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (string, error) {
		r, err := http.Get("http://" + addr + path)
		if err != nil {
			return "", err
		}
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		return string(b), err
	}
	if body, err := get("/"); err != nil || body != "ok" {
		t.Fatalf("GET /: %q, %v", body, err)
	}
	slow := make(chan error, 1)
	go func() {
		body, err := get("/slow")
		if err == nil && body != "ok" {
			err = io.ErrUnexpectedEOF
		}
		slow <- err
	}()
	<-started
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	// Once Shutdown has closed the listener, release the request: it must
	// still be answered in full.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := get("/"); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the listener still answered 10s into Shutdown")
		}
	}
	close(release)
	if err := <-slow; err != nil {
		t.Errorf("the request in progress: %v", err)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if _, err := get("/"); err == nil {
		t.Error("a request after Shutdown was answered")
	}
	if err := (*Server)(nil).Shutdown(context.Background()); err != nil {
		t.Errorf("nil Server's Shutdown: %v", err)
	}
}
