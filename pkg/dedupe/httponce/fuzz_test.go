package httponce

import (
	"bytes"
	"fmt"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/oncegate/oncegate/pkg/canon"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
)

// fuzzRequest is one of FuzzHttponce's requests.
type fuzzRequest struct {
	user   string // the authenticated client; "" for none
	patch  bool   // PATCH, else POST
	id     string // the path parameter
	query  string // the query, without "?"; "" for none
	json   bool   // Content-Type application/json, else text/plain
	body   []byte
	key    string // the Idempotency-Key field value
	target string // set by build
}

func (q *fuzzRequest) method() string {
	if q.patch {
		return http.MethodPatch
	}
	return http.MethodPost
}

func (q *fuzzRequest) media() string {
	if q.json {
		return "application/json"
	}
	return "text/plain"
}

// build returns q as a request a server could have read, or nil if its
// target is not one (a byte a request line cannot carry, or no URL).
func (q *fuzzRequest) build(exec string) *http.Request {
	q.target = "/charges/" + q.id + "/refunds"
	if q.query != "" {
		q.target += "?" + q.query
	}
	if strings.ContainsFunc(q.target, func(c rune) bool { return c <= ' ' || c >= 0x7f }) {
		return nil
	}
	u, err := url.ParseRequestURI(q.target)
	if err != nil {
		return nil
	}
	r := httptest.NewRequest(q.method(), "/", bytes.NewReader(q.body))
	r.URL, r.RequestURI = u, q.target
	r.Header.Set("Content-Type", q.media())
	r.Header.Set(HeaderKey, q.key)
	r.Header.Set("X-Fuzz-Exec", exec)
	if q.user != "" {
		r.Header.Set("X-Fuzz-User", q.user)
	}
	return r
}

// payload is what a retry must repeat of q's body: its media type and its
// canonical JSON if it has one, else its bytes.
func (q *fuzzRequest) payload() string {
	media, _, _ := mime.ParseMediaType(q.media())
	if q.json {
		if c, err := canon.Append(nil, q.body); err == nil {
			return media + "\x00json\x00" + string(c)
		}
	}
	return media + "\x00raw\x00" + string(q.body)
}

// FuzzHttponce sends two requests with Idempotency-Keys, from fuzzed
// clients, methods, path parameters, queries, bodies and keys, through the
// middleware on a ServeMux route with a path parameter, over a real Badger
// ledger. The property a user cares about: the second request is answered
// with the first's response only when both come from the same
// authenticated client with the same key, method, request target and
// payload; otherwise its own handler runs, or it is refused (400, 403,
// 409, 413, 422, or the mux's own redirect or 404) — never the other's
// response.
// And a request that matches a first one whose response was kept gets that
// response, replayed.
func FuzzHttponce(f *testing.F) {
	l, err := badgerledger.Open(f.TempDir(), badgerledger.Options{NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.Close() })
	once, err := Middleware(l, Options{Client: func(r *http.Request) string {
		// Each exec is a world of its own: its clients are not those of
		// the execs before, whose keys are in the same ledger.
		if u := r.Header.Get("X-Fuzz-User"); u != "" {
			return r.Header.Get("X-Fuzz-Exec") + "/" + u
		}
		return ""
	}})
	if err != nil {
		f.Fatal(err)
	}
	var runs, execs atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("/charges/{id}/refunds", once(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Run", strconv.FormatInt(n, 10))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d,"refunded":%q}`, n, r.PathValue("id"))
	})))

	const key = `"6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f"`
	body := []byte(`{"amount":500,"currency":"eur"}`)
	for _, s := range []struct {
		userA, userB   string
		patchA, patchB bool
		idA, idB       string
		queryA, queryB string
		jsonA, jsonB   bool
		bodyA, bodyB   []byte
		keyA, keyB     string
	}{
		{"alice", "alice", false, false, "ch_1", "ch_1", "", "", true, true, body, body, key, key},                                         // a retry
		{"alice", "alice", false, false, "ch_1", "ch_2", "", "", true, true, body, body, key, key},                                         // another charge
		{"alice", "alice", false, false, "ch_1", "ch_1", "", "reason=dup", true, true, body, body, key, key},                               // another query
		{"alice", "bob", false, false, "ch_1", "ch_1", "", "", true, true, body, body, key, key},                                           // another client
		{"alice", "alice", false, true, "ch_1", "ch_1", "", "", true, true, body, body, key, key},                                          // another method
		{"alice", "alice", false, false, "ch_1", "ch_1", "", "", true, true, body, []byte(`{ "currency":"eur", "amount":500 }`), key, key}, // reworded JSON
		{"alice", "alice", false, false, "ch_1", "ch_1", "", "", true, false, body, body, key, key},                                        // another media type
		{"alice", "alice", false, false, "ch_1", "ch_1", "a=1&b=2", "b=2&a=1", true, true, body, body, key, key},                           // query reordered
		{"alice", "alice", false, false, "ch_%31", "ch_1", "", "", true, true, body, body, key, key},                                       // another spelling
		{"alice", "alice", false, false, "ch_1", "ch_1", "", "", true, true, body, body, key, strings.Trim(key, `"`)},                      // bare key
		{"", "", false, false, "ch_1", "ch_1", "", "", true, true, body, body, key, key},                                                   // no client
		{"alice", "alice", false, false, "..", "ch_1", "", "", false, false, []byte("x"), []byte("x"), "k", "k"},                           // a dot segment
	} {
		f.Add(s.userA, s.userB, s.patchA, s.patchB, s.idA, s.idB, s.queryA, s.queryB, s.jsonA, s.jsonB, s.bodyA, s.bodyB, s.keyA, s.keyB)
	}
	f.Fuzz(func(t *testing.T, userA, userB string, patchA, patchB bool, idA, idB, queryA, queryB string, jsonA, jsonB bool, bodyA, bodyB []byte, keyA, keyB string) {
		exec := strconv.FormatInt(execs.Add(1), 10)
		a := fuzzRequest{user: userA, patch: patchA, id: idA, query: queryA, json: jsonA, body: bodyA, key: keyA}
		b := fuzzRequest{user: userB, patch: patchB, id: idB, query: queryB, json: jsonB, body: bodyB, key: keyB}
		ra, rb := a.build(exec), b.build(exec)
		if ra == nil || rb == nil {
			return
		}
		first := httptest.NewRecorder()
		mux.ServeHTTP(first, ra)
		second := httptest.NewRecorder()
		mux.ServeHTTP(second, rb)

		ranFirst := first.Header().Get("X-Run") != "" && first.Code == http.StatusCreated
		replayed := second.Header().Get(HeaderReplayed) == "true"
		ka, errA := parseKey([]string{a.key})
		kb, errB := parseKey([]string{b.key})
		same := a.user != "" && a.user == b.user && errA == nil && errB == nil && ka == kb &&
			a.method() == b.method() && a.target == b.target && a.payload() == b.payload()
		describe := func() string {
			return fmt.Sprintf("first %s %q as %q, key %q: %d %q\nsecond %s %q as %q, key %q: %d %q (replayed %v)",
				a.method(), a.target, a.user, a.key, first.Code, first.Body.String(),
				b.method(), b.target, b.user, b.key, second.Code, second.Body.String(), replayed)
		}
		switch {
		case replayed && !same:
			t.Fatalf("a request that differs from the first got its response:\n%s", describe())
		case replayed && (!ranFirst || second.Code != first.Code || second.Body.String() != first.Body.String()):
			t.Fatalf("the replay is not the first response:\n%s", describe())
		case !replayed && same && ranFirst:
			t.Fatalf("the retry of a request whose response was kept was not replayed:\n%s", describe())
		case !replayed && ranFirst && second.Body.String() == first.Body.String():
			t.Fatalf("the second request got the first's response, unmarked:\n%s", describe())
		}
		if !replayed && second.Header().Get("X-Run") == "" {
			switch second.Code {
			case http.StatusBadRequest, http.StatusForbidden, http.StatusConflict, http.StatusRequestEntityTooLarge,
				http.StatusUnprocessableEntity,
				// The mux's own answers, for a path it cleans or does not
				// route: the middleware never saw the request.
				http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect,
				http.StatusNotFound, http.StatusMethodNotAllowed:
			default:
				t.Fatalf("the second request got neither its handler's answer nor a refusal:\n%s", describe())
			}
		}
	})
}
