package ingress

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/config"
)

// Errors of verification. The server answers each with 401 and counts it
// by its reason.
var (
	// ErrNoSignature is wrapped when the request carries no signature or
	// credentials where its kind needs them.
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

// parseHexSignature parses a lower- or upper-case hex HMAC-SHA256, after
// an optional prefix ("sha256=" for GitHub; none for Sentry).
func parseHexSignature(v, prefix string) ([]byte, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, ErrNoSignature
	}
	if prefix != "" {
		rest, ok := strings.CutPrefix(v, prefix)
		if !ok {
			return nil, fmt.Errorf("%w: want %s followed by a hex HMAC-SHA256", ErrBadSignature, prefix)
		}
		v = rest
	}
	if len(v) != 2*sha256Size {
		return nil, fmt.Errorf("%w: want %d hex digits, got %d characters", ErrBadSignature, 2*sha256Size, len(v))
	}
	b, err := hex.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("%w: not hex", ErrBadSignature)
	}
	return b, nil
}

// stripeSignature is a parsed Stripe-Signature header.
type stripeSignature struct {
	t   int64    // the signed timestamp, Unix seconds
	v1s [][]byte // the v1 signatures, each 32 bytes
}

// parseStripeSignature parses "t=1492774577,v1=5257a8…,v1=…,v0=…": one
// t, one or more v1 (several while the endpoint's secret is rolled), any
// other scheme ignored.
func parseStripeSignature(v string) (stripeSignature, error) {
	var s stripeSignature
	if strings.TrimSpace(v) == "" {
		return s, ErrNoSignature
	}
	seenT := false
	n := 0
	for part := range strings.SplitSeq(v, ",") {
		if n++; n > 2*maxSignaturesPerHeader {
			return s, fmt.Errorf("%w: too many elements", ErrBadSignature)
		}
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return s, fmt.Errorf("%w: element %q is not key=value", ErrBadSignature, truncate(part))
		}
		switch k {
		case "t":
			if seenT {
				return s, fmt.Errorf("%w: two timestamps", ErrBadSignature)
			}
			t, err := strconv.ParseInt(val, 10, 64)
			if err != nil || t < 0 {
				return s, fmt.Errorf("%w: timestamp %q is not Unix seconds", ErrBadSignature, truncate(val))
			}
			s.t, seenT = t, true
		case "v1":
			b, err := parseHexSignature(val, "")
			if err != nil {
				return s, fmt.Errorf("%w: a v1 signature is not a hex HMAC-SHA256", ErrBadSignature)
			}
			s.v1s = append(s.v1s, b)
		}
	}
	if !seenT {
		return s, fmt.Errorf("%w: no t= timestamp", ErrBadSignature)
	}
	if len(s.v1s) == 0 {
		return s, fmt.Errorf("%w: no v1= signature", ErrBadSignature)
	}
	return s, nil
}

// parseStandardSignature parses a Standard Webhooks webhook-signature
// header: space-separated "version,base64" entries. It returns the v1
// (HMAC-SHA256) signatures and ignores other versions (v1a is an
// asymmetric one).
func parseStandardSignature(v string) ([][]byte, error) {
	if strings.TrimSpace(v) == "" {
		return nil, ErrNoSignature
	}
	var sigs [][]byte
	n := 0
	for entry := range strings.FieldsSeq(v) {
		if n++; n > maxSignaturesPerHeader {
			return nil, fmt.Errorf("%w: too many signatures", ErrBadSignature)
		}
		ver, sig, ok := strings.Cut(entry, ",")
		if !ok {
			return nil, fmt.Errorf("%w: entry %q is not version,signature", ErrBadSignature, truncate(entry))
		}
		if ver != "v1" {
			continue
		}
		b, err := base64.StdEncoding.Strict().DecodeString(sig)
		if err != nil || len(b) != sha256Size {
			return nil, fmt.Errorf("%w: a v1 signature is not a base64 HMAC-SHA256", ErrBadSignature)
		}
		sigs = append(sigs, b)
	}
	if len(sigs) == 0 {
		return nil, fmt.Errorf("%w: no v1 signature", ErrBadSignature)
	}
	return sigs, nil
}

// parseUnixSeconds parses a Standard Webhooks timestamp.
func parseUnixSeconds(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, ErrNoSignature
	}
	t, err := strconv.ParseInt(v, 10, 64)
	if err != nil || t < 0 {
		return 0, fmt.Errorf("%w: timestamp %q is not Unix seconds", ErrBadSignature, truncate(v))
	}
	return t, nil
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
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, standardSecretPrefix))
	if err != nil || len(b) == 0 {
		return nil, errors.New("ingress: a standard source's secret must be whsec_ followed by base64")
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

// verify checks r's signature or credentials against keys (one, or two
// during a rotation) for a source of the given kind, at now.
func verify(kind, auth, user string, keys [][]byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	if auth == config.AuthNone {
		return nil
	}
	switch kind {
	case config.KindGitHub:
		return verifyHex(h.Get(HeaderGitHubSignature), "sha256=", keys, body)
	case config.KindSentry:
		return verifyHex(h.Get(HeaderSentrySignature), "", keys, body)
	case config.KindStripe:
		s, err := parseStripeSignature(h.Get(HeaderStripeSignature))
		if err != nil {
			return err
		}
		ts := strconv.AppendInt(nil, s.t, 10)
		if !anyMatch(keys, s.v1s, ts, []byte("."), body) {
			return ErrBadSignature
		}
		return checkTime(s.t, now, tolerance)
	case config.KindStandard:
		id := h.Get(HeaderStandardID)
		if id == "" {
			return fmt.Errorf("%w: no webhook-id", ErrNoSignature)
		}
		t, err := parseUnixSeconds(h.Get(HeaderStandardTime))
		if err != nil {
			return err
		}
		sigs, err := parseStandardSignature(h.Get(HeaderStandardSig))
		if err != nil {
			return err
		}
		if !anyMatch(keys, sigs, []byte(id), []byte("."), strconv.AppendInt(nil, t, 10), []byte("."), body) {
			return ErrBadSignature
		}
		return checkTime(t, now, tolerance)
	case config.KindAlertmanager:
		scheme, cred, err := parseAuthorization(h.Get("Authorization"))
		if err != nil {
			return err
		}
		switch auth {
		case config.AuthBasic:
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
			okUser := equalDigest(u, user)
			for _, k := range keys {
				if equalDigest(p, string(k)) && okUser {
					return nil
				}
			}
			return ErrBadSignature
		default:
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
	case config.KindHMAC:
		// The header name is the source's; verifyHMAC handles it.
	}
	return fmt.Errorf("ingress: kind %q has no verifier", kind)
}

// verifyHex checks a hex HMAC-SHA256 of the body.
func verifyHex(header, prefix string, keys [][]byte, body []byte) error {
	sig, err := parseHexSignature(header, prefix)
	if err != nil {
		return err
	}
	if !anyMatch(keys, [][]byte{sig}, body) {
		return ErrBadSignature
	}
	return nil
}

// verifyHMAC checks a generic hmac source: a hex HMAC-SHA256 of the body,
// with or without a "sha256=" prefix.
func verifyHMAC(header string, keys [][]byte, body []byte) error {
	prefix := ""
	if strings.HasPrefix(strings.TrimSpace(header), "sha256=") {
		prefix = "sha256="
	}
	return verifyHex(header, prefix, keys, body)
}

// anyMatch reports whether the HMAC of parts under any key equals any of
// sigs. Every comparison is constant-time.
func anyMatch(keys, sigs [][]byte, parts ...[]byte) bool {
	ok := false
	for _, k := range keys {
		want := mac(k, parts...)
		for _, s := range sigs {
			if hmac.Equal(want, s) {
				ok = true
			}
		}
	}
	return ok
}

// checkTime reports ErrStale when t (Unix seconds) is more than tolerance
// away from now, either way.
func checkTime(t int64, now time.Time, tolerance time.Duration) error {
	d := now.Sub(time.Unix(t, 0))
	if d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed %s from now (tolerance %s)", ErrStale, d.Round(time.Second), tolerance)
	}
	return nil
}

// Sign returns the headers a provider would send to src with body,
// signed with secret at now: what `consumer webhook sign` prints, and
// what tests and benchmarks send. id is the delivery id, for the kinds
// that carry one in a header (github, standard, sentry, hmac); event is
// the event type for github (default "push"), sentry (default "issue")
// and an hmac source with an event header. For alertmanager the secret is
// the bearer token or, with auth basic, the password of src.User.
func Sign(src config.Source, secret []byte, body []byte, now time.Time, id, event string) (http.Header, error) {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	switch src.Kind {
	case config.KindGitHub:
		if event == "" {
			event = "push"
		}
		h.Set(HeaderGitHubEvent, event)
		h.Set(HeaderGitHubDelivery, id)
		h.Set(HeaderGitHubSignature, "sha256="+hex.EncodeToString(mac(secret, body)))
		h.Set("User-Agent", "GitHub-Hookshot/oncegate-sign")
	case config.KindSentry:
		if event == "" {
			event = "issue"
		}
		h.Set(HeaderSentryResource, event)
		h.Set(HeaderSentryRequestID, id)
		h.Set(HeaderSentryTimestamp, strconv.FormatInt(now.Unix(), 10))
		h.Set(HeaderSentrySignature, hex.EncodeToString(mac(secret, body)))
	case config.KindStripe:
		t := strconv.FormatInt(now.Unix(), 10)
		h.Set(HeaderStripeSignature, "t="+t+",v1="+hex.EncodeToString(mac(secret, []byte(t), []byte("."), body)))
	case config.KindStandard:
		key, err := decodeStandardSecret(string(secret))
		if err != nil {
			return nil, err
		}
		t := strconv.FormatInt(now.Unix(), 10)
		h.Set(HeaderStandardID, id)
		h.Set(HeaderStandardTime, t)
		h.Set(HeaderStandardSig, "v1,"+base64.StdEncoding.EncodeToString(mac(key, []byte(id), []byte("."), []byte(t), []byte("."), body)))
	case config.KindAlertmanager:
		if src.Auth == config.AuthBasic {
			h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(src.User+":"+string(secret))))
		} else {
			h.Set("Authorization", "Bearer "+string(secret))
		}
		h.Set("User-Agent", "Alertmanager/oncegate-sign")
	case config.KindHMAC:
		h.Set(cmpOr(src.Header, config.DefaultHMACHeader), hex.EncodeToString(mac(secret, body)))
		if id != "" {
			h.Set(cmpOr(src.DeliveryHeader, config.DefaultHMACDeliveryHeader), id)
		}
		if event != "" && src.EventHeader != "" {
			h.Set(src.EventHeader, event)
		}
	default:
		return nil, fmt.Errorf("ingress: unknown kind %q", src.Kind)
	}
	return h, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
