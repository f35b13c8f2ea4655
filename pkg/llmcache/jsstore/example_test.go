package jsstore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/jsstore"
	"github.com/oncegate/oncegate/pkg/llmcache/llmtest"
)

// Two replicas of a service, each with its own cache on the same
// JetStream KV buckets, ask the same question: the second replica gets the
// first one's answer, and the model is paid once. (The example starts a
// JetStream server in the process, and a fake model.)
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "jsstore-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats server not ready")
	}
	model, err := llmtest.NewServer(llmtest.Options{}) // your provider, in production
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()

	replica := func() (*openai.Client, func()) {
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			log.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			log.Fatal(err)
		}
		st, err := jsstore.New(ctx, js, jsstore.Options{})
		if err != nil {
			log.Fatal(err)
		}
		cache, err := llmcache.NewStore(st, llmcache.Options{})
		if err != nil {
			log.Fatal(err)
		}
		cfg := openai.DefaultConfig("sk-...")
		cfg.BaseURL = model.URL
		cfg.HTTPClient = cache.HTTPClient(nil)
		return openai.NewClientWithConfig(cfg), func() { cache.Close(); nc.Close() }
	}
	a, closeA := replica()
	defer closeA()
	b, closeB := replica()
	defer closeB()

	req := openai.ChatCompletionRequest{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "Triage: disk /var 93% full on db-2."}},
	}
	for i, client := range []*openai.Client{a, b} {
		resp, err := client.CreateChatCompletion(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("replica %c: %s\n", 'a'+i, resp.Header().Get(llmcache.HeaderCache))
	}
	fmt.Println("model calls:", model.Stats().Completions)
	// Output:
	// replica a: miss
	// replica b: hit
	// model calls: 1
}
