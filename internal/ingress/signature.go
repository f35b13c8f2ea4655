package ingress

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/ingress/spec"
)

// Errors of verification. The server answers each with 401 and counts it
// by its reason.
var (
	// ErrNoSignature is wrapped when the request carries no signature or
	// credentials where its source needs them.
	ErrNoSignature = errors.New("ingress: missing signature")
	// ErrBadSignature is wrapped when the signature header does not parse,
	// or no signature in it matches any of the source's secrets.
	ErrBadSignature = errors.New("ingress: signature does not match")
	// ErrStale is wrapped when a correctly signed timestamp is further
	// from the ingress's clock than the tolerance: a replay, or a clock
	// far off.
	ErrStale = errors.New("ingress: timestamp outside the tolerance")
)

// Header names of the providers.
const (
	HeaderGitHubSignature  = "X-Hub-Signature-256"
	HeaderGitHubDelivery   = "X-GitHub-Delivery"
	HeaderGitHubEvent      = "X-GitHub-Event"
	HeaderStripeSignature  = "Stripe-Signature"
	HeaderStandardID       = "Webhook-Id"
	HeaderStandardTime     = "Webhook-Timestamp"
	HeaderStandardSig      = "Webhook-Signature"
	HeaderSentrySignature  = "Sentry-Hook-Signature"
	HeaderSentryResource   = "Sentry-Hook-Resource"
	HeaderSentryTimestamp  = "Sentry-Hook-Timestamp"
	HeaderSentryRequestID  = "Request-Id"
	standardSecretPrefix   = "whsec_"
	maxSignaturesPerHeader = 16
)

// sha256Size is the length of an HMAC-SHA256.
const sha256Size = sha256.Size

// single parses a header that carries one signature: the prefix (unless
// optional), then the encoded signature.
func (sc *scheme) single(v string) ([]byte, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, ErrNoSignature
	}
	if sc.prefix != "" {
		rest, ok := strings.CutPrefix(v, sc.prefix)
		if !ok && !sc.prefixOptional {
			return nil, fmt.Errorf("%w: want %s followed by a %s %s", ErrBadSignature, sc.prefix, sc.enc.name, spec.AlgorithmName(sc.alg))
		}
		v = rest
	}
	return sc.decode(v)
}

// decode decodes one signature and checks its length.
func (sc *scheme) decode(v string) ([]byte, error) {
	if sc.enc.name == spec.Hex && len(v) != 2*sc.size {
		return nil, fmt.Errorf("%w: want %d hex digits, got %d characters", ErrBadSignature, 2*sc.size, len(v))
	}
	b, err := sc.enc.decode(v)
	if err != nil {
		return nil, fmt.Errorf("%w: not %s", ErrBadSignature, sc.enc.name)
	}
	if len(b) != sc.size {
		return nil, fmt.Errorf("%w: want a %s %s of %d bytes, got %d", ErrBadSignature, sc.enc.name, spec.AlgorithmName(sc.alg), sc.size, len(b))
	}
	return b, nil
}

// signatures parses the signature header: one signature, or with a
// separator several elements, of which those that are the prefix followed
// by a well-formed signature are the signatures (others are skipped, as
// the reference libraries skip them: another version, a malformed entry
// beside a valid one), and the one after the timestamp's prefix, if the
// timestamp is there, the timestamp.
func (sc *scheme) signatures(v string) (sigs [][]byte, ts string, err error) {
	if sc.sep == "" {
		b, err := sc.single(v)
		if err != nil {
			return nil, "", err
		}
		return [][]byte{b}, "", nil
	}
	if strings.TrimSpace(v) == "" {
		return nil, "", ErrNoSignature
	}
	var elems []string
	if sc.sep == " " {
		elems = strings.Fields(v)
	} else {
		elems = strings.Split(v, sc.sep)
	}
	if len(elems) > 2*maxSignaturesPerHeader {
		return nil, "", fmt.Errorf("%w: too many elements", ErrBadSignature)
	}
	seenTS, malformed := false, 0
	for _, e := range elems {
		e = strings.TrimSpace(e)
		if sc.ts.Kind == spec.FromSignature {
			if t, ok := strings.CutPrefix(e, sc.ts.Name); ok {
				if seenTS {
					return nil, "", fmt.Errorf("%w: two timestamps", ErrBadSignature)
				}
				ts, seenTS = t, true
				continue
			}
		}
		rest, ok := strings.CutPrefix(e, sc.prefix)
		if !ok {
			continue
		}
		b, err := sc.decode(rest)
		if err != nil {
			malformed++
			continue
		}
		if len(sigs) == maxSignaturesPerHeader {
			return nil, "", fmt.Errorf("%w: too many signatures", ErrBadSignature)
		}
		sigs = append(sigs, b)
	}
	if sc.ts.Kind == spec.FromSignature && !seenTS {
		return nil, "", fmt.Errorf("%w: no %s timestamp", ErrBadSignature, sc.ts.Name)
	}
	if len(sigs) == 0 {
		if malformed > 0 {
			return nil, "", fmt.Errorf("%w: no well-formed %s signature (%d malformed: want %s followed by a %s %s)", ErrBadSignature, sc.prefix, malformed, sc.prefix, sc.enc.name, spec.AlgorithmName(sc.alg))
		}
		return nil, "", fmt.Errorf("%w: no %s signature", ErrBadSignature, sc.prefix)
	}
	return sigs, ts, nil
}

// parseAuthorization splits an Authorization header into its scheme
// (lower-cased) and credentials.
func parseAuthorization(v string) (scheme, cred string, err error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", "", ErrNoSignature
	}
	scheme, cred, ok := strings.Cut(v, " ")
	cred = strings.TrimSpace(cred)
	if !ok || cred == "" {
		return "", "", fmt.Errorf("%w: Authorization is not \"scheme credentials\"", ErrBadSignature)
	}
	return strings.ToLower(scheme), cred, nil
}

// decodeStandardSecret turns a "whsec_<base64>" secret into its key.
func decodeStandardSecret(s string) ([]byte, error) {
	b, err := decodeSecret(s, spec.SecretWhsec)
	if err != nil {
		return nil, errors.New("ingress: a standard source's secret must be whsec_ followed by base64")
	}
	return b, nil
}

// decodeSecret turns a secret's text into its key.
func decodeSecret(s, enc string) ([]byte, error) {
	var b []byte
	var err error
	switch enc {
	case spec.SecretText, "":
		return []byte(s), nil
	case spec.SecretHex:
		b, err = hex.DecodeString(strings.TrimSpace(s))
	case spec.SecretBase64:
		b, err = base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	case spec.SecretWhsec:
		s = strings.TrimSpace(s)
		s = strings.TrimPrefix(strings.TrimPrefix(s, standardSecretPrefix), "whpk_")
		b, err = base64.StdEncoding.DecodeString(s)
	default:
		return nil, fmt.Errorf("unknown secret encoding %q", enc)
	}
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("the secret is not %s", enc)
	}
	return b, nil
}

// mac returns HMAC-SHA256(key, parts...).
func mac(key []byte, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, key)
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

// equalDigest compares two secrets in constant time, whatever their
// lengths, by comparing their SHA-256.
func equalDigest(a, b string) bool {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return hmac.Equal(x[:], y[:])
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// verify checks the request's signature or credentials against keys
// (one, or two during a rotation), and a signed timestamp against now.
func (sc *scheme) verify(keys [][]byte, rq *request, now time.Time, tolerance time.Duration) error {
	switch sc.auth {
	case spec.AuthNone:
		return nil
	case spec.AuthToken:
		v := rq.h.Get(sc.tokenHeader)
		if v == "" {
			return fmt.Errorf("%w: no %s header", ErrNoSignature, sc.tokenHeader)
		}
		for _, k := range keys {
			if equalDigest(v, string(k)) {
				return nil
			}
		}
		return fmt.Errorf("%w: the %s token is not the source's", ErrBadSignature, sc.tokenHeader)
	case spec.AuthBearer, spec.AuthBasic:
		return sc.credentials(keys, rq)
	}
	sigs, ts, err := sc.signatures(rq.h.Get(sc.header))
	if err != nil {
		return err
	}
	var t int64
	if sc.ts.Kind != 0 {
		switch sc.ts.Kind {
		case spec.FromHeader:
			ts = strings.TrimSpace(rq.h.Get(sc.ts.Name))
			if ts == "" {
				return fmt.Errorf("%w: no timestamp (%s)", ErrNoSignature, sc.ts.Name)
			}
		case spec.FromBody:
			v, _, err := rq.lookup(sc.ts)
			if err != nil || v == "" {
				return fmt.Errorf("%w: no timestamp (the body's %s)", ErrBadSignature, sc.ts.Name)
			}
			ts = v
		}
		t, err = strconv.ParseInt(ts, 10, 64)
		if err != nil || t < 0 {
			unit := "seconds"
			if sc.tsMillis {
				unit = "milliseconds"
			}
			return fmt.Errorf("%w: timestamp %q is not Unix %s", ErrBadSignature, truncate(ts), unit)
		}
	}
	pieces, err := sc.signed(rq, ts)
	if err != nil {
		return err
	}
	if !sc.match(keys, sigs, pieces) {
		return ErrBadSignature
	}
	if sc.ts.Kind != 0 {
		at := time.Unix(t, 0)
		if sc.tsMillis {
			at = time.UnixMilli(t)
		}
		return checkTime(at, now, tolerance)
	}
	return nil
}

// signed returns the pieces of the signed string, in order.
func (sc *scheme) signed(rq *request, ts string) ([][]byte, error) {
	pieces := make([][]byte, 0, len(sc.parts))
	for _, p := range sc.parts {
		switch p.Kind {
		case spec.Literal:
			pieces = append(pieces, []byte(p.Text))
		case spec.Body:
			pieces = append(pieces, rq.raw)
		case spec.Timestamp:
			pieces = append(pieces, []byte(ts))
		case spec.ID:
			id, _, err := rq.delivery(sc)
			if err != nil || id == "" {
				return nil, fmt.Errorf("%w: no delivery id for the signed string (%s)", ErrNoSignature, describeFroms(sc.delivery))
			}
			pieces = append(pieces, []byte(id))
		case spec.URL:
			pieces = append(pieces, []byte(sc.publicURL+rq.uri))
		case spec.Form:
			f, err := sc.formPiece(rq)
			if err != nil {
				return nil, err
			}
			pieces = append(pieces, f)
		case spec.Header:
			pieces = append(pieces, []byte(rq.h.Get(p.Text)))
		}
	}
	return pieces, nil
}

// formPiece is {form}: a form body's parameters sorted by name, each name
// followed by its value; for another body, nothing, once the URL's
// bodySHA256 is found to be the body's SHA-256.
func (sc *scheme) formPiece(rq *request) ([]byte, error) {
	if rq.form != nil {
		return sortedForm(rq.form), nil
	}
	u, err := url.ParseRequestURI(rq.uri)
	if err != nil {
		return nil, fmt.Errorf("%w: the request URI does not parse", ErrBadSignature)
	}
	want := u.Query().Get("bodySHA256")
	if want == "" {
		return nil, fmt.Errorf("%w: a body that is not a form is signed through the URL's bodySHA256, which is missing", ErrBadSignature)
	}
	sum := sha256.Sum256(rq.raw)
	if !hmac.Equal([]byte(strings.ToLower(want)), []byte(hex.EncodeToString(sum[:]))) {
		return nil, fmt.Errorf("%w: the URL's bodySHA256 is not the body's", ErrBadSignature)
	}
	return nil, nil
}

// sortedForm writes form parameters sorted by name, each name followed by
// each of its values.
func sortedForm(f url.Values) []byte {
	var b []byte
	for _, k := range slices.Sorted(mapKeys(f)) {
		for _, v := range f[k] {
			b = append(b, k...)
			b = append(b, v...)
		}
	}
	return b
}

func mapKeys(f url.Values) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range f {
			if !yield(k) {
				return
			}
		}
	}
}

// match reports whether a signature over pieces under any key equals any
// of sigs. Every HMAC comparison is constant-time, and all of them are
// made.
func (sc *scheme) match(keys, sigs [][]byte, pieces [][]byte) bool {
	ok := false
	if sc.newHash == nil { // ed25519
		msg := slices.Concat(pieces...)
		for _, k := range keys {
			for _, s := range sigs {
				if len(k) == ed25519.PublicKeySize && ed25519.Verify(ed25519.PublicKey(k), msg, s) {
					ok = true
				}
			}
		}
		return ok
	}
	for _, k := range keys {
		h := hmac.New(sc.newHash, k)
		for _, p := range pieces {
			h.Write(p)
		}
		want := h.Sum(nil)
		for _, s := range sigs {
			if hmac.Equal(want, s) {
				ok = true
			}
		}
	}
	return ok
}

// credentials checks an Authorization header: a bearer token, or basic
// credentials for the source's user.
func (sc *scheme) credentials(keys [][]byte, rq *request) error {
	scheme, cred, err := parseAuthorization(rq.h.Get("Authorization"))
	if err != nil {
		return err
	}
	if sc.auth == spec.AuthBasic {
		if scheme != "basic" {
			return fmt.Errorf("%w: want basic auth", ErrBadSignature)
		}
		raw, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return fmt.Errorf("%w: basic credentials are not base64", ErrBadSignature)
		}
		u, p, ok := strings.Cut(string(raw), ":")
		if !ok {
			return fmt.Errorf("%w: basic credentials are not user:password", ErrBadSignature)
		}
		okUser := equalDigest(u, sc.user)
		for _, k := range keys {
			if equalDigest(p, string(k)) && okUser {
				return nil
			}
		}
		return ErrBadSignature
	}
	if scheme != "bearer" {
		return fmt.Errorf("%w: want a bearer token", ErrBadSignature)
	}
	for _, k := range keys {
		if equalDigest(cred, string(k)) {
			return nil
		}
	}
	return ErrBadSignature
}

// checkTime reports ErrStale when at is more than tolerance away from
// now, either way, saying how far: "signed 10m1s ago", "signed 9m59s in
// the future".
func checkTime(at, now time.Time, tolerance time.Duration) error {
	d := now.Sub(at)
	switch {
	case d > tolerance:
		return fmt.Errorf("%w: signed %s ago, and the tolerance is %s", ErrStale, roundDuration(d), roundDuration(tolerance))
	case d < -tolerance:
		return fmt.Errorf("%w: signed %s in the future, and the tolerance is %s", ErrStale, roundDuration(-d), roundDuration(tolerance))
	}
	return nil
}

// roundDuration writes d to the second, without zero units: "10m1s",
// "5m", "2h".
func roundDuration(d time.Duration) string {
	if d >= time.Second {
		d = d.Round(time.Second)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func describeFroms(fs []spec.From) string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Describe()
	}
	return strings.Join(out, ", else ")
}
