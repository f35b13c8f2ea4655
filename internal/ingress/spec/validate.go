package spec

import (
	"errors"
	"fmt"
	"maps"
	"net/textproto"
	"slices"
	"strings"

	"github.com/oncegate/oncegate/pkg/canon"
)

// The sentinels a *FieldError wraps one of. Test with errors.Is.
var (
	// ErrInvalid is wrapped by the error for a setting that is present
	// but wrong, or inconsistent with another.
	ErrInvalid = errors.New("spec: invalid setting")
	// ErrMissing is wrapped by the error for a setting the source needs
	// and leaves out.
	ErrMissing = errors.New("spec: missing setting")
)

// FieldError is one problem with a source's settings.
type FieldError struct {
	// Field is the setting's key below the source, as the configuration
	// file writes it: "signature.header", "delivery[0]",
	// "tenant_secret_env[acme]".
	Field string
	// Err says what is wrong. It wraps ErrInvalid or ErrMissing, or is the
	// error of one of the caller's Checks.
	Err error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }

// Unwrap returns e.Err.
func (e *FieldError) Unwrap() error { return e.Err }

// problem is the Err of a FieldError: a message that wraps a sentinel
// without repeating its text.
type problem struct {
	kind error
	msg  string
}

func (p *problem) Error() string { return p.msg }
func (p *problem) Unwrap() error { return p.kind }

// Checks are the caller's own rules for values a source names, which
// Validate applies where they occur. A nil check accepts everything.
type Checks struct {
	// EnvName checks the name of an environment variable that holds a
	// secret (secret_env, previous_secret_env, tenant_secret_env's).
	EnvName func(name string) error
	// URL checks the public URL, an http or https URL.
	URL func(url string) error
}

// Validate reports every problem with s as the ingress would run it
// (Resolved): its kind, its authentication and the secrets it names, its
// signature scheme, where its delivery ids and event types come from, the
// headers it copies, its handshake and its form settings; in that order,
// each a *FieldError. The name and the subject are not checked: they are
// the configuration's, which knows the other sources and the stream.
func (s *Source) Validate(c Checks) []*FieldError {
	v := &validator{}
	v.source(s, c)
	return v.errs
}

type validator struct {
	errs []*FieldError
}

func (v *validator) add(field string, err error) {
	v.errs = append(v.errs, &FieldError{Field: field, Err: err})
}

func (v *validator) invalid(field, format string, args ...any) {
	v.add(field, &problem{ErrInvalid, fmt.Sprintf(format, args...)})
}

func (v *validator) missing(field, format string, args ...any) {
	v.add(field, &problem{ErrMissing, fmt.Sprintf(format, args...)})
}

// oneOf reports s at field unless it is one of allowed.
func (v *validator) oneOf(field, s string, allowed ...string) bool {
	if slices.Contains(allowed, s) {
		return true
	}
	if s == "" {
		v.missing(field, "want one of %s", strings.Join(allowed, ", "))
	} else {
		v.invalid(field, "%q is not one of %s", s, strings.Join(allowed, ", "))
	}
	return false
}

// check reports err at field, if any.
func (v *validator) check(field string, check func(string) error, value string) {
	if check == nil {
		return
	}
	if err := check(value); err != nil {
		v.add(field, err)
	}
}

func (v *validator) source(s *Source, c Checks) {
	if s.Kind != "" {
		if _, ok := Lookup(s.Kind); !ok {
			v.invalid("kind", "%q is not one of %s; leave kind out to spell the scheme out", s.Kind, strings.Join(Kinds(), ", "))
			return
		}
	}
	r := s.Resolved()
	if r.Auth == "" {
		v.missing("signature.header", "a source without a kind that signs needs signature.header, or an auth of token, bearer or basic; to accept unsigned requests, write auth: none")
		return
	}
	if !v.oneOf("auth", r.Auth, Auths...) {
		return
	}
	for _, e := range []struct{ field, name string }{{"secret_env", s.SecretEnv}, {"previous_secret_env", s.PreviousSecretEnv}} {
		if e.name != "" {
			v.check(e.field, c.EnvName, e.name)
		}
	}
	if s.SecretEnv != "" && s.SecretFile != "" {
		v.invalid("secret_file", "set secret_env or secret_file, not both")
	}
	if s.PreviousSecretEnv != "" && s.PreviousSecretFile != "" {
		v.invalid("previous_secret_file", "set previous_secret_env or previous_secret_file, not both")
	}
	hasSecret := s.SecretEnv != "" || s.SecretFile != ""
	hasPrevious := s.PreviousSecretEnv != "" || s.PreviousSecretFile != ""
	switch {
	case r.Auth == AuthNone && (hasSecret || hasPrevious || s.Tenanted()):
		v.invalid("auth", "auth: none accepts unsigned requests; remove the secret, or the auth: none")
	case s.Tenanted() && (hasSecret || hasPrevious):
		v.invalid("secret_env", "a source with per-tenant secrets (tenant_secret_dir, tenant_secret_env) takes no secret of its own")
	case r.Auth != AuthNone && !hasSecret && !s.Tenanted():
		v.missing("secret_env", "a source needs secret_env or secret_file (or per-tenant secrets); to accept unsigned requests, write auth: none")
	}
	if s.TenantSecretDir != "" && len(s.TenantSecretEnv) > 0 {
		v.invalid("tenant_secret_env", "set tenant_secret_dir or tenant_secret_env, not both")
	}
	for _, t := range slices.Sorted(maps.Keys(s.TenantSecretEnv)) {
		field := "tenant_secret_env[" + t + "]"
		if !ValidTenant(t) {
			v.invalid(field, "%q is not a tenant name: 1 to 64 letters, digits, '-', '_' and '.', not starting with '.' or '-'", t)
		} else {
			v.check(field, c.EnvName, s.TenantSecretEnv[t])
		}
	}
	if s.User != "" && r.Auth != AuthBasic {
		v.invalid("user", "user is for auth: basic")
	}
	if r.Auth == AuthBasic && s.User == "" {
		v.missing("user", "auth: basic needs a user")
	}
	if r.Auth == AuthToken && !ValidHeaderName(r.TokenHeader) {
		v.missing("token_header", "auth: token needs the header that carries the token")
	}
	if s.TokenHeader != "" && r.Auth != AuthToken {
		v.invalid("token_header", "token_header is for auth: token")
	}
	shorthands := []struct{ field, val string }{{"header", s.Header}, {"delivery_header", s.DeliveryHeader}, {"event_header", s.EventHeader}}
	for _, h := range shorthands {
		switch {
		case h.val == "":
		case s.Kind != KindHMAC:
			v.invalid(h.field, "only an hmac source takes it; otherwise write signature.header, delivery and event")
		case !ValidHeaderName(h.val):
			v.invalid(h.field, "%q is not an HTTP header name", h.val)
		}
	}
	parts := v.signature(&r)
	for j, f := range r.Delivery {
		from, err := ParseFrom(f)
		if err == nil && from.Kind == FromSignature {
			err = errors.New("signature: is for timestamps")
		}
		if err != nil {
			v.invalid(fmt.Sprintf("delivery[%d]", j), "%v", err)
		}
	}
	if len(r.Delivery) == 0 && r.Split == "" {
		v.missing("delivery", "a source needs a delivery id: header:Name, body:/pointer or digest")
	}
	for j, f := range r.Event {
		from, err := ParseFrom(f)
		if err == nil && (from.Kind == FromSignature || from.Kind == FromDigest) {
			err = errors.New("an event type comes from header:Name or body:/pointer")
		}
		if err != nil {
			v.invalid(fmt.Sprintf("event[%d]", j), "%v", err)
		}
	}
	for j, h := range r.CopyHeaders {
		switch {
		case !ValidHeaderName(h):
			v.invalid(fmt.Sprintf("copy_headers[%d]", j), "%q is not an HTTP header name", h)
		case ReservedTriggerHeader(h):
			v.invalid(fmt.Sprintf("copy_headers[%d]", j), "%s is set by Oncegate; copy another header", h)
		}
	}
	if r.Handshake.Echo != "" {
		if _, err := canon.ParsePointer(r.Handshake.Echo); err != nil || r.Handshake.Event == "" {
			v.invalid("handshake.echo", "echo is a JSON Pointer into the handshake's body, and needs handshake.event")
		}
	}
	if r.FormPayload != "" && !r.Form {
		v.invalid("form_payload", "form_payload needs form: true")
	}
	if r.Split != "" {
		v.oneOf("split", r.Split, SplitAlertmanager)
	}
	if r.PublicURL != "" {
		v.check("public_url", c.URL, r.PublicURL)
	}
	if Has(parts, URL) && r.PublicURL == "" {
		v.missing("public_url", "a signature over {url} needs the public URL the provider calls (scheme and host, and any path before /hooks/)")
	}
}

// signature validates a resolved source's signature scheme and returns
// its parsed template (nil when the source does not sign).
func (v *validator) signature(r *Source) []Part {
	sig := &r.Signature
	if r.Auth != AuthSignature {
		return nil
	}
	if !ValidHeaderName(sig.Header) {
		v.invalid("signature.header", "%q is not an HTTP header name", sig.Header)
	}
	v.oneOf("signature.algorithm", sig.Algorithm, HMACSHA256, HMACSHA1, HMACSHA512, Ed25519)
	v.oneOf("signature.encoding", sig.Encoding, Hex, Base64, Base64URL)
	v.oneOf("signature.secret_encoding", sig.SecretEncoding, SecretText, SecretBase64, SecretHex, SecretWhsec)
	if sig.Separator != "" && sig.Separator != " " && sig.Separator != "," && sig.Separator != ";" {
		v.invalid("signature.separator", "%q is not one of \",\", \";\" or \" \"", sig.Separator)
	}
	parts, err := ParseTemplate(sig.Signed)
	if err != nil {
		v.invalid("signature.signed", "%v", err)
		return nil
	}
	if !Has(parts, Body) && !Has(parts, Form) {
		v.invalid("signature.signed", "%q does not cover the body: add {body} (or {form})", sig.Signed)
	}
	if sig.Timestamp == "" {
		if Has(parts, Timestamp) {
			v.missing("signature.timestamp", "the signed string has {timestamp}: say where it is (header:Name, body:/pointer or signature:t=)")
		}
		return parts
	}
	ts, err := ParseFrom(sig.Timestamp)
	switch {
	case err != nil:
		v.invalid("signature.timestamp", "%v", err)
	case ts.Kind == FromDigest:
		v.invalid("signature.timestamp", "a timestamp comes from header:Name, body:/pointer or signature:prefix")
	case ts.Kind == FromSignature && sig.Separator == "":
		v.invalid("signature.timestamp", "a timestamp in the signature header needs signature.separator")
	case !TimestampCovered(parts, ts):
		v.invalid("signature.timestamp", "the signed string %q does not cover the timestamp from %s: checking it would prove nothing; add {timestamp}", sig.Signed, ts.Describe())
	}
	v.oneOf("signature.timestamp_unit", sig.TimestampUnit, Seconds, Milliseconds)
	return parts
}

// ReservedTriggerHeader reports whether the ingress sets header h on a
// trigger itself (Oncegate-*, Nats-*, the trace context), so that a source
// may not copy it from the request.
func ReservedTriggerHeader(h string) bool {
	h = textproto.CanonicalMIMEHeaderKey(h)
	return strings.HasPrefix(h, "Oncegate-") || strings.HasPrefix(h, "Nats-") || h == "Traceparent" || h == "Tracestate"
}

// UnsignedHeader returns the request header the ingress sets trigger
// header h from for source s when the provider's signature does not cover
// it, or "". A value from a header the signed string does not name is the
// request's word (GitHub's X-GitHub-Event and X-GitHub-Delivery, Sentry's,
// an hmac source's headers, every header under token, bearer or basic
// auth); a value from the body is the body's (Stripe's event id, an
// Alertmanager alert's fingerprint), and Standard Webhooks sign webhook-id
// as {id}. The trace context is the request's for every source; the tenant
// is the path's, authenticated by the tenant's own secret.
func (s *Source) UnsignedHeader(h string) string {
	switch {
	case strings.EqualFold(h, "traceparent"), strings.EqualFold(h, "tracestate"):
		return "the request's " + strings.ToLower(h) + " header"
	case s.Auth == AuthNone:
		return "" // nothing is signed; auth: none says so already
	}
	r := s.Resolved()
	var parts []Part
	if r.Auth == AuthSignature {
		parts, _ = ParseTemplate(r.Signature.Signed)
	}
	uncovered := func(list []string, delivery bool) string {
		for _, f := range list {
			if from, err := ParseFrom(f); err == nil && !Covered(parts, from, delivery) {
				return from.Name
			}
		}
		return ""
	}
	switch {
	case strings.EqualFold(h, "Oncegate-Event"):
		if r.Split == "" {
			return uncovered(r.Event, false)
		}
	case strings.EqualFold(h, "Oncegate-Delivery"):
		if r.Split == "" {
			return uncovered(r.Delivery, true)
		}
	}
	for _, c := range r.CopyHeaders {
		if strings.EqualFold(c, h) && !Covered(parts, From{Kind: FromHeader, Name: c}, false) {
			return c
		}
	}
	return ""
}
