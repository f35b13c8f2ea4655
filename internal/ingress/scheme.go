package ingress

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strings"

	"github.com/oncegate/oncegate/internal/ingress/spec"
	"github.com/oncegate/oncegate/pkg/canon"
)

// scheme is a source's configuration compiled for requests: how a request
// is authenticated and where its ids come from. It is read-only once
// built, and shared by the source's requests.
type scheme struct {
	auth        string // spec.Auth*
	user        string // basic
	tokenHeader string // token

	// The signature, when auth is spec.AuthSignature.
	alg            string
	newHash        func() hash.Hash // nil for ed25519
	size           int              // bytes of one signature
	enc            encoding
	header         string // canonical
	prefix         string
	prefixOptional bool
	sep            string
	parts          []spec.Part
	ts             spec.From // Kind 0: no timestamp
	tsMillis       bool
	publicURL      string
	secretEncoding string

	delivery  []spec.From
	event     []spec.From
	copy      []string // header names, as configured
	handshake spec.Handshake
	echo      canon.Pointer
	form      bool
	payload   string // the form field with the JSON payload
	split     bool
}

// encoding writes and reads signatures.
type encoding struct {
	name   string
	decode func(string) ([]byte, error)
	encode func([]byte) string
}

var encodings = map[string]encoding{
	spec.Hex: {spec.Hex, hex.DecodeString, hex.EncodeToString},
	spec.Base64: {spec.Base64, func(s string) ([]byte, error) {
		// Some senders drop the padding; accept both.
		if b, err := base64.StdEncoding.Strict().DecodeString(s); err == nil {
			return b, nil
		}
		return base64.RawStdEncoding.Strict().DecodeString(s)
	}, base64.StdEncoding.EncodeToString},
	spec.Base64URL: {spec.Base64URL, func(s string) ([]byte, error) {
		if b, err := base64.URLEncoding.Strict().DecodeString(s); err == nil {
			return b, nil
		}
		return base64.RawURLEncoding.Strict().DecodeString(s)
	}, base64.RawURLEncoding.EncodeToString},
}

// compile builds the scheme of the resolved source r.
func compile(r spec.Source) (*scheme, error) {
	sc := &scheme{auth: r.Auth, user: r.User, tokenHeader: http.CanonicalHeaderKey(r.TokenHeader),
		publicURL: strings.TrimSuffix(r.PublicURL, "/"), form: r.Form, payload: r.FormPayload,
		split: r.Split == spec.SplitAlertmanager, handshake: r.Handshake}
	if !contains(spec.Auths, sc.auth) {
		return nil, fmt.Errorf("auth %q is not one of %s", sc.auth, strings.Join(spec.Auths, ", "))
	}
	if sc.auth == spec.AuthToken && sc.tokenHeader == "" {
		return nil, errors.New("auth: token needs token_header")
	}
	if r.Split != "" && !sc.split {
		return nil, fmt.Errorf("split %q is not alertmanager", r.Split)
	}
	if sc.auth == spec.AuthSignature {
		if err := sc.compileSignature(&r.Signature); err != nil {
			return nil, err
		}
	}
	var err error
	if sc.delivery, err = froms(r.Delivery); err != nil {
		return nil, fmt.Errorf("delivery: %w", err)
	}
	if sc.event, err = froms(r.Event); err != nil {
		return nil, fmt.Errorf("event: %w", err)
	}
	if len(sc.delivery) == 0 && !sc.split {
		return nil, errors.New("no delivery id: set delivery")
	}
	for _, h := range r.CopyHeaders {
		if !spec.ValidHeaderName(h) {
			return nil, fmt.Errorf("copy_headers: %q is not a header name", h)
		}
		sc.copy = append(sc.copy, h) // NATS headers are case-sensitive: as configured
	}
	if r.Handshake.Echo != "" {
		if sc.echo, err = canon.ParsePointer(r.Handshake.Echo); err != nil {
			return nil, fmt.Errorf("handshake.echo: %w", err)
		}
	}
	return sc, nil
}

func (sc *scheme) compileSignature(sig *spec.Signature) error {
	sc.alg = sig.Algorithm
	switch sig.Algorithm {
	case spec.HMACSHA256:
		sc.newHash = sha256.New
	case spec.HMACSHA1:
		sc.newHash = sha1.New
	case spec.HMACSHA512:
		sc.newHash = sha512.New
	case spec.Ed25519:
	default:
		return fmt.Errorf("signature.algorithm %q is not one of hmac-sha256, hmac-sha1, hmac-sha512, ed25519", sig.Algorithm)
	}
	sc.size = spec.SignatureSize(sig.Algorithm)
	enc, ok := encodings[sig.Encoding]
	if !ok {
		return fmt.Errorf("signature.encoding %q is not one of hex, base64, base64url", sig.Encoding)
	}
	sc.enc = enc
	if !spec.ValidHeaderName(sig.Header) {
		return fmt.Errorf("signature.header %q is not a header name", sig.Header)
	}
	sc.header = http.CanonicalHeaderKey(sig.Header)
	sc.prefix, sc.prefixOptional, sc.sep = sig.Prefix, sig.PrefixOptional, sig.Separator
	sc.secretEncoding = sig.SecretEncoding
	var err error
	if sc.parts, err = spec.ParseTemplate(sig.Signed); err != nil {
		return err
	}
	if spec.Has(sc.parts, spec.URL) && sc.publicURL == "" {
		return errors.New("a signature over {url} needs public_url")
	}
	if sig.Timestamp != "" {
		if sc.ts, err = spec.ParseFrom(sig.Timestamp); err != nil {
			return fmt.Errorf("signature.timestamp: %w", err)
		}
		if sc.ts.Kind == spec.FromSignature && sc.sep == "" {
			return errors.New("signature.timestamp: a timestamp in the signature header needs a separator")
		}
		sc.tsMillis = sig.TimestampUnit == spec.Milliseconds
	} else if spec.Has(sc.parts, spec.Timestamp) {
		return errors.New("the signed string has {timestamp}, and signature.timestamp is not set")
	}
	return nil
}

func froms(list []string) ([]spec.From, error) {
	out := make([]spec.From, 0, len(list))
	for _, s := range list {
		f, err := spec.ParseFrom(s)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// signs reports whether the scheme checks a signature.
func (sc *scheme) signs() bool { return sc.auth == spec.AuthSignature }

// covered reports whether a value from f is the provider's word (see
// spec.Covered).
func (sc *scheme) covered(f spec.From, delivery bool) bool {
	return spec.Covered(sc.parts, f, delivery)
}
