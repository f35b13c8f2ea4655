package llmcache_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/badgerstore"
	"github.com/oncegate/oncegate/pkg/llmcache/llmtest"
)

// exampleCache opens a cache with opts in a temporary directory, and
// returns it with a function that closes it and removes the directory.
func exampleCache(opts llmcache.Options) (*llmcache.Cache, func()) {
	dir, err := os.MkdirTemp("", "llmcache-example")
	if err != nil {
		log.Fatal(err)
	}
	cache, err := badgerstore.Open(dir, opts)
	if err != nil {
		log.Fatal(err)
	}
	return cache, func() { cache.Close(); os.RemoveAll(dir) }
}

// askTriage is a chat completion request that asks the model to triage
// alert, with at most maxTokens tokens in its answer.
func askTriage(alert string, maxTokens int) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model:     "gpt-4o-mini",
		MaxTokens: maxTokens,
		Messages:  []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "Triage: " + alert}},
	}
}

// A proxy in front of the model, as Oncegate's own proxy is: a reverse
// proxy whose transport is the cache's, so that every client of the proxy
// (whatever its language) shares the answers. The proxy names each
// request's Call from a header of its client's.
func ExampleCache_Transport() {
	model, err := llmtest.NewServer(llmtest.Options{}) // your provider, in production
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	cache, done := exampleCache(llmcache.Options{})
	defer done()

	upstream, err := url.Parse(model.URL)
	if err != nil {
		log.Fatal(err)
	}
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			call := llmcache.Call{Namespace: "proxy", Step: r.In.Header.Get("X-Team")}
			r.Out = r.Out.WithContext(llmcache.WithCall(r.Out.Context(), call))
		},
		Transport: cache.Transport(http.DefaultTransport),
	})
	defer proxy.Close()

	for _, team := range []string{"sre", "support"} {
		cfg := openai.DefaultConfig("sk-...")
		cfg.BaseURL = proxy.URL // the clients know the proxy only
		cfg.HTTPClient = &http.Client{Transport: teamHeader{team}}
		resp, err := openai.NewClientWithConfig(cfg).CreateChatCompletion(context.Background(), askTriage("disk /var 93% full on db-2.", 0))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s\n", team, resp.Header().Get(llmcache.HeaderCache))
	}
	fmt.Printf("model calls: %d\n", model.Stats().Completions)
	// Output:
	// sre: miss
	// support: hit
	// model calls: 1
}

// teamHeader is a client's transport that names its team to the proxy.
type teamHeader struct{ team string }

func (t teamHeader) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("X-Team", t.team)
	return http.DefaultTransport.RoundTrip(req)
}

// A token budget per intent: every call for one piece of work, on every
// retry, draws from one budget, kept in the store. A retry answered from
// the cache costs nothing; a new call that could take the intent past its
// budget (its prompt plus its max_tokens) is refused before it goes out.
func Example_tokenBudget() {
	model, err := llmtest.NewServer(llmtest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	cache, done := exampleCache(llmcache.Options{Budget: 100})
	defer done()
	cfg := openai.DefaultConfig("sk-...")
	cfg.BaseURL = model.URL
	cfg.HTTPClient = cache.HTTPClient(nil)
	client := openai.NewClientWithConfig(cfg)

	ctx := llmcache.WithCall(context.Background(), llmcache.Call{Intent: "alert-42"})
	for _, alert := range []string{"disk /var 93% full on db-2.", "disk /var 93% full on db-2.", "disk /var 97% full on db-2."} {
		resp, err := client.CreateChatCompletion(ctx, askTriage(alert, 50))
		var be *llmcache.BudgetError
		switch {
		case errors.As(err, &be):
			fmt.Printf("%s: refused: %d tokens spent, the call may spend %d, the budget is %d\n", alert, be.Spent, be.Need, be.Budget)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Printf("%s: %s, %d tokens\n", alert, resp.Header().Get(llmcache.HeaderCache), resp.Usage.TotalTokens)
		}
	}
	fmt.Printf("model calls: %d\n", model.Stats().Completions)
	// Output:
	// disk /var 93% full on db-2.: miss, 46 tokens
	// disk /var 93% full on db-2.: hit, 46 tokens
	// disk /var 97% full on db-2.: refused: 46 tokens spent, the call may spend 72, the budget is 100
	// model calls: 1
}

// A spend limit in dollars per period for one account (here a client of a
// shared proxy): a call goes out only if its worst cost fits what is left,
// and is then charged what it cost. Cache.Spending reports the account.
func ExampleSpendLimit() {
	model, err := llmtest.NewServer(llmtest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	// $1 per thousand tokens, to keep the figures readable.
	cache, done := exampleCache(llmcache.Options{Prices: llmcache.Prices{"*": {Prompt: 1000, Completion: 1000}}})
	defer done()
	cfg := openai.DefaultConfig("sk-...")
	cfg.BaseURL = model.URL
	cfg.HTTPClient = cache.HTTPClient(nil)
	client := openai.NewClientWithConfig(cfg)

	alice := llmcache.SpendLimit{Name: "client:alice", Max: 0.15, Period: 24 * time.Hour}
	ctx := llmcache.WithCall(context.Background(), llmcache.Call{Namespace: "proxy", Limits: []llmcache.SpendLimit{alice}})
	for _, alert := range []string{"disk /var 93% full on db-2.", "5xx rate 12% on api-1.", "queue lag 9m on billing."} {
		_, err := client.CreateChatCompletion(ctx, askTriage(alert, 50))
		var se *llmcache.SpendLimitError
		switch {
		case errors.As(err, &se):
			fmt.Printf("%s: refused: $%.3f spent, the call may cost $%.3f, the limit is $%.2f\n", alert, se.Spent, se.Need, se.Limit.Max)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Printf("%s: sent\n", alert)
		}
	}
	spent, _, err := cache.Spending(alice)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("alice spent $%.3f of $%.2f today\n", spent, alice.Max)
	// Output:
	// disk /var 93% full on db-2.: sent
	// 5xx rate 12% on api-1.: sent
	// queue lag 9m on billing.: refused: $0.093 spent, the call may cost $0.068, the limit is $0.15
	// alice spent $0.093 of $0.15 today
}
