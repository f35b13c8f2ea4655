package ingress

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ingress/spec"
)

// verifyAt checks a request to a source at now, with a five-minute
// tolerance.
func verifyAt(t *testing.T, src spec.Source, key string, h http.Header, uri string, body []byte, now time.Time) error {
	t.Helper()
	sc, err := compile(src.Resolved())
	if err != nil {
		t.Fatal(err)
	}
	rq := &request{h: h, raw: body, body: body, uri: uri, canons: newCanonPool(1 << 20)}
	if sc.form && !looksJSON(body) {
		if err := rq.readForm(sc.payload); err != nil {
			t.Fatal(err)
		}
	}
	return sc.verify([][]byte{[]byte(key)}, rq, now, 5*time.Minute)
}

// Slack's worked example in "Verifying requests from Slack"
// (https://api.slack.com/authentication/verifying-requests-from-slack): a
// slash command signed with the documented signing secret and timestamp.
func TestSlackDocumentedVector(t *testing.T) {
	const secret = "8f742231b10e8888abcd99yyyzzz85a5"
	body, err := os.ReadFile("testdata/slack-command.form")
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", "1531420618")
	h.Set("X-Slack-Signature", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503")
	src := spec.Source{Name: "slack", Kind: "slack"}
	at := time.Unix(1531420618, 0)
	if err := verifyAt(t, src, secret, h, "/hooks/slack", body, at.Add(30*time.Second)); err != nil {
		t.Fatalf("Slack's documented request: %v", err)
	}
	tampered := bytes.Replace(body, []byte("user_name=roadrunner"), []byte("user_name=coyote"), 1)
	if err := verifyAt(t, src, secret, h, "/hooks/slack", tampered, at); !errors.Is(err, ErrBadSignature) {
		t.Errorf("tampered body: %v; want ErrBadSignature", err)
	}
	if err := verifyAt(t, src, "another secret", h, "/hooks/slack", body, at); !errors.Is(err, ErrBadSignature) {
		t.Errorf("wrong secret: %v; want ErrBadSignature", err)
	}
	err = verifyAt(t, src, secret, h, "/hooks/slack", body, at.Add(10*time.Minute+time.Second))
	if !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "signed 10m1s ago") {
		t.Errorf("ten minutes later: %v; want ErrStale saying \"signed 10m1s ago\"", err)
	}
	err = verifyAt(t, src, secret, h, "/hooks/slack", body, at.Add(-9*time.Minute-59*time.Second))
	if !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "signed 9m59s in the future") {
		t.Errorf("ten minutes earlier: %v; want ErrStale saying \"signed 9m59s in the future\"", err)
	}
}

// Twilio's worked example in "Webhooks security"
// (https://www.twilio.com/docs/usage/webhooks/webhooks-security): the URL
// https://mycompany.com/myapp.php?foo=1&bar=2 called with five POST
// parameters, signed with the auth token 12345 (HMAC-SHA1 of the URL and
// the parameters sorted by name, base64).
func TestTwilioDocumentedVector(t *testing.T) {
	form := url.Values{"CallSid": {"CA1234567890ABCDE"}, "Caller": {"+12349013030"}, "Digits": {"1234"},
		"From": {"+12349013030"}, "To": {"+18005551212"}}
	body := []byte(form.Encode())
	h := http.Header{"X-Twilio-Signature": {"0/KCTR6DLpKmkAf8muzZqo1nDgQ="}}
	src := spec.Source{Name: "twilio", Kind: "twilio", PublicURL: "https://mycompany.com"}
	now := time.Now()
	if err := verifyAt(t, src, "12345", h, "/myapp.php?foo=1&bar=2", body, now); err != nil {
		t.Fatalf("Twilio's documented request: %v", err)
	}
	if err := verifyAt(t, src, "12345", h, "/myapp.php?foo=1&bar=3", body, now); !errors.Is(err, ErrBadSignature) {
		t.Errorf("another URL: %v; want ErrBadSignature", err)
	}
	form.Set("Digits", "1235")
	if err := verifyAt(t, src, "12345", h, "/myapp.php?foo=1&bar=2", []byte(form.Encode()), now); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a parameter changed: %v; want ErrBadSignature", err)
	}
}

// A Standard Webhooks header with one malformed entry beside a valid one
// is accepted on the valid one, as the reference libraries accept it; the
// malformed entry alone is refused.
func TestStandardMalformedEntryBesideValid(t *testing.T) {
	key, err := decodeStandardSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"test": 2432232314}`)
	at := time.Unix(1614265330, 0)
	for _, tt := range []struct {
		header string
		want   error
	}{
		{"v1,not*base64 v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", nil},
		{"v1," + base64.StdEncoding.EncodeToString([]byte("short")) + " v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", nil},
		{"garbage v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", nil},
		{"v1,not*base64", ErrBadSignature},
	} {
		h := http.Header{}
		h.Set(HeaderStandardID, "msg_p5jXN8AQM9LWM0D4loKWxJek")
		h.Set(HeaderStandardTime, "1614265330")
		h.Set(HeaderStandardSig, tt.header)
		err := verify("standard", "", "", [][]byte{key}, h, body, at, 5*time.Minute)
		if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
			t.Errorf("webhook-signature %q: %v; want %v", tt.header, err, tt.want)
		}
	}
}

// Ed25519, for providers that sign with keys: the source's secret is the
// public key; the signature covers the timestamp and the body, as Discord
// signs interactions, here defined in configuration only.
func TestEd25519(t *testing.T) {
	seed := bytes.Repeat([]byte{7}, 32)
	priv := base64.StdEncoding.EncodeToString(seed)
	src := spec.Source{Name: "keys", Subject: "triggers.webhooks", Signature: spec.Signature{
		Algorithm: spec.Ed25519, Header: "X-Signature-Ed25519", Signed: "{timestamp}{body}",
		Timestamp: "header:X-Signature-Timestamp", SecretEncoding: spec.SecretBase64}}
	body := []byte(`{"type":1,"id":"787"}`)
	now := time.Unix(1_800_000_000, 0)
	h, err := SignDelivery(src, Delivery{Secret: []byte(priv), Body: body, Time: now})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := compile(src.Resolved())
	if err != nil {
		t.Fatal(err)
	}
	c := loadCreds(secretRef{env: "PUB"}, secretRef{}, spec.SecretBase64, spec.Ed25519,
		func(string) string {
			return base64.StdEncoding.EncodeToString(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey))
		}, nil)
	if c.keys == nil {
		t.Fatalf("the public key does not load: %s", c.missing)
	}
	rq := &request{h: h, raw: body, body: body}
	if err := sc.verify(c.keys, rq, now, time.Minute); err != nil {
		t.Fatalf("a signed request: %v", err)
	}
	rq = &request{h: h, raw: []byte(`{"type":1,"id":"788"}`)}
	if err := sc.verify(c.keys, rq, now, time.Minute); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a tampered body: %v; want ErrBadSignature", err)
	}
	if err := sc.verify(c.keys, &request{h: h, raw: body}, now.Add(time.Hour), time.Minute); !errors.Is(err, ErrStale) {
		t.Errorf("an hour later: %v; want ErrStale", err)
	}
}
