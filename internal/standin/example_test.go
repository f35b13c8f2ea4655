package standin_test

import (
	"context"
	"fmt"
	"log"

	"github.com/oncegate/oncegate/internal/standin"
	openai "github.com/sashabaranov/go-openai"
)

func Example() {
	s, err := standin.New(standin.Options{})
	if err != nil {
		panic(err)
	}
	url, stop, err := s.Start("127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer stop()

	cfg := openai.DefaultConfig("no key needed")
	cfg.BaseURL = url
	c := openai.NewClientWithConfig(cfg)
	resp, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
		Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleUser, Content: "Summarise invoice 1042 in one line."},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Choices[0].Message.Content)
	fmt.Println(resp.SystemFingerprint, resp.Choices[0].FinishReason, resp.Usage.PromptTokens, resp.Usage.CompletionTokens)
	fmt.Println("upstream calls:", s.Stats().Completions)
	// Output:
	// [stand-in model] Reply 45f5b5a6 to 1 message for model gpt-4o-mini, last from user: "Summarise invoice 1042 in one line.". Summary: oasis zenith fable willow amber coral dune falcon fern.
	// oncegate-standin stop 17 28
	// upstream calls: 1
}
