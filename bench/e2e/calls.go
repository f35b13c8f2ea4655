package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/procstat"
	"github.com/oncegate/oncegate/internal/standin"
)

// calls measures the calls cell: n model calls and nothing else, the floor
// under the full cell. The client speaks to the stand-in as app.Start's
// does (HTTP/2 with prior knowledge), without the cache in front; each call
// carries the default alerts step's system prompt and a user prompt of a
// trigger's size.
func (b *bench) calls(ctx context.Context, n int) (result, error) {
	r := result{mode: modeCalls, n: n, unique: n, expected: n}
	s, err := standin.New(standin.Options{})
	if err != nil {
		return r, err
	}
	url, stop, err := s.Start("127.0.0.1:0")
	if err != nil {
		return r, err
	}
	defer stop()
	client, closeIdle := standin.Client(url)
	defer closeIdle()

	def := config.Default()
	step := def.Pipelines[0].Step
	payloads, _ := generate(n, 0)
	workers := def.Pipelines[0].Concurrency
	if b.o.concurrency > 0 {
		workers = b.o.concurrency
	}
	var next, answered atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), procstat.CPU()
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				_, err := client.CreateChatCompletion(ctx, openai.ChatCompletionRequest{
					Model: def.LLM.Model, Temperature: float32(step.Temperature), MaxTokens: step.MaxTokens,
					Messages: []openai.ChatCompletionMessage{
						{Role: openai.ChatMessageRoleSystem, Content: step.System},
						{Role: openai.ChatMessageRoleUser, Content: string(payloads[i])},
					},
				})
				if err != nil {
					once.Do(func() { firstErr = err })
					continue
				}
				answered.Add(1)
			}
		})
	}
	wg.Wait()
	r.took, r.cpu = time.Since(start), procstat.CPU()-cpu0
	r.effects = uint64(answered.Load())
	if firstErr != nil {
		return r, fmt.Errorf("model call: %w", firstErr)
	}
	return r, nil
}
