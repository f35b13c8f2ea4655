package ingress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/ingress"
)

// doorSources are the test sources FuzzIngressDoor sends to: every one
// that verifies its requests (a signature, a bearer token, a password),
// and one whose secret is not set.
var doorSources = []string{"github", "stripe", "svix", "sentry", "alertmanager", "am-basic", "billing", "unset"}

// FuzzIngressDoor is the ingress's threat line, tried by the fuzzer as
// anyone on the internet who knows the URL would: a request of any body
// and any signature, token, delivery or timestamp headers, to any source
// that verifies, through the real ingress in front of a real JetStream
// stream. Nothing is published unless the request is verified: a request
// the fuzzer made up, or one signed properly whose body was then changed,
// is never answered 2xx and never adds a message to the stream. A request
// signed with the source's secret that is answered 2xx publishes the body
// it carried, byte for byte (an Alertmanager group: one JSON document per
// alert).
func FuzzIngressDoor(f *testing.F) {
	push := fixture(f, "github-push.json")
	stripeBody := fixture(f, "stripe-event.json")
	group := fixture(f, "alertmanager-group.json")
	for i := range doorSources {
		f.Add(uint8(i), push, "sha256="+strings.Repeat("0", 64), "Bearer alertmanager-bearer-token-x", "d-1", true, uint16(0))
		f.Add(uint8(i), push, "", "", "d-2", true, uint16(7))
	}
	f.Add(uint8(1), stripeBody, "t=1,v1="+strings.Repeat("ab", 32), "", "", true, uint16(0))
	f.Add(uint8(4), group, "", "Bearer alertmanager-bearer-token", "", false, uint16(0)) // the right token: the one way in without a signature
	f.Add(uint8(4), group, "", "Bearer alertmanager-bearer-token ", "", false, uint16(0))
	f.Add(uint8(5), group, "", "Basic YW06YWxlcnRtYW5hZ2VyLWJhc2ljLXBhc3N3b3Jk", "", false, uint16(0))
	f.Add(uint8(2), []byte(`{"a":1}`), "v1,AAAA v1,", "", "msg_1", false, uint16(0))
	f.Add(uint8(0), []byte(`[]`), "sha256=", "", "", false, uint16(0))

	e := newEnv(f, nil)
	ctx := context.Background()
	st, err := e.js.Stream(ctx, "TRIGGERS")
	if err != nil {
		f.Fatal(err)
	}
	lastSeq := func(t *testing.T) uint64 {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}

	f.Fuzz(func(t *testing.T, which uint8, body []byte, sig, auth, delivery string, sign bool, tamper uint16) {
		name := doorSources[int(which)%len(doorSources)]
		src := source(name)
		h := http.Header{}
		// A made-up request carries whatever the fuzzer chose in every
		// header a source reads its proof and ids from.
		for _, k := range []string{ingress.HeaderGitHubSignature, ingress.HeaderStripeSignature, ingress.HeaderStandardSig,
			ingress.HeaderSentrySignature, "X-Billing-Signature"} {
			h.Set(k, sig)
		}
		for _, k := range []string{ingress.HeaderGitHubDelivery, ingress.HeaderStandardID, "X-Billing-Delivery", "Request-Id"} {
			h.Set(k, delivery)
		}
		h.Set(ingress.HeaderStandardTime, delivery)
		h.Set("Authorization", auth)
		verified := false
		// The right bearer token or password is the one way in without a
		// signature (the fuzzer finds it only where it is seeded): a
		// request that holds it is the token's holder, however it is
		// spaced or spelled around it.
		if strings.Contains(auth, secrets["AM_TOKEN"]) && name == "alertmanager" ||
			strings.Contains(auth, "YW06YWxlcnRtYW5hZ2VyLWJhc2ljLXBhc3N3b3Jk") && name == "am-basic" {
			verified = true
		}
		sent := body
		if sign && name != "unset" {
			signed, err := ingress.Sign(src, []byte(secrets[src.SecretEnv]), body, e.now, delivery, "push")
			if err != nil {
				t.Skip(err) // an id the provider's format cannot carry
			}
			for k, v := range signed {
				h[k] = v
			}
			verified = true
			if tamper != 0 { // a body changed after its signing is no longer the provider's
				sent = bytes.Clone(body)
				if len(sent) == 0 {
					sent = []byte{byte(tamper)}
				} else {
					sent[int(tamper)%len(sent)] ^= byte(tamper>>8) | 1
				}
				verified = src.SecretEnv == "AM_TOKEN" || src.SecretEnv == "AM_PASSWORD" // credentials do not cover the body
			}
		}
		if h.Get("Content-Type") == "" {
			h.Set("Content-Type", "application/json")
		}
		req := httptest.NewRequest(http.MethodPost, ingress.PathPrefix+name, bytes.NewReader(sent))
		req.Header = h
		before := lastSeq(t)
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		after := lastSeq(t)

		if !verified {
			if rec.Code < 300 {
				t.Fatalf("%s: an unverified request was answered %d %q", name, rec.Code, rec.Body.String())
			}
			if after != before {
				t.Fatalf("%s: an unverified request (answered %d) published %d messages", name, rec.Code, after-before)
			}
			return
		}
		if rec.Code >= 300 {
			if after != before {
				t.Fatalf("%s: a refused request (answered %d %q) published %d messages", name, rec.Code, rec.Body.String(), after-before)
			}
			return
		}
		for seq := before + 1; seq <= after; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			if src.Kind == "alertmanager" {
				if !json.Valid(m.Data) {
					t.Fatalf("%s: published an alert that is not JSON: %q", name, m.Data)
				}
				continue
			}
			if !bytes.Equal(m.Data, sent) {
				t.Fatalf("%s: published %q for a body of %q", name, m.Data, sent)
			}
		}
	})
}
