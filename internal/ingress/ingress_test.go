package ingress_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncegate/oncegate/internal/ingress"
	"github.com/oncegate/oncegate/internal/ingress/spec"
	"github.com/oncegate/oncegate/internal/natstest"
)

// Secrets of the test sources, by environment variable.
var secrets = map[string]string{
	"GH_SECRET":       "It's a Secret to Everybody",
	"GH_OLD_SECRET":   "the secret before the rotation",
	"STRIPE_SECRET":   "whsec_test_stripe_endpoint_secret",
	"STANDARD_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	"SENTRY_SECRET":   "sentry-client-secret-0123456789abcdef",
	"AM_TOKEN":        "alertmanager-bearer-token",
	"AM_PASSWORD":     "alertmanager-basic-password",
	"HMAC_SECRET":     "generic-hmac-secret",
}

var sources = []spec.Source{
	{Name: "github", Kind: "github", Subject: "triggers.webhooks", SecretEnv: "GH_SECRET", PreviousSecretEnv: "GH_OLD_SECRET"},
	{Name: "stripe", Kind: "stripe", Subject: "triggers.webhooks", SecretEnv: "STRIPE_SECRET"},
	{Name: "svix", Kind: "standard", Subject: "triggers.webhooks", SecretEnv: "STANDARD_SECRET"},
	{Name: "sentry", Kind: "sentry", Subject: "triggers.webhooks", SecretEnv: "SENTRY_SECRET"},
	{Name: "alertmanager", Kind: "alertmanager", Subject: "triggers.alerts", Auth: spec.AuthBearer, SecretEnv: "AM_TOKEN"},
	{Name: "am-basic", Kind: "alertmanager", Subject: "triggers.alerts", Auth: spec.AuthBasic, User: "am", SecretEnv: "AM_PASSWORD"},
	{Name: "billing", Kind: spec.KindHMAC, Subject: "triggers.webhooks", SecretEnv: "HMAC_SECRET",
		Header: "X-Billing-Signature", DeliveryHeader: "X-Billing-Delivery", EventHeader: "X-Billing-Event"},
	{Name: "open", Kind: "github", Subject: "triggers.webhooks", Auth: spec.AuthNone},
	{Name: "unset", Kind: "github", Subject: "triggers.webhooks", SecretEnv: "NOT_SET_ANYWHERE"},
}

func source(name string) spec.Source {
	for _, s := range sources {
		if s.Name == name {
			return s
		}
	}
	panic("no source " + name)
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// env is a test ingress in front of a real JetStream stream.
type env struct {
	t     testing.TB
	js    jetstream.JetStream
	nc    *nats.Conn
	srv   *ingress.Server
	url   string
	reg   *prometheus.Registry
	now   time.Time
	cfg   *ingress.Options // the ingress's settings and sources
	nsrv  *server.Server
	store string
}

func newEnv(t testing.TB, edit func(*ingress.Options)) *env {
	t.Helper()
	e := &env{t: t, now: time.Now(), store: t.TempDir()}
	e.nsrv = natstest.RunServer(t, func(o *server.Options) { o.StoreDir = e.store })
	return e.finish(edit)
}

func (e *env) finish(edit func(*ingress.Options)) *env {
	t := e.t
	e.nc, e.js = natstest.Connect(t, e.nsrv, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	ctx := context.Background()
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "TRIGGERS", Subjects: []string{"triggers.>"}, Duplicates: 2 * time.Minute, Storage: jetstream.FileStorage,
	}); err != nil {
		t.Fatal(err)
	}
	e.cfg = &ingress.Options{
		MaxBodyBytes: 64 << 10, Tolerance: 5 * time.Minute, PublishTimeout: 2 * time.Second, RetryAfter: 3 * time.Second,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxInFlight: 16,
		Sources: sources,
	}
	if edit != nil {
		edit(e.cfg)
	}
	e.reg = prometheus.NewRegistry()
	srv, err := ingress.New(e.options(ingress.Options{
		JetStream: e.js, Registerer: e.reg,
		Getenv: func(k string) string { return secrets[k] },
		Now:    func() time.Time { return e.now },
	}))
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	e.url = hs.URL
	return e
}

// options returns e.cfg's settings and sources with o's JetStream,
// registerer, logger, lookups and clock.
func (e *env) options(o ingress.Options) ingress.Options {
	s := *e.cfg
	s.JetStream, s.Registerer, s.Logger, s.Getenv, s.ReadFile, s.Now = o.JetStream, o.Registerer, o.Logger, o.Getenv, o.ReadFile, o.Now
	return s
}

// post sends body to source with headers h and returns the status and
// the answer's body.
func (e *env) post(source string, h http.Header, body []byte) (int, http.Header, string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+ingress.PathPrefix+source, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// sign signs body as the named test source would be signed, at e.now.
func (e *env) sign(name string, body []byte, id, event string) http.Header {
	e.t.Helper()
	s := source(name)
	h, err := ingress.Sign(s, []byte(secrets[s.SecretEnv]), body, e.now, id, event)
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

// messages returns every message in the stream, in order.
func (e *env) messages() []*jetstream.RawStreamMsg {
	e.t.Helper()
	ctx := context.Background()
	st, err := e.js.Stream(ctx, "TRIGGERS")
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			e.t.Fatalf("GetMsg(%d): %v", seq, err)
		}
		out = append(out, m)
	}
	return out
}

// gauge returns the gauge name for source.
func (e *env) gauge(name, source string) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == source {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	e.t.Fatalf("no series %s for source %q", name, source)
	return 0
}

// outcome returns oncegate_ingress_requests_total for source and outcome.
func (e *env) outcome(source string, o ingress.Outcome) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "oncegate_ingress_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var src, out string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "source":
					src = l.GetValue()
				case "outcome":
					out = l.GetValue()
				}
			}
			if src == source && out == string(o) {
				return m.GetCounter().GetValue()
			}
		}
	}
	e.t.Fatalf("no series for source %q outcome %q", source, o)
	return 0
}

// TestProviders sends each provider's documented payload shape, signed as
// the provider signs it: one trigger per delivery (per alert for
// Alertmanager), with the delivery id as Nats-Msg-Id (followed, where the
// provider does not sign the delivery id, by a digest of the event type and
// the body: these golden ids change only with a change of the derivation,
// which would let a retry across an upgrade be stored twice); then the
// provider's retry, re-signed as providers re-sign a retry, which stores
// nothing new.
func TestProviders(t *testing.T) {
	tests := []struct {
		source, fixture, id, event string
		wantIDs                    []string // Nats-Msg-Id of each trigger
		wantEvents                 []string
	}{
		{"github", "github-push.json", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "push",
			[]string{"github:72d3162e-cc78-11e3-81ab-4c9367dc0958:xbFIlZkg5hzucmpcAn48VQ"}, []string{"push"}},
		{"stripe", "stripe-event.json", "", "",
			[]string{"stripe:evt_1NG8Du2eZvKYlo2CUI79vXWy"}, []string{"invoice.paid"}},
		{"svix", "standard-event.json", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", "",
			[]string{"svix:msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"}, []string{"contact.created"}},
		{"sentry", "sentry-issue.json", "6f4d7b0e-4a1c-4f9e-9a7a-0c2b1f8e5d33", "issue",
			[]string{"sentry:6f4d7b0e-4a1c-4f9e-9a7a-0c2b1f8e5d33:hVbUrVjBItGoDa2BR1Ec-g"}, []string{"issue"}},
		{"alertmanager", "alertmanager-group.json", "", "", []string{
			"alertmanager:c1d7b5e2a9f04417/2026-11-29T07:09:03.118Z/firing",
			"alertmanager:5a0f3c9be3d1a822/2026-11-29T06:40:03.118Z/resolved",
		}, []string{"firing", "resolved"}},
		{"am-basic", "alertmanager-group.json", "", "", []string{
			"am-basic:c1d7b5e2a9f04417/2026-11-29T07:09:03.118Z/firing",
			"am-basic:5a0f3c9be3d1a822/2026-11-29T06:40:03.118Z/resolved",
		}, []string{"firing", "resolved"}},
		{"billing", "stripe-event.json", "bill-0001", "invoice.paid",
			[]string{"billing:bill-0001:pJvJNBOG4LOj9RGrE02PTQ"}, []string{"invoice.paid"}},
	}
	for _, tt := range tests {
		t.Run(tt.source, func(t *testing.T) {
			e := newEnv(t, nil)
			body := fixture(t, tt.fixture)
			status, _, answer := e.post(tt.source, e.sign(tt.source, body, tt.id, tt.event), body)
			if status != http.StatusOK {
				t.Fatalf("POST %s = %d %q; want 200", tt.source, status, answer)
			}
			msgs := e.messages()
			if len(msgs) != len(tt.wantIDs) {
				t.Fatalf("stream has %d triggers; want %d", len(msgs), len(tt.wantIDs))
			}
			for i, m := range msgs {
				if got := m.Header.Get(nats.MsgIdHdr); got != tt.wantIDs[i] {
					t.Errorf("trigger %d Nats-Msg-Id = %q; want %q", i, got, tt.wantIDs[i])
				}
				if got := m.Header.Get(ingress.HeaderEvent); got != tt.wantEvents[i] {
					t.Errorf("trigger %d %s = %q; want %q", i, ingress.HeaderEvent, got, tt.wantEvents[i])
				}
				if got := m.Header.Get(ingress.HeaderSource); got != tt.source {
					t.Errorf("trigger %d %s = %q; want %q", i, ingress.HeaderSource, got, tt.source)
				}
				if len(msgs) == 1 && !bytes.Equal(m.Data, body) {
					t.Errorf("trigger body differs from the payload:\n got %s\nwant %s", m.Data, body)
				}
			}
			// The provider retries (its timestamp moves on): 200, no new trigger.
			e.now = e.now.Add(40 * time.Second)
			status, _, answer = e.post(tt.source, e.sign(tt.source, body, tt.id, tt.event), body)
			if status != http.StatusOK || !strings.Contains(answer, `"stored":0`) {
				t.Fatalf("retry: POST %s = %d %q; want 200 with nothing stored", tt.source, status, answer)
			}
			if n := len(e.messages()); n != len(tt.wantIDs) {
				t.Fatalf("after the retry the stream has %d triggers; want %d", n, len(tt.wantIDs))
			}
			if got := e.outcome(tt.source, ingress.OutcomeDuplicate); got != 1 {
				t.Errorf("duplicate outcomes = %v; want 1", got)
			}
		})
	}
}

// The per-alert body is the notification with the one alert in "alert",
// its own status, and occurrence (startsAt) added: what the built-in
// alerts pipeline keys on (/alert/fingerprint, /alert/occurrence).
func TestAlertmanagerSplit(t *testing.T) {
	e := newEnv(t, nil)
	body := fixture(t, "alertmanager-group.json")
	if status, _, answer := e.post("alertmanager", e.sign("alertmanager", body, "", ""), body); status != http.StatusOK {
		t.Fatalf("POST = %d %q", status, answer)
	}
	msgs := e.messages()
	if len(msgs) != 2 {
		t.Fatalf("%d triggers; want 2", len(msgs))
	}
	var doc struct {
		Status   string `json:"status"`
		Receiver string `json:"receiver"`
		GroupKey string `json:"groupKey"`
		Alerts   any    `json:"alerts"`
		Alert    struct {
			Fingerprint string            `json:"fingerprint"`
			Occurrence  string            `json:"occurrence"`
			StartsAt    string            `json:"startsAt"`
			Labels      map[string]string `json:"labels"`
		} `json:"alert"`
	}
	if err := json.Unmarshal(msgs[1].Data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Status != "resolved" || doc.Receiver != "oncegate" || doc.Alerts != nil || doc.GroupKey == "" ||
		doc.Alert.Fingerprint != "5a0f3c9be3d1a822" || doc.Alert.Occurrence != doc.Alert.StartsAt || doc.Alert.Labels["instance"] != "db-3:9100" {
		t.Errorf("second alert's trigger = %s", msgs[1].Data)
	}
}

func TestGitHubPingStoresNothing(t *testing.T) {
	e := newEnv(t, nil)
	body := fixture(t, "github-ping.json")
	status, _, answer := e.post("github", e.sign("github", body, "4b3f0e00-d7a1-11e3-8f3b-7e3f1a2a6b1d", "ping"), body)
	if status != http.StatusOK {
		t.Fatalf("ping = %d %q; want 200", status, answer)
	}
	if n := len(e.messages()); n != 0 {
		t.Fatalf("a ping stored %d triggers", n)
	}
	if got := e.outcome("github", ingress.OutcomePing); got != 1 {
		t.Errorf("ping outcomes = %v; want 1", got)
	}
}

// During a rotation the previous secret is accepted too; a third is not.
func TestRotation(t *testing.T) {
	e := newEnv(t, nil)
	body := fixture(t, "github-push.json")
	for i, sec := range []string{secrets["GH_SECRET"], secrets["GH_OLD_SECRET"]} {
		h, _ := ingress.Sign(source("github"), []byte(sec), body, e.now, "rot-"+strconv.Itoa(i), "push")
		if status, _, answer := e.post("github", h, body); status != http.StatusOK {
			t.Fatalf("secret %d: %d %q; want 200", i, status, answer)
		}
	}
	h, _ := ingress.Sign(source("github"), []byte("a stranger's secret"), body, e.now, "rot-2", "push")
	if status, _, _ := e.post("github", h, body); status != http.StatusUnauthorized {
		t.Fatalf("a third secret: %d; want 401", status)
	}
	if n := len(e.messages()); n != 2 {
		t.Fatalf("%d triggers; want 2", n)
	}
}

// Each bad input gets its status, is counted by its reason, and puts
// nothing in the stream.
func TestBadInput(t *testing.T) {
	e := newEnv(t, nil)
	push := fixture(t, "github-push.json")
	stripeBody := fixture(t, "stripe-event.json")
	big := append([]byte(`{"pad":"`), append(bytes.Repeat([]byte("x"), 70<<10), `"}`...)...)
	withHeader := func(h http.Header, k, v string) http.Header { h = h.Clone(); h.Set(k, v); return h }
	without := func(h http.Header, k string) http.Header { h = h.Clone(); h.Del(k); return h }
	gh := e.sign("github", push, "d-1", "push")
	old := e.now
	e.now = old.Add(-6 * time.Minute)
	staleStripe := e.sign("stripe", stripeBody, "", "")
	staleStandard := e.sign("svix", stripeBody, "msg_stale", "")
	e.now = old.Add(6 * time.Minute)
	futureStandard := e.sign("svix", stripeBody, "msg_future", "")
	e.now = old
	basicWrong := http.Header{"Content-Type": {"application/json"},
		"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("am:wrong"))}}

	tests := []struct {
		name   string
		method string
		source string
		h      http.Header
		body   []byte
		status int
		o      ingress.Outcome
	}{
		{"no signature", "POST", "github", without(gh, ingress.HeaderGitHubSignature), push, 401, ingress.OutcomeNoSignature},
		{"wrong signature", "POST", "github", withHeader(gh, ingress.HeaderGitHubSignature, "sha256="+strings.Repeat("0", 64)), push, 401, ingress.OutcomeBadSignature},
		{"malformed signature", "POST", "github", withHeader(gh, ingress.HeaderGitHubSignature, "sha1=abc"), push, 401, ingress.OutcomeBadSignature},
		{"body changed after signing", "POST", "github", gh, append([]byte(" "), push...), 401, ingress.OutcomeBadSignature},
		{"stripe stale timestamp", "POST", "stripe", staleStripe, stripeBody, 401, ingress.OutcomeStale},
		{"stripe no v1", "POST", "stripe", withHeader(staleStripe, ingress.HeaderStripeSignature, "t=1,v0=00"), stripeBody, 401, ingress.OutcomeBadSignature},
		{"standard stale timestamp", "POST", "svix", staleStandard, stripeBody, 401, ingress.OutcomeStale},
		{"standard timestamp from the future", "POST", "svix", futureStandard, stripeBody, 401, ingress.OutcomeStale},
		{"sentry wrong signature", "POST", "sentry", withHeader(e.sign("sentry", push, "r-1", ""), ingress.HeaderSentrySignature, strings.Repeat("ab", 32)), push, 401, ingress.OutcomeBadSignature},
		{"alertmanager wrong token", "POST", "alertmanager", http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer nope"}}, fixture(t, "alertmanager-group.json"), 401, ingress.OutcomeBadSignature},
		{"alertmanager no token", "POST", "alertmanager", http.Header{"Content-Type": {"application/json"}}, fixture(t, "alertmanager-group.json"), 401, ingress.OutcomeNoSignature},
		{"alertmanager wrong password", "POST", "am-basic", basicWrong, fixture(t, "alertmanager-group.json"), 401, ingress.OutcomeBadSignature},
		{"body over the limit", "POST", "github", e.sign("github", big, "d-big", "push"), big, 413, ingress.OutcomeTooLarge},
		{"wrong method", "GET", "github", gh, nil, 405, ingress.OutcomeMethod},
		{"wrong content type", "POST", "github", withHeader(gh, "Content-Type", "application/x-www-form-urlencoded"), push, 415, ingress.OutcomeContentType},
		{"unknown source", "POST", "gitlab", gh, push, 404, ingress.OutcomeUnknownSource},
		{"not JSON", "POST", "github", e.sign("github", []byte("payload=%7B%7D"), "d-2", "push"), []byte("payload=%7B%7D"), 400, ingress.OutcomeBadRequest},
		{"no delivery id", "POST", "github", without(gh, ingress.HeaderGitHubDelivery), push, 400, ingress.OutcomeBadRequest},
		{"stripe event without id", "POST", "stripe", e.sign("stripe", []byte(`{"type":"invoice.paid"}`), "", ""), []byte(`{"type":"invoice.paid"}`), 400, ingress.OutcomeBadRequest},
		{"alertmanager without alerts", "POST", "alertmanager", e.sign("alertmanager", []byte(`{"version":"4","alerts":[]}`), "", ""), []byte(`{"version":"4","alerts":[]}`), 400, ingress.OutcomeBadRequest},
		{"secret not set", "POST", "unset", gh, push, 503, ingress.OutcomeNoSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.source
			if tt.o == ingress.OutcomeUnknownSource {
				src = "unknown"
			}
			before := e.outcome(src, tt.o)
			req, _ := http.NewRequest(tt.method, e.url+ingress.PathPrefix+tt.source, bytes.NewReader(tt.body))
			req.Header = tt.h.Clone()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("%s = %d %q; want %d", tt.name, resp.StatusCode, answer, tt.status)
			}
			if tt.status == 503 && resp.Header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After")
			}
			if tt.status == 405 && resp.Header.Get("Allow") != "POST" {
				t.Errorf("405 with Allow %q; want POST", resp.Header.Get("Allow"))
			}
			if got := e.outcome(src, tt.o); got != before+1 {
				t.Errorf("outcome %s counted %v → %v; want one more", tt.o, before, got)
			}
			if n := len(e.messages()); n != 0 {
				t.Fatalf("%s stored %d triggers", tt.name, n)
			}
		})
	}
}

// A body sent without a Content-Length is cut off at the limit, not read
// whole.
func TestChunkedBodyOverLimit(t *testing.T) {
	e := newEnv(t, nil)
	pr, pw := io.Pipe()
	go func() {
		chunk := bytes.Repeat([]byte("x"), 4<<10)
		pw.Write([]byte(`{"pad":"`))
		// Far more than the limit: the server must answer before the end.
		for range 4096 {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	defer pw.CloseWithError(io.ErrClosedPipe)
	req, _ := http.NewRequest(http.MethodPost, e.url+"/hooks/open", pr)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(ingress.HeaderGitHubDelivery, "chunked")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked body over the limit = %d; want 413", resp.StatusCode)
	}
	if n := len(e.messages()); n != 0 {
		t.Fatalf("stored %d triggers", n)
	}
}

// A source's requests in flight are limited; past the limit the answer is
// 503 with Retry-After.
func TestInFlightLimit(t *testing.T) {
	e := newEnv(t, func(c *ingress.Options) { c.MaxInFlight = 1 })
	pr, pw := io.Pipe()
	defer pw.CloseWithError(io.ErrClosedPipe) // never leave the slow request hanging
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, e.url+"/hooks/open", pr)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(ingress.HeaderGitHubDelivery, "slow")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	pw.Write([]byte(`{"slow":`)) // the first request holds its slot while its body trickles in
	deadline := time.Now().Add(10 * time.Second)
	for e.gauge("oncegate_ingress_in_flight", "open") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the slow request never took its slot")
		}
		time.Sleep(2 * time.Millisecond)
	}
	status, h, _ := e.post("open", http.Header{"Content-Type": {"application/json"}, ingress.HeaderGitHubDelivery: {"fast"}}, []byte(`{}`))
	if status != http.StatusServiceUnavailable || h.Get("Retry-After") != "3" {
		t.Errorf("a second request in flight = %d (Retry-After %q); want 503 with Retry-After 3", status, h.Get("Retry-After"))
	}
	pw.Write([]byte(`true}`))
	pw.Close()
	if status := <-first; status != http.StatusOK {
		t.Fatalf("the slow request = %d; want 200", status)
	}
	if got := e.outcome("open", ingress.OutcomeBusy); got != 1 {
		t.Errorf("busy outcomes = %v; want 1", got)
	}
	if n := len(e.messages()); n != 1 {
		t.Errorf("%d triggers; want the slow one only", n)
	}
}

// With NATS stopped the ingress answers 503 with Retry-After and stores
// nothing; once NATS is back, the provider's retry is stored, once.
func TestNATSStopped(t *testing.T) {
	store := t.TempDir()
	s1 := natstest.RunServer(t, func(o *server.Options) { o.StoreDir = store })
	port := s1.Addr().(*net.TCPAddr).Port
	e := &env{t: t, now: time.Now(), store: store, nsrv: s1}
	e.finish(nil)
	body := fixture(t, "github-push.json")
	h := e.sign("github", body, "during-outage", "push")

	s1.Shutdown()
	s1.WaitForShutdown()
	status, rh, answer := e.post("github", h, body)
	if status != http.StatusServiceUnavailable || rh.Get("Retry-After") == "" {
		t.Fatalf("with NATS stopped: %d (Retry-After %q) %q; want 503 with Retry-After", status, rh.Get("Retry-After"), answer)
	}
	if got := e.outcome("github", ingress.OutcomeUnavailable); got != 1 {
		t.Errorf("unavailable outcomes = %v; want 1", got)
	}

	natstest.RunServer(t, func(o *server.Options) { o.StoreDir = store; o.Port = port })
	deadline := time.Now().Add(15 * time.Second)
	for !e.nc.IsConnected() {
		if time.Now().After(deadline) {
			t.Fatal("the ingress's connection did not come back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The provider retries, twice (its first retry's answer was lost).
	for i := range 2 {
		status, _, answer = e.post("github", h, body)
		if status != http.StatusOK {
			t.Fatalf("retry %d after NATS came back: %d %q; want 200", i, status, answer)
		}
	}
	msgs := e.messages()
	if len(msgs) != 1 || !strings.HasPrefix(msgs[0].Header.Get(nats.MsgIdHdr), "github:during-outage:") {
		t.Fatalf("stream holds %d triggers; want the retried delivery once", len(msgs))
	}
}

// A stream that does not capture the subject (JetStream has no answer
// for it) is 503 too.
func TestNoStreamIs503(t *testing.T) {
	e := newEnv(t, nil)
	if err := e.js.DeleteStream(context.Background(), "TRIGGERS"); err != nil {
		t.Fatal(err)
	}
	body := fixture(t, "github-push.json")
	status, h, answer := e.post("github", e.sign("github", body, "no-stream", "push"), body)
	if status != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
		t.Fatalf("no stream: %d %q; want 503 with Retry-After", status, answer)
	}
}

// Start serves on the configured address with the configured timeouts;
// Shutdown stops it.
func TestStartShutdown(t *testing.T) {
	e := newEnv(t, func(c *ingress.Options) { c.Listen = ":0" })
	addr, err := e.srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("listen :0 serves on %s; want loopback", addr)
	}
	e.url = "http://" + addr
	body := fixture(t, "github-push.json")
	if status, _, answer := e.post("github", e.sign("github", body, "started", "push"), body); status != http.StatusOK {
		t.Fatalf("POST = %d %q", status, answer)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Post(e.url+"/hooks/github", "application/json", bytes.NewReader(body)); err == nil {
		t.Fatal("still serving after Shutdown")
	}
}

// A source whose secret is not set answers 503, and says why in the log
// once, naming the variable and never a secret.
func TestMissingSecretLogsOnce(t *testing.T) {
	e := newEnv(t, nil)
	var logs lockedBuffer
	srv, err := ingress.New(e.options(ingress.Options{
		JetStream: e.js, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Getenv: func(k string) string { return secrets[k] },
	}))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	e.url = hs.URL
	body := fixture(t, "github-push.json")
	for range 3 {
		if status, h, _ := e.post("unset", e.sign("github", body, "d-unset", "push"), body); status != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
			t.Fatalf("a source without its secret = %d; want 503 with Retry-After", status)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "webhook source has no secret"); n != 1 || !strings.Contains(out, "NOT_SET_ANYWHERE") {
		t.Errorf("logged %d times (want once, naming the variable):\n%s", n, out)
	}
	for _, v := range secrets {
		if strings.Contains(out, v) {
			t.Errorf("the log holds a secret:\n%s", out)
		}
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTraceContextCarried: the W3C trace context of a webhook request goes
// onto its triggers, so the consumer's trace continues it; an oversized
// tracestate is dropped, not cut.
func TestTraceContextCarried(t *testing.T) {
	e := newEnv(t, nil)
	body := fixture(t, "alertmanager-group.json")
	h := e.sign("alertmanager", body, "", "")
	h.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	h.Set("Tracestate", strings.Repeat("x", 513))
	if status, _, answer := e.post("alertmanager", h, body); status != http.StatusOK {
		t.Fatalf("POST = %d %q; want 200", status, answer)
	}
	msgs := e.messages()
	if len(msgs) != 2 {
		t.Fatalf("stream has %d triggers; want 2", len(msgs))
	}
	for i, m := range msgs {
		if got := m.Header.Get("traceparent"); got != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
			t.Errorf("trigger %d traceparent = %q", i, got)
		}
		if got := m.Header.Get("tracestate"); got != "" {
			t.Errorf("trigger %d carries a %d-byte tracestate", i, len(got))
		}
	}
}
