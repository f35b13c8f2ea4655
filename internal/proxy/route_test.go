package proxy_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/standin"
)

// TestPathEscape: an authenticated client cannot reach any provider route
// but the proxy's own: a request path with a dot segment (plain or
// percent-encoded), an encoded '/', '?', '#' or '\', an empty segment, a
// ';' or a model id outside the id grammar is answered 400 and nothing is
// sent; the model routes reach the provider at /v1/models and
// /v1/models/{id} exactly, without the client's query.
func TestPathEscape(t *testing.T) {
	p := serveProvider(t, standinModel(t, standin.Options{}))
	url, _ := start(t, config.Proxy{}, badgerCache(t), p.url)
	for _, target := range []string{
		"/v1/models/../files",
		"/v1/models/%2e%2e/files",
		"/v1/models/%2E%2E/files",
		"/v1/models/x%3Fafter=y",
		"/v1/models/x%23y",
		"/v1/models/a%2Fb",
		"/v1/models/a%2fb",
		"/v1/models/%2e%2e%2Ffiles",
		"/v1/models/..%2Ffiles",
		"/v1/models/..%5Cfiles",
		"/v1/models/a%5Cb",
		"/v1/models/a\\b",
		"/v1/models/..;/files",
		"/v1/models/.",
		"/v1/models/./",
		"/v1/models//files",
		"/v1/models/",
		"/v1//models",
		"/v1/models/x/y",
		"/v1/models/%252e%252e",
		"/v1/models/%E2%80%A5",          // ‥ two dot leader
		"/v1/models/%EF%BC%8E%EF%BC%8E", // fullwidth full stops
		"/v1/models/a%00b",
		"/v1/models/.hidden",
		"/v1/models/" + strings.Repeat("m", 257),
		"/v1/chat/../models",
		"/v1/chat/completions/../../files",
		"/v1/x/../chat/completions",
		"/v1/chat%2Fcompletions",
	} {
		st, b := raw(t, url, http.MethodGet, target, aliceKey, "")
		typ, code, _ := errorOf(b)
		if got := p.got(); st != http.StatusBadRequest || typ != "invalid_request_error" || len(got) != 0 {
			t.Errorf("GET %s: %d %s, the provider got %q; want 400 invalid_request_error and nothing sent", target, st, code, got)
		}
	}
	for _, tt := range []struct{ target, want string }{
		{"/v1/models", "GET /v1/models"},
		{"/v1/models?after=gpt-4o&limit=1", "GET /v1/models"},
		{"/v1/models/gpt-4o-mini", "GET /v1/models/gpt-4o-mini"},
		{"/v1/models/gpt%2D4o?x=1", "GET /v1/models/gpt-4o"},
		{"/v1/models/ft:gpt-4o-mini:acme::A1b2C3", "GET /v1/models/ft:gpt-4o-mini:acme::A1b2C3"},
		{"/v1/models/llama3:8b", "GET /v1/models/llama3:8b"},
		{"/v1/models/claude-3-5-sonnet@20240620", "GET /v1/models/claude-3-5-sonnet@20240620"},
	} {
		raw(t, url, http.MethodGet, tt.target, aliceKey, "")
		if got := p.got(); len(got) != 1 || got[0] != tt.want {
			t.Errorf("GET %s: the provider got %q; want %q", tt.target, got, tt.want)
		}
	}
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	if st, b := raw(t, url, http.MethodPost, "/v1/chat/completions?api-version=x&after=y", aliceKey, body); st != http.StatusOK {
		t.Errorf("POST /v1/chat/completions?...: %d %s", st, b)
	}
	if got := p.got(); len(got) != 1 || got[0] != "POST /v1/chat/completions" {
		t.Errorf("POST /v1/chat/completions?...: the provider got %q; want POST /v1/chat/completions alone", got)
	}
}
