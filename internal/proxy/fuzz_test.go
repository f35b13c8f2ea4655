package proxy_test

import (
	"bufio"
	"bytes"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/proxy"
	"github.com/oncegate/oncegate/internal/standin"
)

// wire is an upstream transport that carries each request to h as a
// server would get it (written out and read back), and records what h
// got.
type wire struct {
	h  http.Handler
	mu sync.Mutex
	// got are the requests h got, as "METHOD request-target".
	got []string
}

func (w *wire) RoundTrip(req *http.Request) (*http.Response, error) {
	var b bytes.Buffer
	if err := req.Write(&b); err != nil {
		return nil, err
	}
	sreq, err := http.ReadRequest(bufio.NewReader(&b))
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.got = append(w.got, sreq.Method+" "+sreq.RequestURI)
	w.mu.Unlock()
	rec := httptest.NewRecorder()
	w.h.ServeHTTP(rec, sreq)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

func (w *wire) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.got
	w.got = nil
	return out
}

// modelID is the grammar of a model id the proxy forwards in
// /v1/models/{id} (docs/llm.md).
var modelID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,255}$`)

// FuzzProxyRoute drives the proxy's handler with any method, request
// target and raw path from an authenticated client. The property a
// provider account's owner needs: nothing reaches the provider but
// GET /v1/models, GET /v1/models/{id} with id the one segment the client
// named and valid in the id grammar, and POST /v1/chat/completions, never
// with a query the client chose; and the handler never panics.
func FuzzProxyRoute(f *testing.F) {
	for _, s := range []struct{ method, target, rawPath string }{
		{"GET", "/v1/models", ""},
		{"GET", "/v1/models/gpt-4o-mini", ""},
		{"GET", "/v1/models/ft:gpt-4o-mini:acme::A1b2C3", ""},
		{"POST", "/v1/chat/completions", ""},
		{"POST", "/v1/chat/completions?api-version=1", ""},
		{"GET", "/v1/models/../files", ""},
		{"GET", "/v1/models/%2e%2e/files", ""},
		{"GET", "/v1/models/x%3Fafter=y", ""},
		{"GET", "/v1/models/x%23y", ""},
		{"GET", "/v1/models/a%2Fb", ""},
		{"GET", "/v1/models/..%5Cfiles", ""},
		{"GET", "/v1/models/a\\b", ""},
		{"GET", "/v1/models/..;/files", ""},
		{"GET", "/v1/models//files", ""},
		{"GET", "//v1/models", ""},
		{"GET", "/v1/models/%252e%252e", ""},
		{"GET", "/v1/models/%E2%80%A5", ""},
		{"GET", "/v1/models/%EF%BC%8E%EF%BC%8E", ""},
		{"GET", "/v1/models?after=x", ""},
		{"GET", "http://evil.example/v1/models/../files", ""},
		{"GET", "/v1/models/x", "/v1/models/..%2Ffiles"},
		{"GET", "/v1/models/files", "/v1/models/%2e%2e/files"},
		{"POST", "/v1/chat/completions", "/v1/chat%2Fcompletions"},
		{"DELETE", "/v1/models/gpt-4o-mini", ""},
		{"OPTIONS", "*", ""},
	} {
		f.Add(s.method, s.target, s.rawPath)
	}
	m, err := standin.New(standin.Options{Models: []string{"gpt-4o-mini"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Close() })
	up := &wire{h: m}
	cfg := config.Proxy{MaxBodyBytes: config.DefaultProxyMaxBody}
	srv, err := proxy.New(proxy.Options{Config: &cfg, Keys: keysFile(f), Cache: badgerCache(f), Upstream: up,
		BaseURL: "http://provider.example/v1", APIKey: "sk-provider", Prices: prices})
	if err != nil {
		f.Fatal(err)
	}
	const body = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	f.Fuzz(func(t *testing.T, method, target, rawPath string) {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + target + " HTTP/1.1\r\nHost: proxy.example\r\n" +
			"Authorization: Bearer " + aliceKey + "\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)))
		if err != nil {
			return // a server answers 400 before any handler
		}
		if rawPath != "" {
			req.URL.RawPath = rawPath // as a handler mounted under a rewriting one may see it
		}
		srv.ServeHTTP(httptest.NewRecorder(), req)
		for _, g := range up.take() {
			if strings.ContainsAny(g, "?#") {
				t.Fatalf("%s %s (raw path %q) reached the provider as %q, with a query", method, target, rawPath, g)
			}
			switch {
			case g == "GET /v1/models", g == "POST /v1/chat/completions":
			case strings.HasPrefix(g, "GET /v1/models/"):
				id := strings.TrimPrefix(g, "GET /v1/models/")
				if !modelID.MatchString(id) || req.URL.Path != "/v1/models/"+id {
					t.Fatalf("%s %s (raw path %q) reached the provider as %q", method, target, rawPath, g)
				}
			default:
				t.Fatalf("%s %s (raw path %q) reached the provider as %q", method, target, rawPath, g)
			}
		}
	})
}
