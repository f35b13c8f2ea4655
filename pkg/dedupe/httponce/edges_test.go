package httponce_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
	"github.com/oncegate/oncegate/pkg/dedupe/httponce"
)

// byUser is the tests' Options.Client: the basic-auth user stands for the
// principal an authentication middleware would have verified.
func byUser(r *http.Request) string {
	user, _, _ := r.BasicAuth()
	return user
}

// memLedger is an in-memory Badger ledger, closed at the test's end.
func memLedger(t *testing.T) *badgerledger.Ledger {
	t.Helper()
	l, err := badgerledger.Open("", badgerledger.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// serve serves mux on a real net/http server whose panic reports are
// discarded (some handlers here panic on purpose).
func serve(t *testing.T, mux http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// send sends one request as user (none if ""), with key (none if "").
func send(t *testing.T, method, url, user, key, body string) (reply, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, "pw")
	}
	if key != "" {
		req.Header.Set(httponce.HeaderKey, key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}, err
}

// runs counts a handler's runs, per request target.
type runs struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *runs) add(target string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[target]++
	return c.n[target]
}

func (c *runs) get(target string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[target]
}

// TestTargetIsPartOfTheRequest: on a route with a path parameter, the key
// and body sent first for one resource and then for another are two
// requests, and the second is refused with 422 (it was replayed: charge
// ch_2 was never refunded, and its client was told it was); so is the key
// with another query string. The same target is a retry, replayed.
func TestTargetIsPartOfTheRequest(t *testing.T) {
	once, err := httponce.Middleware(memLedger(t), httponce.Options{Client: byUser})
	if err != nil {
		t.Fatal(err)
	}
	var refunds runs
	mux := http.NewServeMux()
	mux.Handle("POST /charges/{id}/refunds", once(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refunds.add(r.PathValue("id"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"refunded":%q}`, r.PathValue("id"))
	})))
	srv := serve(t, mux)
	const key, body = "refund-key-1", `{"amount":500}`
	first, err := send(t, http.MethodPost, srv.URL+"/charges/ch_1/refunds", "alice", key, body)
	if err != nil || first.status != http.StatusCreated {
		t.Fatalf("refund of ch_1 = %+v, %v; want 201", first, err)
	}
	for _, tt := range []struct {
		name, path string
		status     int
	}{
		{"the same key and body for another charge", "/charges/ch_2/refunds", http.StatusUnprocessableEntity},
		{"the same key and body with a query", "/charges/ch_1/refunds?reason=duplicate", http.StatusUnprocessableEntity},
		{"the retry", "/charges/ch_1/refunds", http.StatusCreated},
	} {
		got, err := send(t, http.MethodPost, srv.URL+tt.path, "alice", key, body)
		if err != nil || got.status != tt.status {
			t.Errorf("%s: POST %s = %d %s, %v; want %d", tt.name, tt.path, got.status, got.body, err, tt.status)
		}
	}
	if n1, n2 := refunds.get("ch_1"), refunds.get("ch_2"); n1 != 1 || n2 != 0 {
		t.Errorf("refunds: ch_1 %d, ch_2 %d; want ch_1 once, ch_2 never (its request was refused)", n1, n2)
	}
}

// TestClientsKeptApart: the zero Options cannot tell clients apart, so
// Middleware refuses them (ErrNoClient) rather than let client B sending
// client A's key get A's response; SharedKeys is the explicit choice of one
// key space. With Options.Client, each client's key is its own, and a
// request whose client is unknown ("") is refused with 403 and not run.
func TestClientsKeptApart(t *testing.T) {
	l := memLedger(t)
	var charges runs
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charges.add("all")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d","for":%q}`, n, byUser(r))
	})
	once, err := httponce.Middleware(l, httponce.Options{Required: true})
	if !errors.Is(err, httponce.ErrNoClient) {
		if err == nil {
			mux := http.NewServeMux()
			mux.Handle("POST /charges", once(charge))
			srv := serve(t, mux)
			a, _ := send(t, http.MethodPost, srv.URL+"/charges", "alice", "k-1", `{"amount":1}`)
			b, _ := send(t, http.MethodPost, srv.URL+"/charges", "bob", "k-1", `{"amount":1}`)
			t.Errorf("client bob, sending client alice's key, got %d %s (alice got %d %s)", b.status, b.body, a.status, a.body)
		}
		t.Fatalf("Middleware(Options{Required: true}) = %v; want an error wrapping ErrNoClient", err)
	}

	for _, tt := range []struct {
		name       string
		opts       httponce.Options
		wantShared bool
	}{
		{"Client", httponce.Options{Client: byUser}, false},
		{"SharedKeys", httponce.Options{SharedKeys: true}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			once, err := httponce.Middleware(l, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle("POST /charges", once(charge))
			srv := serve(t, mux)
			key := "k-" + tt.name
			a, err := send(t, http.MethodPost, srv.URL+"/charges", "alice", key, `{"amount":1}`)
			if err != nil || a.status != http.StatusCreated {
				t.Fatalf("alice = %+v, %v; want 201", a, err)
			}
			b, err := send(t, http.MethodPost, srv.URL+"/charges", "bob", key, `{"amount":1}`)
			if shared := b.body == a.body; err != nil || b.status != http.StatusCreated || shared != tt.wantShared {
				t.Errorf("bob with alice's key = %d %s, %v; alice got %s; want shared %v", b.status, b.body, err, a.body, tt.wantShared)
			}
		})
	}

	t.Run("unknown client", func(t *testing.T) {
		once, err := httponce.Middleware(l, httponce.Options{Client: byUser})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle("POST /charges", once(charge))
		srv := serve(t, mux)
		before := charges.get("all")
		got, err := send(t, http.MethodPost, srv.URL+"/charges", "", "k-anonymous", `{"amount":1}`)
		if err != nil || got.status != http.StatusForbidden || !strings.Contains(got.body, "#hdr-Client_unknown") {
			t.Errorf("a request with a key and no client = %d %s, %v; want 403 Client_unknown", got.status, got.body, err)
		}
		if charges.get("all") != before {
			t.Error("the handler ran for a request whose client is unknown")
		}
	})
}

// TestNoStoreNotReplayed: a response marked Cache-Control: no-store (a
// secret shown once) is not kept: the retry finds the work done (the
// handler does not run again) and gets its status without the body,
// marked so.
func TestNoStoreNotReplayed(t *testing.T) {
	once, err := httponce.Middleware(memLedger(t), httponce.Options{Client: byUser})
	if err != nil {
		t.Fatal(err)
	}
	var created runs
	mux := http.NewServeMux()
	mux.Handle("POST /api-keys", once(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := created.add("all")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "private, No-Store")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"secret":"sk_live_%d"}`, n)
	})))
	srv := serve(t, mux)
	first, err := send(t, http.MethodPost, srv.URL+"/api-keys", "alice", "k-secret", `{}`)
	if err != nil || first.status != http.StatusCreated || !strings.Contains(first.body, "sk_live_1") {
		t.Fatalf("first = %+v, %v; want 201 with the secret", first, err)
	}
	retry, err := send(t, http.MethodPost, srv.URL+"/api-keys", "alice", "k-secret", `{}`)
	if err != nil || strings.Contains(retry.body, "sk_live") {
		t.Fatalf("retry = %d %q, %v; want no secret replayed", retry.status, retry.body, err)
	}
	if retry.status != http.StatusCreated || retry.body != "" || retry.header.Get(httponce.HeaderReplayed) != "true" ||
		retry.header.Get("Idempotent-Replayed-Body") != "no-store" || retry.header.Get("Cache-Control") != "no-store" {
		t.Errorf("retry = %d %q %v; want 201, empty, replayed, Idempotent-Replayed-Body: no-store", retry.status, retry.body, retry.header)
	}
	if n := created.get("all"); n != 1 {
		t.Errorf("the handler ran %d times; want once", n)
	}
}

// TestRefusalsNotKept: answers about whether the request could be taken
// up at that moment (400, 401, 403, 404) are sent and not kept: the retry
// with the same key, once the client renewed its credentials (or the
// resource exists), runs the handler. Answers on the work's merits (402,
// 409, 422) are kept and replayed.
func TestRefusalsNotKept(t *testing.T) {
	once, err := httponce.Middleware(memLedger(t), httponce.Options{Client: byUser})
	if err != nil {
		t.Fatal(err)
	}
	var tries runs
	mux := http.NewServeMux()
	// The first try of /orders/{status} answers status, the next 201.
	mux.Handle("POST /orders/{status}", once(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tries.add(r.PathValue("status")) == 1 {
			var status int
			fmt.Sscan(r.PathValue("status"), &status)
			http.Error(w, "refused", status)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "created")
	})))
	srv := serve(t, mux)
	for _, tt := range []struct {
		status int
		kept   bool
	}{
		{http.StatusBadRequest, false},
		{http.StatusUnauthorized, false},
		{http.StatusForbidden, false},
		{http.StatusNotFound, false},
		{http.StatusPaymentRequired, true},
		{http.StatusConflict, true},
		{http.StatusUnprocessableEntity, true},
	} {
		url := fmt.Sprintf("%s/orders/%d", srv.URL, tt.status)
		key := fmt.Sprintf("k-%d", tt.status)
		first, err := send(t, http.MethodPost, url, "alice", key, `{}`)
		if err != nil || first.status != tt.status {
			t.Fatalf("%d: first = %+v, %v; want %d", tt.status, first, err, tt.status)
		}
		retry, err := send(t, http.MethodPost, url, "alice", key, `{}`)
		want := http.StatusCreated
		if tt.kept {
			want = tt.status
		}
		if err != nil || retry.status != want || (retry.header.Get(httponce.HeaderReplayed) == "true") != tt.kept {
			t.Errorf("%d: retry = %d (replayed %q), %v; want %d, replayed %v", tt.status, retry.status, retry.header.Get(httponce.HeaderReplayed), err, want, tt.kept)
		}
	}
}

// TestTakenOverOnlyIfMaybeDone: the retry of a request whose handler
// answered "not now" (503, 429, 408) or refused it before any work (401) runs with
// dedupe.TakenOver false: nothing was done, there is nothing to
// reconcile. The retry of one whose handler failed mid-work (500, 502,
// 504) or panicked runs with TakenOver true: the work may have been done.
func TestTakenOverOnlyIfMaybeDone(t *testing.T) {
	once, err := httponce.Middleware(memLedger(t), httponce.Options{Client: byUser})
	if err != nil {
		t.Fatal(err)
	}
	var tries runs
	var mu sync.Mutex
	takenOver := map[string]bool{}
	mux := http.NewServeMux()
	// The first try of /work/{how} fails as how says; the second records
	// TakenOver and answers 201.
	mux.Handle("POST /work/{how}", once(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		how := r.PathValue("how")
		if tries.add(how) == 1 {
			if how == "panic" {
				panic("the handler failed mid-work")
			}
			var status int
			fmt.Sscan(how, &status)
			http.Error(w, "failed", status)
			return
		}
		mu.Lock()
		takenOver[how] = dedupe.TakenOver(r.Context())
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	})))
	srv := serve(t, mux)
	for _, tt := range []struct {
		how  string
		want bool
	}{
		{"503", false},
		{"429", false},
		{"408", false},
		{"401", false},
		{"500", true},
		{"502", true},
		{"504", true},
		{"panic", true},
	} {
		url := srv.URL + "/work/" + tt.how
		key := "k-" + tt.how
		if first, err := send(t, http.MethodPost, url, "alice", key, `{}`); tt.how != "panic" && (err != nil || first.status < 400) {
			t.Fatalf("%s: first = %+v, %v; want the failure", tt.how, first, err)
		}
		retry, err := send(t, http.MethodPost, url, "alice", key, `{}`)
		mu.Lock()
		got, ran := takenOver[tt.how]
		mu.Unlock()
		if err != nil || retry.status != http.StatusCreated || !ran || got != tt.want {
			t.Errorf("%s: retry = %d, %v; handler ran %v with TakenOver %v; want 201, TakenOver %v", tt.how, retry.status, err, ran, got, tt.want)
		}
	}
}

// TestBodyTooLarge: a keyed request whose body is larger than
// Options.MaxBodyBytes is answered 413 (Body too large) before anything
// runs, and its key stays free: the same key with a body that fits runs.
func TestBodyTooLarge(t *testing.T) {
	once, err := httponce.Middleware(memLedger(t), httponce.Options{Client: byUser, MaxBodyBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	var ran runs
	mux := http.NewServeMux()
	mux.Handle("POST /uploads", once(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.add("all")
		w.WriteHeader(http.StatusCreated)
	})))
	srv := serve(t, mux)
	big := `{"data":"` + strings.Repeat("x", 2048) + `"}`
	got, err := send(t, http.MethodPost, srv.URL+"/uploads", "alice", "k-big", big)
	if err != nil || got.status != http.StatusRequestEntityTooLarge || !strings.Contains(got.body, "#hdr-Body_too_large") || ran.get("all") != 0 {
		t.Errorf("a body over MaxBodyBytes = %d %s, %v, handler ran %d times; want 413 Body_too_large, not run", got.status, got.body, err, ran.get("all"))
	}
	got, err = send(t, http.MethodPost, srv.URL+"/uploads", "alice", "k-big", `{"data":"x"}`)
	if err != nil || got.status != http.StatusCreated || ran.get("all") != 1 {
		t.Errorf("the key again with a body that fits = %d %s, %v; want 201, run", got.status, got.body, err)
	}
}
