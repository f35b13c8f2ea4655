package httponce_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
	"github.com/oncegate/oncegate/pkg/dedupe/httponce"
)

// A client retries a charge with the same Idempotency-Key: the retry gets
// the first response, marked as replayed, and the card is charged once.
// The key sent with another amount is refused. Another client that sends
// the same key names work of its own.
func ExampleMiddleware() {
	ledger, err := badgerledger.Open("", badgerledger.Options{InMemory: true}) // a directory, or jskv for replicas
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()
	// The client a request comes from, as your authentication verified it
	// (here the basic-auth user stands for an API key's account): keys are
	// kept apart per client.
	account := func(r *http.Request) string { user, _, _ := r.BasicAuth(); return user }
	once, err := httponce.Middleware(ledger, httponce.Options{Client: account, Required: true})
	if err != nil {
		log.Fatal(err)
	}
	var charged []string // the card network's idempotency keys
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, _ := dedupe.IntentFrom(r.Context())
		charged = append(charged, in.Key.String()) // the charge, under the intent's key
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d"}`, len(charged))
	})
	mux := http.NewServeMux()
	mux.Handle("POST /charges", once(charge))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	send := func(user, key, body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(body))
		req.SetBasicAuth(user, "secret")
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), resp.Header.Get("Content-Type"), strings.HasPrefix(string(b), `{"id"`))
	}
	const key = `"4ad5e3a9-0bb4-4c5e-8b1e-1f0c0e1b7a11"`
	send("alice", key, `{"amount":1000,"currency":"eur"}`)
	send("alice", key, `{"currency":"eur","amount":1000}`) // the retry
	send("alice", key, `{"amount":2000,"currency":"eur"}`) // the key reused
	send("alice", "", `{"amount":1000,"currency":"eur"}`)  // no key
	send("bob", key, `{"amount":1000,"currency":"eur"}`)   // another client's work
	fmt.Println("charged:", len(charged))
	// Output:
	// 201  application/json true
	// 201 true application/json true
	// 422  application/problem+json false
	// 400  application/problem+json false
	// 201  application/json true
	// charged: 2
}
