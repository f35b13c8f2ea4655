package llmtest_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/pkg/llmcache/llmtest"
)

// A go-openai client asks the fake model: the answer is labelled, comes
// with its usage, and is the same on every call.
func ExampleNewServer() {
	model, err := llmtest.NewServer(llmtest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	cfg := openai.DefaultConfig("unused")
	cfg.BaseURL = model.URL
	client := openai.NewClientWithConfig(cfg)
	req := openai.ChatCompletionRequest{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "Triage: disk /var 93% full on db-2."}},
	}
	a, err := client.CreateChatCompletion(context.Background(), req)
	if err != nil {
		log.Fatal(err)
	}
	b, err := client.CreateChatCompletion(context.Background(), req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.HasPrefix(a.Choices[0].Message.Content, "[stand-in model]"), a.Usage.PromptTokens > 0, a.Choices[0].Message.Content == b.Choices[0].Message.Content)
	fmt.Println("calls:", model.Stats().Completions)
	// Output:
	// true true true
	// calls: 2
}
