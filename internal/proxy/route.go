package proxy

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ErrPath is wrapped by the error for a request path the proxy will not
// route: one that holds a dot segment, an empty segment, an encoded '/',
// '?', '#' or '%', a '\', a ';' or a control character (plain or
// percent-encoded), or a model id outside the id grammar (see
// [ValidModelID]). Such a request is answered 400 and nothing is sent to
// the provider: a provider that normalises its paths could read it as
// another route of the provider account.
var ErrPath = errors.New("proxy: request path refused")

// routeKind is an upstream route the proxy forwards to.
type routeKind int

const (
	routeNone   routeKind = iota // none: answered 404
	routeChat                    // POST {base}/chat/completions
	routeModels                  // GET {base}/models
	routeModel                   // GET {base}/models/{id}
)

// route is where a request goes: its upstream route and, for
// routeModel, the model id.
type route struct {
	kind routeKind
	id   string
}

// maxModelID is the longest model id the proxy forwards.
const maxModelID = 256

// ValidModelID reports whether id is a model id the proxy forwards in
// GET /v1/models/{id}: 1 to 256 ASCII letters, digits, '.', '_', ':', '@'
// and '-', starting with a letter or a digit. That covers the ids of
// OpenAI ("gpt-4o-mini-2024-07-18", fine-tunes such as
// "ft:gpt-4o-mini:acme::A1b2C3"), Azure deployments, Ollama
// ("llama3:8b"), Vertex ("claude-3-5-sonnet@20240620") and Bedrock
// ("anthropic.claude-3-5-sonnet-20240620-v1:0"). An id with a '/' (a
// Hugging Face repository served by vLLM, an OpenRouter slug) is not one:
// a provider cannot tell it from a route under the model's, so it is
// refused; such models are still listed by GET /v1/models and served by
// chat completions.
func ValidModelID(id string) bool {
	if id == "" || len(id) > maxModelID || !alnum(id[0]) {
		return false
	}
	for i := 1; i < len(id); i++ {
		if c := id[i]; !alnum(c) && c != '.' && c != '_' && c != ':' && c != '@' && c != '-' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' }

// routeOf returns where the request for u goes. It reads the path as the
// client sent it (EscapedPath), so that an encoded '/' is told from a
// plain one, and decodes each segment on its own; the query is never
// read, and never forwarded. It returns an error wrapping ErrPath for a
// path it refuses.
func routeOf(u *url.URL) (route, error) {
	esc := u.EscapedPath()
	if esc == "/" || !strings.HasPrefix(esc, "/") { // "*", an authority
		return route{}, nil
	}
	segs := strings.Split(esc[1:], "/")
	for i, seg := range segs {
		d, err := url.PathUnescape(seg)
		if err != nil {
			return route{}, fmt.Errorf("%w: %q is not a valid percent-encoding", ErrPath, esc)
		}
		if why := badSegment(d); why != "" {
			return route{}, fmt.Errorf("%w: %q %s", ErrPath, esc, why)
		}
		segs[i] = d
	}
	if segs[0] != "v1" {
		return route{}, nil
	}
	switch {
	case len(segs) == 3 && segs[1] == "chat" && segs[2] == "completions":
		return route{kind: routeChat}, nil
	case len(segs) == 2 && segs[1] == "models":
		return route{kind: routeModels}, nil
	case len(segs) == 3 && segs[1] == "models":
		if !ValidModelID(segs[2]) {
			return route{}, fmt.Errorf("%w: %q is not a model id the proxy forwards (1 to %d ASCII letters, digits, '.', '_', ':', '@' and '-', starting with a letter or a digit)", ErrPath, segs[2], maxModelID)
		}
		return route{kind: routeModel, id: segs[2]}, nil
	case len(segs) > 3 && segs[1] == "models":
		return route{}, fmt.Errorf("%w: %q is not a model id the proxy forwards: an id of more than one segment (with a '/') cannot be told from another route", ErrPath, strings.Join(segs[2:], "/"))
	}
	return route{}, nil
}

// badSegment says what is wrong with a decoded path segment, or "".
func badSegment(s string) string {
	switch s {
	case "":
		return "has an empty segment"
	case ".", "..":
		return "has a dot segment"
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '/':
			return "has an encoded '/' in a segment"
		case c == '\\':
			return "has a '\\'"
		case c == '?', c == '#':
			return fmt.Sprintf("has an encoded '%c'", c)
		case c == '%':
			return "has an encoded '%' (a double encoding)"
		case c == ';':
			return "has a ';'"
		case c < 0x20 || c == 0x7f:
			return "has a control character"
		}
	}
	return ""
}
