package httponce_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
	"github.com/oncegate/oncegate/pkg/dedupe/httponce"
	"github.com/oncegate/oncegate/pkg/dedupe/jskv"
)

// ledgers returns one ledger of each kind, closed at the test's end.
func ledgers(t *testing.T) map[string]dedupe.Ledger {
	t.Helper()
	b, err := badgerledger.Open(t.TempDir(), badgerledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	k, err := jskv.New(context.Background(), js, jskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return map[string]dedupe.Ledger{"badger": b, "jskv": k}
}

// charges is a handler that charges an order: an effect counted per
// intent key, answered 201 with the charge's id.
type charges struct {
	mu      sync.Mutex
	effects map[string]int // per intent key
	n       int
	delay   time.Duration
	fail    atomic.Int64 // answer this many requests 503, effect undone
}

func (c *charges) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in, ok := dedupe.IntentFrom(r.Context())
	if !ok {
		http.Error(w, "no intent on the context", http.StatusInternalServerError)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Order  string `json:"order"`
		Amount int    `json:"amount"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Amount <= 0 {
		http.Error(w, "bad order", http.StatusBadRequest) // not kept: nothing was done
		return
	}
	if c.fail.Add(-1) >= 0 {
		http.Error(w, "the card network timed out", http.StatusServiceUnavailable)
		return
	}
	c.fail.Store(0)
	time.Sleep(c.delay)
	c.mu.Lock()
	c.n++
	id := fmt.Sprintf("ch_%d", c.n)
	if c.effects == nil {
		c.effects = map[string]int{}
	}
	c.effects[in.Key.String()]++
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/charges/"+id)
	w.Header().Set("X-Not-Kept", "1")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%q,"order":%q,"amount":%d}`, id, req.Order, req.Amount)
}

func (c *charges) count() (effects map[string]int, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.effects {
		out[k] = v
		total += v
	}
	return out, total
}

type reply struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, url, key, ctype, body string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(httponce.HeaderKey, key)
	}
	req.SetBasicAuth("alice", "pw")
	req.Header.Set("Content-Type", ctype)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// TestStatuses walks the draft's cases one request at a time, on each
// ledger.
func TestStatuses(t *testing.T) {
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			c := &charges{}
			once, err := httponce.Middleware(l, httponce.Options{Client: byUser, Required: true})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle("POST /charges", once(c))
			mux.Handle("GET /charges", once(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "listed") })))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			url := srv.URL + "/charges"
			const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
			const order = `{"order":"o-1","amount":10}`

			first := post(t, url, `"`+key+`"`, "application/json", order)
			if first.status != http.StatusCreated || first.header.Get(httponce.HeaderReplayed) != "" || first.header.Get("X-Not-Kept") != "1" {
				t.Fatalf("first = %+v; want 201, not replayed, with all its headers", first)
			}
			for _, tt := range []struct {
				name, key, ctype, body string
				status                 int
				problem                string
			}{
				{"retry, bare key, members reordered", key, "application/json", `{ "amount": 10, "order": "o-1" }`, http.StatusCreated, ""},
				{"retry, quoted key", `"` + key + `"`, "application/json; charset=utf-8", order, http.StatusCreated, ""},
				{"key reused with another amount", key, "application/json", `{"order":"o-1","amount":11}`, http.StatusUnprocessableEntity, "Key_reused"},
				{"key reused with another content type", key, "text/plain", order, http.StatusUnprocessableEntity, "Key_reused"},
				{"no key", "", "application/json", order, http.StatusBadRequest, "Key_missing"},
				{"key too long", strings.Repeat("k", 256), "application/json", order, http.StatusBadRequest, "Key_invalid"},
				{"key not ASCII", `"clé"`, "application/json", order, http.StatusBadRequest, "Key_invalid"},
				{"string not closed", `"abc`, "application/json", order, http.StatusBadRequest, "Key_invalid"},
				{"bad order: a 400", "k-bad", "application/json", `{"order":"o-2","amount":0}`, http.StatusBadRequest, ""},
			} {
				got := post(t, url, tt.key, tt.ctype, tt.body)
				if got.status != tt.status {
					t.Errorf("%s: status %d (%s); want %d", tt.name, got.status, got.body, tt.status)
					continue
				}
				switch {
				case tt.problem != "":
					var p struct {
						Type   string
						Status int
					}
					if err := json.Unmarshal([]byte(got.body), &p); err != nil || got.header.Get("Content-Type") != "application/problem+json" ||
						!strings.HasSuffix(p.Type, "#hdr-"+tt.problem) || p.Status != tt.status {
						t.Errorf("%s: %s %q (%v); want a problem of type %s", tt.name, got.header.Get("Content-Type"), got.body, err, tt.problem)
					}
				case tt.status == http.StatusCreated:
					if got.body != first.body || got.header.Get(httponce.HeaderReplayed) != "true" ||
						got.header.Get("Location") != first.header.Get("Location") || got.header.Get("X-Not-Kept") != "" {
						t.Errorf("%s: %+v; want the first response replayed, with its kept headers", tt.name, got)
					}
				}
			}
			if got := post(t, url, "k-bad", "application/json", `{"order":"o-2","amount":0}`); got.status != http.StatusBadRequest || got.header.Get(httponce.HeaderReplayed) != "" {
				t.Errorf("retry of a 400: %+v; want the handler's 400 again, not replayed (a 400 is not kept)", got)
			}
			// A 503 is not kept: the retry runs the handler again.
			c.fail.Store(1)
			if got := post(t, url, "k-503", "application/json", `{"order":"o-3","amount":5}`); got.status != http.StatusServiceUnavailable {
				t.Errorf("first try of o-3: %+v; want the handler's 503", got)
			}
			if got := post(t, url, "k-503", "application/json", `{"order":"o-3","amount":5}`); got.status != http.StatusCreated || got.header.Get(httponce.HeaderReplayed) != "" {
				t.Errorf("retry of o-3 after a 503: %+v; want the handler run again", got)
			}
			// GET is not gated.
			resp, err := http.Get(url)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("GET = %v, %v; want 200 without a key", resp, err)
			}
			resp.Body.Close()
			if _, total := c.count(); total != 2 {
				t.Errorf("%d charges; want 2 (o-1 and o-3)", total)
			}
		})
	}
}

// TestScopes: one client string names different work on two routes and
// for two authenticated clients.
func TestScopes(t *testing.T) {
	l, err := badgerledger.Open("", badgerledger.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := &charges{}
	once, err := httponce.Middleware(l, httponce.Options{Client: func(r *http.Request) string {
		user, _, _ := r.BasicAuth()
		return user
	}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /charges", once(c))
	mux.Handle("POST /refunds", once(c))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	send := func(user, path string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(`{"order":"o-1","amount":1}`))
		req.SetBasicAuth(user, "pw")
		req.Header.Set(httponce.HeaderKey, "same-key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, s := range []struct{ user, path string }{{"alice", "/charges"}, {"bob", "/charges"}, {"alice", "/refunds"}, {"alice", "/charges"}} {
		if st := send(s.user, s.path); st != http.StatusCreated {
			t.Errorf("%s %s: %d", s.user, s.path, st)
		}
	}
	if effects, total := c.count(); total != 3 || len(effects) != 3 {
		t.Errorf("effects %v; want one each for alice's charge, bob's charge and alice's refund", effects)
	}
}

// TestConcurrentRetries: clients that retry (on 409 after its Retry-After,
// and after giving up on a slow answer) hit a real net/http server
// concurrently, several with each key; one of them reuses a key with
// another payload, and others send no key. Each key's work runs once,
// every client of a key ends with the same response (replays of the
// first), the reused key is refused with 422 and a missing key with 400.
func TestConcurrentRetries(t *testing.T) {
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			c := &charges{delay: 30 * time.Millisecond}
			once, err := httponce.Middleware(l, httponce.Options{Client: byUser, Required: true})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(once(c))
			defer srv.Close()
			const keys, clientsPerKey = 8, 4
			type outcome struct {
				status     int
				body       string
				tries      int
				conflicts  int
				retryAfter string
			}
			results := make([][]outcome, keys)
			lastKeyDone := make(chan struct{})
			var lastKey sync.WaitGroup
			lastKey.Add(clientsPerKey - 1)
			go func() { lastKey.Wait(); close(lastKeyDone) }()
			var wg sync.WaitGroup
			for k := range keys {
				results[k] = make([]outcome, clientsPerKey)
				for i := range clientsPerKey {
					wg.Go(func() {
						key := fmt.Sprintf("key-%d", k)
						body := fmt.Sprintf(`{"order":"o-%d","amount":%d}`, k, 10+k)
						// The first client of key 0 gives up early once,
						// as a client whose timeout is shorter than the
						// work; the last client of the last key reuses the
						// key for another amount, once the others have
						// their answer (before, its payload could be the
						// first).
						timeout := 5 * time.Second
						if k == 0 && i == 0 {
							timeout = 5 * time.Millisecond
						}
						if k == keys-1 && i == clientsPerKey-1 {
							body = fmt.Sprintf(`{"order":"o-%d","amount":999}`, k)
							<-lastKeyDone
						}
						var o outcome
						for o.tries = 1; o.tries < 200; o.tries++ {
							ctx, cancel := context.WithTimeout(context.Background(), timeout)
							req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(body))
							req.Header.Set(httponce.HeaderKey, key)
							req.SetBasicAuth("alice", "pw")
							req.Header.Set("Content-Type", "application/json")
							resp, err := http.DefaultClient.Do(req)
							if err != nil {
								cancel()
								timeout = 5 * time.Second
								continue // a timeout: retry
							}
							b, _ := io.ReadAll(resp.Body)
							resp.Body.Close()
							cancel()
							if resp.StatusCode == http.StatusConflict {
								o.conflicts++
								o.retryAfter = resp.Header.Get("Retry-After")
								// The client may retry sooner than
								// Retry-After says; these do, to keep the
								// test short.
								time.Sleep(10 * time.Millisecond)
								continue
							}
							o.status, o.body = resp.StatusCode, string(b)
							break
						}
						results[k][i] = o
						if k == keys-1 && i < clientsPerKey-1 {
							lastKey.Done()
						}
					})
				}
			}
			// Clients that send no key, meanwhile: 400, and nothing runs.
			var missing []int
			var mmu sync.Mutex
			for range 4 {
				wg.Go(func() {
					req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"order":"o-x","amount":1}`))
					req.SetBasicAuth("alice", "pw")
					req.Header.Set("Content-Type", "application/json")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					mmu.Lock()
					missing = append(missing, resp.StatusCode)
					mmu.Unlock()
				})
			}
			wg.Wait()
			for _, st := range missing {
				if st != http.StatusBadRequest {
					t.Errorf("a request without a key got %d; want 400", st)
				}
			}
			effects, total := c.count()
			if total != keys || len(effects) != keys {
				t.Errorf("%d effects over %d keys (%v); want one per key", total, len(effects), effects)
			}
			conflicts := 0
			for k, rs := range results {
				for i, o := range rs {
					conflicts += o.conflicts
					if o.conflicts > 0 {
						if n, err := strconv.Atoi(o.retryAfter); err != nil || n < 1 {
							t.Errorf("key %d client %d: a 409 with Retry-After %q; want whole seconds", k, i, o.retryAfter)
						}
					}
					if k == keys-1 && i == clientsPerKey-1 {
						if o.status != http.StatusUnprocessableEntity {
							t.Errorf("the key reused with another amount got %d %s; want 422", o.status, o.body)
						}
						continue
					}
					if o.status != http.StatusCreated || o.body != rs[0].body {
						t.Errorf("key %d client %d: %d %s after %d tries; want 201 %s", k, i, o.status, o.body, o.tries, rs[0].body)
					}
				}
			}
			if conflicts == 0 {
				t.Error("no client met a request in flight (409); the test did not test that")
			}
			t.Logf("%d conflicts (409) answered", conflicts)
		})
	}
}
