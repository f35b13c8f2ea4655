package dedupe

import (
	"errors"
	"fmt"
	"net/textproto"
	"slices"
)

// ErrMissingHeader is wrapped by the error HeaderIntent returns when a
// header the spec names is absent or empty on the message, and by the
// error RunIntent returns for a spec that names headers.
var ErrMissingHeader = errors.New("dedupe: key header missing")

// headerKeyDomain replaces keyDomain for a spec with headers, so that no
// key of such a spec can coincide with a key of a spec without, whatever
// the bytes that follow.
const headerKeyDomain = keyDomain + "+headers"

func (k *Keyer) domain() string {
	if len(k.headers) > 0 {
		return headerKeyDomain
	}
	return keyDomain
}

// parseHeaders checks and canonicalizes the spec's header names.
func (k *Keyer) parseHeaders() error {
	for _, h := range k.spec.Headers {
		if !validToken(h) {
			return fmt.Errorf("%w: header %q is not a header name", ErrInvalidKeySpec, h)
		}
		c := textproto.CanonicalMIMEHeaderKey(h)
		if slices.Contains(k.headers, c) {
			return fmt.Errorf("%w: header %q is named twice", ErrInvalidKeySpec, h)
		}
		k.headers = append(k.headers, c)
	}
	return nil
}

// HeaderIntent derives the intent of payload within run runID (ignored
// unless the spec is PerRun), with the value of each of the spec's
// headers, read through header by its canonical name (nats.Header.Get and
// http.Header.Get fit). A header that is absent or empty is an error
// wrapping ErrMissingHeader. The fingerprint is the payload's alone, as
// with RunIntent.
//
// A consumer keys a webhook that came through the ingress with, say,
// Headers: []string{"Oncegate-Event"}: two deliveries of the same payload
// for different event types are then different work.
func (k *Keyer) HeaderIntent(runID string, header func(name string) string, payload []byte) (Intent, error) {
	if header == nil {
		header = func(string) string { return "" }
	}
	return k.intent(runID, header, payload)
}

// validToken reports whether s is an HTTP header name (an RFC 9110 token).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '!' || c == '#' || c == '$' || c == '%' || c == '&' || c == '\'' || c == '*' ||
			c == '+' || c == '-' || c == '.' || c == '^' || c == '_' || c == '`' || c == '|' || c == '~') {
			return false
		}
	}
	return true
}
