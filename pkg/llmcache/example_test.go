package llmcache_test

import (
	"context"
	"fmt"
	"log"
	"os"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/badgerstore"
	"github.com/oncegate/oncegate/pkg/llmcache/llmtest"
)

// Example puts a go-openai client behind the cache and asks a fake model
// (package llmtest) the same question three times, as a retried step
// would.
func Example() {
	model, err := llmtest.NewServer(llmtest.Options{}) // your provider, in production
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()

	dir, err := os.MkdirTemp("", "llmcache-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cache, err := badgerstore.Open(dir, llmcache.Options{
		Prices: llmcache.Prices{"gpt-4o-mini": {Prompt: 0.15, Completion: 0.60}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()

	cfg := openai.DefaultConfig("sk-...")
	cfg.BaseURL = model.URL
	cfg.HTTPClient = cache.HTTPClient(nil)
	client := openai.NewClientWithConfig(cfg)

	ctx := llmcache.WithCall(context.Background(), llmcache.Call{Namespace: "acme/alerts", Step: "triage"})
	req := openai.ChatCompletionRequest{
		Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleUser, Content: "Triage: disk /var 93% full on db-2."},
		},
	}
	for attempt := 1; attempt <= 3; attempt++ {
		resp, err := client.CreateChatCompletion(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("attempt %d: %s, %d+%d tokens\n", attempt, resp.Header().Get(llmcache.HeaderCache),
			resp.Usage.PromptTokens, resp.Usage.CompletionTokens)
	}
	fmt.Printf("model calls: %d\n", model.Stats().Completions)
	// Output:
	// attempt 1: miss, 17+29 tokens
	// attempt 2: hit, 17+29 tokens
	// attempt 3: hit, 17+29 tokens
	// model calls: 1
}
