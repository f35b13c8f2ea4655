package ingress

import (
	"net/http"
	"strconv"
	"time"

	"github.com/oncegate/oncegate/internal/ingress/spec"
)

// The built-in kinds are presets of the generic scheme. These helpers give
// the tests written against the kinds' own parsers (signature_test.go) the
// same calls, run through the presets, so that those tests check the
// presets unchanged.

// schemeOf compiles the preset of kind, with auth and user.
func schemeOf(kind, auth, user string) *scheme {
	sc, err := compile(spec.Source{Name: "t", Kind: kind, Auth: auth, User: user}.Resolved())
	if err != nil {
		panic(err)
	}
	return sc
}

// verify checks a request to a source of the given kind.
func verify(kind, auth, user string, keys [][]byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	sc := schemeOf(kind, auth, user)
	if kind == "standard" {
		// The tests pass the key decoded, as the source holds it.
		sc.secretEncoding = spec.SecretText
	}
	rq := &request{h: h, raw: body, body: body, uri: "/hooks/t", canons: newCanonPool(1 << 20)}
	return sc.verify(keys, rq, now, tolerance)
}

// verifyHex checks a hex HMAC-SHA256 of the body after prefix.
func verifyHex(header, prefix string, keys [][]byte, body []byte) error {
	sc := schemeOf("sentry", "", "")
	sc.prefix = prefix
	sc.header = "X-Sig"
	return sc.verify(keys, &request{h: http.Header{"X-Sig": {header}}, raw: body, body: body}, time.Now(), time.Minute)
}

// parseHexSignature parses a hex HMAC-SHA256 after an optional prefix.
func parseHexSignature(v, prefix string) ([]byte, error) {
	sc := schemeOf("sentry", "", "")
	sc.prefix = prefix
	return sc.single(v)
}

// stripeSignature is a parsed Stripe-Signature header.
type stripeSignature struct {
	t   int64
	v1s [][]byte
}

func parseStripeSignature(v string) (stripeSignature, error) {
	sigs, ts, err := schemeOf("stripe", "", "").signatures(v)
	if err != nil {
		return stripeSignature{}, err
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || t < 0 {
		return stripeSignature{}, ErrBadSignature
	}
	return stripeSignature{t: t, v1s: sigs}, nil
}

func parseStandardSignature(v string) ([][]byte, error) {
	sigs, _, err := schemeOf("standard", "", "").signatures(v)
	return sigs, err
}
