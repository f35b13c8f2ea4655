// Package spec describes how the webhook ingress verifies a source and
// reads its ids, as data: the signature scheme (algorithm, encoding,
// header, prefix, the signed string as a template), the credentials of a
// source that does not sign, where the delivery id and the event type come
// from, and the presets of the providers Oncegate knows.
//
// A [Source] is one sender as it is configured; [Source.Resolved] fills
// in its kind's preset, and is what the ingress runs; [Source.Validate]
// checks it as the ingress will run it. The configuration reads sources
// into this type (config.Source is an alias of it) and validates them with
// Validate, and the ingress takes them as they are.
//
// It is a leaf (the standard library and pkg/canon), so that the
// configuration validates and explains a source by the same rules the
// ingress runs.
//
// # The signed string
//
// A template over placeholders, the rest taken literally:
//
//	{body}          the request body, as received
//	{timestamp}     the signed timestamp, as received (see Signature.Timestamp)
//	{id}            the delivery id (see Source.Delivery)
//	{url}           the URL the provider called: the source's public URL, then the path and query
//	{form}          a form body's parameters sorted by name, each name followed by its value;
//	                for a body that is not a form, nothing, and the URL's bodySHA256
//	                parameter must be the body's hex SHA-256
//	{header:Name}   the value of the request header Name
//
// "{{" stands for a literal "{".
//
// # Where a value comes from
//
// A delivery id, an event type or a timestamp is taken from the first of a
// list of places that has it, each written as one of:
//
//	header:Name     a request header
//	body:/pointer   a JSON Pointer (RFC 6901) into the published body
//	digest          "sha256-" and the hex SHA-256 of the body (delivery ids only)
//	signature:t=    the element of the signature header after this prefix (timestamps only)
//
// A value from the body is a function of the body; a value from a header is
// the request's word unless the signed string names that header (or it is
// the delivery id and the template has {id}). The ingress binds a delivery
// id or event type that is the request's word to a digest of the body, so
// that an old signed body sent under a new delivery id cannot take the new
// delivery's place.
package spec

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/oncegate/oncegate/pkg/canon"
)

// Signature algorithms.
const (
	HMACSHA256 = "hmac-sha256"
	HMACSHA1   = "hmac-sha1"
	HMACSHA512 = "hmac-sha512"
	// Ed25519 verifies with the provider's public key, which is the
	// source's secret.
	Ed25519 = "ed25519"
)

// Signature encodings.
const (
	Hex       = "hex"
	Base64    = "base64"
	Base64URL = "base64url"
)

// Secret encodings: how the secret's text is turned into the key.
const (
	// SecretText uses the secret's bytes as they are.
	SecretText = "text"
	// SecretBase64 decodes standard base64.
	SecretBase64 = "base64"
	// SecretHex decodes hex.
	SecretHex = "hex"
	// SecretWhsec decodes base64 after an optional "whsec_" or "whpk_"
	// prefix, as Standard Webhooks write secrets and public keys.
	SecretWhsec = "whsec"
)

// Authentication of a source.
const (
	// AuthSignature verifies the signature the source's scheme describes.
	AuthSignature = "signature"
	// AuthToken compares a header (TokenHeader) with the secret.
	AuthToken = "token"
	// AuthBearer compares an Authorization bearer token with the secret.
	AuthBearer = "bearer"
	// AuthBasic checks Authorization basic credentials: the source's user
	// and the secret as the password.
	AuthBasic = "basic"
	// AuthNone accepts unsigned requests.
	AuthNone = "none"
)

// Auths lists the authentication settings.
var Auths = []string{AuthSignature, AuthToken, AuthBearer, AuthBasic, AuthNone}

// Timestamp units.
const (
	Seconds      = "s"
	Milliseconds = "ms"
)

// SplitAlertmanager splits an Alertmanager (or Grafana) notification into
// one trigger per alert.
const SplitAlertmanager = "alertmanager"

// Signature describes how a provider signs its requests. The zero value of
// each field is its default, except Header, which a signing source needs.
type Signature struct {
	// Algorithm is HMACSHA256, HMACSHA1, HMACSHA512 or Ed25519. The default
	// is hmac-sha256.
	Algorithm string `yaml:"algorithm"`
	// Encoding is how a signature is written: Hex, Base64 or Base64URL.
	// The default is hex.
	Encoding string `yaml:"encoding"`
	// Header is the request header that carries the signature.
	Header string `yaml:"header"`
	// Prefix comes before each signature ("sha256=", "v1=", "v0=", "v1,").
	Prefix string `yaml:"prefix"`
	// PrefixOptional accepts a signature without its Prefix as well.
	PrefixOptional bool `yaml:"prefix_optional"`
	// Separator splits a header that carries several elements (several
	// signatures during a rotation, a timestamp): "," or " " (any run of
	// spaces). An element that is not Prefix followed by a well-formed
	// signature is skipped. Empty (the default): the header is one
	// signature.
	Separator string `yaml:"separator"`
	// Signed is the signed string, a template (see the package
	// documentation). The default is "{body}".
	Signed string `yaml:"signed"`
	// Timestamp is where the signed timestamp is: "header:Name",
	// "body:/pointer" or "signature:t=". Empty: none. A timestamp is
	// checked against the ingress's tolerance, and must be covered by the
	// signature.
	Timestamp string `yaml:"timestamp"`
	// TimestampUnit is Seconds or Milliseconds since the Unix epoch. The
	// default is s.
	TimestampUnit string `yaml:"timestamp_unit"`
	// SecretEncoding is how the secret's text becomes the key: SecretText,
	// SecretBase64, SecretHex or SecretWhsec. The default is text (for
	// ed25519, whsec).
	SecretEncoding string `yaml:"secret_encoding"`
}

// Handshake is a request a provider sends to check the endpoint, answered
// 200 without a trigger.
type Handshake struct {
	// Event is the event type of the handshake ("ping", "url_verification").
	Event string `yaml:"event"`
	// Echo, optional, is a JSON Pointer into the body whose value the answer
	// carries back as {"challenge": value}.
	Echo string `yaml:"echo"`
}

// SignatureSize is the length of a signature of the algorithm, or 0 for an
// unknown one.
func SignatureSize(alg string) int {
	switch alg {
	case HMACSHA256, "":
		return 32
	case HMACSHA1:
		return 20
	case HMACSHA512:
		return 64
	case Ed25519:
		return 64
	}
	return 0
}

// AlgorithmName names an algorithm in messages: "HMAC-SHA256", "Ed25519".
func AlgorithmName(alg string) string {
	switch alg {
	case "", HMACSHA256:
		return "HMAC-SHA256"
	case HMACSHA1:
		return "HMAC-SHA1"
	case HMACSHA512:
		return "HMAC-SHA512"
	case Ed25519:
		return "Ed25519"
	}
	return alg
}

// PartKind is the kind of one piece of a signed-string template.
type PartKind int

// The kinds of template parts.
const (
	Literal PartKind = iota
	Body
	Timestamp
	ID
	URL
	Form
	Header
)

// Part is one piece of a signed-string template: literal text, or a
// placeholder (Text is the header's name for Header).
type Part struct {
	Kind PartKind
	Text string
}

// ErrTemplate is wrapped by the errors of ParseTemplate.
var ErrTemplate = errors.New("spec: bad signed-string template")

// ParseTemplate parses a signed-string template. The empty template is
// "{body}".
func ParseTemplate(s string) ([]Part, error) {
	if s == "" {
		return []Part{{Kind: Body}}, nil
	}
	var parts []Part
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			parts = append(parts, Part{Kind: Literal, Text: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '{' {
			if c == '}' {
				if i+1 < len(s) && s[i+1] == '}' {
					i++
				}
			}
			lit.WriteByte(c)
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			lit.WriteByte('{')
			i++
			continue
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return nil, fmt.Errorf("%w: %q has a { without its }", ErrTemplate, s)
		}
		name := s[i+1 : i+end]
		i += end
		flush()
		switch {
		case name == "body":
			parts = append(parts, Part{Kind: Body})
		case name == "timestamp":
			parts = append(parts, Part{Kind: Timestamp})
		case name == "id":
			parts = append(parts, Part{Kind: ID})
		case name == "url":
			parts = append(parts, Part{Kind: URL})
		case name == "form":
			parts = append(parts, Part{Kind: Form})
		case strings.HasPrefix(name, "header:"):
			h := strings.TrimPrefix(name, "header:")
			if !ValidHeaderName(h) {
				return nil, fmt.Errorf("%w: {%s}: %q is not an HTTP header name", ErrTemplate, name, h)
			}
			parts = append(parts, Part{Kind: Header, Text: h})
		default:
			return nil, fmt.Errorf("%w: unknown placeholder {%s}; the placeholders are {body}, {timestamp}, {id}, {url}, {form} and {header:Name}", ErrTemplate, name)
		}
	}
	flush()
	return parts, nil
}

// Has reports whether parts has a part of kind k.
func Has(parts []Part, k PartKind) bool {
	return slices.ContainsFunc(parts, func(p Part) bool { return p.Kind == k })
}

// NamesHeader reports whether parts has {header:h}.
func NamesHeader(parts []Part, h string) bool {
	return slices.ContainsFunc(parts, func(p Part) bool { return p.Kind == Header && strings.EqualFold(p.Text, h) })
}

// FromKind is where a value comes from.
type FromKind int

// The places a value comes from.
const (
	FromHeader FromKind = iota + 1
	FromBody
	FromDigest
	FromSignature
)

// From is a parsed place a value comes from (see the package
// documentation).
type From struct {
	Kind FromKind
	// Name is the header's name as written (FromHeader), the pointer's text
	// (FromBody) or the element prefix (FromSignature).
	Name string
	// Pointer is the parsed pointer of a FromBody.
	Pointer canon.Pointer
}

// String writes f as it is configured.
func (f From) String() string {
	switch f.Kind {
	case FromHeader:
		return "header:" + f.Name
	case FromBody:
		return "body:" + f.Name
	case FromDigest:
		return "digest"
	case FromSignature:
		return "signature:" + f.Name
	}
	return ""
}

// Describe words f for people: "the X-GitHub-Delivery header", "the body's
// /event/id".
func (f From) Describe() string {
	switch f.Kind {
	case FromHeader:
		return "the " + f.Name + " header"
	case FromBody:
		return "the body's " + f.Name
	case FromDigest:
		return "the body's SHA-256"
	case FromSignature:
		return "the signature header's " + f.Name + " element"
	}
	return ""
}

// ErrFrom is wrapped by the errors of ParseFrom.
var ErrFrom = errors.New("spec: bad value source")

// ParseFrom parses "header:Name", "body:/pointer", "digest" or
// "signature:prefix".
func ParseFrom(s string) (From, error) {
	kind, rest, _ := strings.Cut(s, ":")
	switch kind {
	case "header":
		if !ValidHeaderName(rest) {
			return From{}, fmt.Errorf("%w: %q: %q is not an HTTP header name", ErrFrom, s, rest)
		}
		return From{Kind: FromHeader, Name: rest}, nil
	case "body":
		p, err := canon.ParsePointer(rest)
		if err != nil || rest == "" {
			return From{}, fmt.Errorf("%w: %q: %q is not a JSON Pointer to a member (such as /event/id)", ErrFrom, s, rest)
		}
		return From{Kind: FromBody, Name: rest, Pointer: p}, nil
	case "digest":
		if rest != "" || strings.Contains(s, ":") {
			return From{}, fmt.Errorf("%w: %q: digest takes nothing after it", ErrFrom, s)
		}
		return From{Kind: FromDigest}, nil
	case "signature":
		if rest == "" {
			return From{}, fmt.Errorf("%w: %q: signature: needs the element's prefix, such as signature:t=", ErrFrom, s)
		}
		return From{Kind: FromSignature, Name: rest}, nil
	}
	return From{}, fmt.Errorf("%w: %q is not header:Name, body:/pointer, digest or signature:prefix", ErrFrom, s)
}

// Covered reports whether a value taken from f is covered by a signature
// over parts: the value is then the provider's word, not the request's.
// A value from the body (or its digest) is a function of the body, which
// is covered whenever the template has {body} or {form}; a header is
// covered when the template names it, and the delivery id (delivery) when
// the template has {id}. With no signature (parts nil: credentials or
// none), only the body's values count as covered, being functions of the
// body published.
func Covered(parts []Part, f From, delivery bool) bool {
	switch f.Kind {
	case FromBody, FromDigest:
		return true
	case FromHeader:
		return NamesHeader(parts, f.Name) || delivery && Has(parts, ID)
	case FromSignature:
		return Has(parts, Timestamp)
	}
	return false
}

// TimestampCovered reports whether the signature over parts covers a
// timestamp taken from f.
func TimestampCovered(parts []Part, f From) bool {
	switch f.Kind {
	case FromBody:
		return Has(parts, Body) || Has(parts, Form)
	case FromHeader:
		return Has(parts, Timestamp) || NamesHeader(parts, f.Name)
	case FromSignature:
		return Has(parts, Timestamp)
	}
	return false
}

// ValidHeaderName reports whether s is an HTTP header name (a token).
func ValidHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !('a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", ch) >= 0) {
			return false
		}
	}
	return true
}

// ValidTenant reports whether s may name a tenant: 1 to 64 letters,
// digits, '-', '_' and '.', not starting with '.' or '-'.
func ValidTenant(s string) bool {
	if s == "" || len(s) > 64 || s[0] == '.' || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !('a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' || ch == '-' || ch == '_' || ch == '.') {
			return false
		}
	}
	return true
}
