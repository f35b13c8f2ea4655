package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/badgerstore"
	"github.com/oncegate/oncegate/pkg/llmcache/llmtest"
	"github.com/oncegate/oncegate/pkg/llmcache/ratelimit"
)

// Example puts the limiter under the LLM cache: a budget of one request a
// minute lets the first call through; the same call again is answered by
// the cache without waiting; a new call would wait a minute, more than
// MaxWait allows, and is refused at once.
func Example() {
	model, err := llmtest.NewServer(llmtest.Options{}) // your provider, in production
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	dir, err := os.MkdirTemp("", "ratelimit-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cache, err := badgerstore.Open(dir, llmcache.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()

	lim, err := ratelimit.New(http.DefaultTransport, ratelimit.Options{RequestsPerMinute: 1, MaxWait: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	cfg := openai.DefaultConfig("sk-...")
	cfg.BaseURL = model.URL
	cfg.HTTPClient = cache.HTTPClient(&http.Client{Transport: lim})
	client := openai.NewClientWithConfig(cfg)

	ask := func(q string) {
		resp, err := client.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
			Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: q}},
		})
		switch {
		case errors.Is(err, ratelimit.ErrWait):
			fmt.Printf("%q: refused, the wait is too long\n", q)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Printf("%q: %s\n", q, resp.Header().Get(llmcache.HeaderCache))
		}
	}
	ask("Triage: disk /var 93% full on db-2.")
	ask("Triage: disk /var 93% full on db-2.")
	ask("Triage: 5xx rate 12% on api-1.")
	fmt.Printf("sent %d, model answered %d\n", lim.Stats().Sent, model.Stats().Completions)
	// Output:
	// "Triage: disk /var 93% full on db-2.": miss
	// "Triage: disk /var 93% full on db-2.": hit
	// "Triage: 5xx rate 12% on api-1.": refused, the wait is too long
	// sent 1, model answered 1
}
