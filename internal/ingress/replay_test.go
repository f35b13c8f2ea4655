package ingress_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/ingress"
)

// TestReplayCannotPreempt: for each kind whose delivery id and event type
// come from headers the provider does not sign (github, sentry, hmac),
// someone holding one old signed body sends it under the delivery id the
// provider will use next, and with the event header flipped. The real
// delivery that follows is stored (not answered as a duplicate of the
// replay), the provider's retry of it is a duplicate, and the stream keeps
// it as it came: its body under its delivery id and event.
func TestReplayCannotPreempt(t *testing.T) {
	for _, name := range []string{"github", "sentry", "billing"} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			push := fixture(t, "github-push.json")
			old := bytes.Replace(push, []byte(`"ref": "refs/heads/main"`), []byte(`"ref": "refs/heads/old"`), 1)
			if bytes.Equal(old, push) {
				t.Fatal("the fixture has no ref to change")
			}
			post := func(what string, h http.Header, body []byte, want string) {
				t.Helper()
				status, _, answer := e.post(name, h, body)
				if status != http.StatusOK || !strings.Contains(answer, want) {
					t.Fatalf("%s: POST %s = %d %q; want 200 with %s", what, name, status, strings.TrimSpace(answer), want)
				}
			}
			post("the old delivery", e.sign(name, old, "d-1", "push"), old, `"stored":1`)

			// The replay: the old body and its signature under the next
			// delivery id, and again with another event type.
			replay := e.sign(name, old, "d-1", "push")
			for _, h := range []string{ingress.HeaderGitHubDelivery, ingress.HeaderSentryRequestID, "X-Billing-Delivery"} {
				if replay.Get(h) != "" {
					replay.Set(h, "d-2")
				}
			}
			status, _, answer := e.post(name, replay, old)
			t.Logf("the replay under d-2: %d %s", status, strings.TrimSpace(answer))
			for _, h := range []string{ingress.HeaderGitHubEvent, ingress.HeaderSentryResource, "X-Billing-Event"} {
				if replay.Get(h) != "" {
					replay.Set(h, "release")
				}
			}
			status, _, answer = e.post(name, replay, old)
			t.Logf("the replay under d-2 as another event: %d %s", status, strings.TrimSpace(answer))

			// The real delivery d-2, then the provider's retry of it.
			post("the real delivery d-2", e.sign(name, push, "d-2", "push"), push, `"stored":1`)
			post("the provider's retry of d-2", e.sign(name, push, "d-2", "push"), push, `"duplicates":1`)

			var found int
			for _, m := range e.messages() {
				if m.Header.Get(ingress.HeaderDelivery) == "d-2" && bytes.Equal(m.Data, push) {
					found++
					if got := m.Header.Get(ingress.HeaderEvent); got != "push" {
						t.Errorf("the real delivery d-2 is stored with %s %q; want push", ingress.HeaderEvent, got)
					}
				}
			}
			if found != 1 {
				t.Errorf("the real delivery d-2 is in the stream %d times; want once", found)
			}
		})
	}
}
