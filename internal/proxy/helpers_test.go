package proxy_test

// The proxy's door: a client key is trusted with chat completions, never
// with the provider account. These tests hold the lines of docs/security.md
// for the proxy.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/standin"
)

// provider serves h over HTTP as the proxy's provider, recording the
// target of every request it gets, as it came on the wire; it returns its
// base URL (".../v1").
type provider struct {
	mu      sync.Mutex
	targets []string // "METHOD request-target"
	url     string
}

func serveProvider(t *testing.T, h http.Handler) *provider {
	t.Helper()
	p := &provider{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.targets = append(p.targets, r.Method+" "+r.RequestURI)
		p.mu.Unlock()
		h.ServeHTTP(w, r)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	p.url = "http://" + ln.Addr().String() + "/v1"
	return p
}

// got returns the targets the provider got, and forgets them.
func (p *provider) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.targets
	p.targets = nil
	return out
}

// standinModel returns a stand-in model listing gpt-4o-mini and gpt-4o.
func standinModel(t *testing.T, opts standin.Options) *standin.Server {
	t.Helper()
	opts.Models = []string{"gpt-4o-mini", "gpt-4o"}
	m, err := standin.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// raw sends one request to the proxy at base (".../v1") as written, with
// target as the request line's target, and returns the status and body.
func raw(t *testing.T, base, method, target, key, body string) (int, []byte) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		method, target, u.Host, key, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// errorOf decodes an OpenAI-format error body.
func errorOf(b []byte) (typ, code, msg string) {
	var e struct {
		Error struct{ Type, Code, Message string }
	}
	json.Unmarshal(b, &e)
	return e.Error.Type, e.Error.Code, e.Error.Message
}
