package consumer

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/llmcache"
)

// StepCall returns the first model call pipeline p's step makes for
// intent k, as the step sends it through the LLM cache: the request and
// the cache's Call, whose key (llmcache.KeyOf) says whether a redo of the
// intent is answered from the cache, unless its Mode is
// llmcache.ModeBypass: then the answer is kept in the intent's ledger
// record (RecordedAnswer). With payload (the trigger's), the
// request holds the rendered messages, to estimate its tokens; without,
// it holds none (the cache keys a step's call by its template, not by
// the rendered messages). It is for package admin's preview of a redrive:
// it calls nothing.
func StepCall(cfg *config.Config, p *config.Pipeline, k dedupe.Key, payload []byte) (openai.ChatCompletionRequest, llmcache.Call, error) {
	if p.Step == nil {
		return openai.ChatCompletionRequest{}, llmcache.Call{}, errors.New("consumer: the pipeline has no model step")
	}
	s, err := newStep(&Consumer{cfg: cfg}, p)
	if err != nil {
		return openai.ChatCompletionRequest{}, llmcache.Call{}, err
	}
	req := openai.ChatCompletionRequest{Model: s.model, Temperature: float32(s.cfg.Temperature), MaxTokens: s.cfg.MaxTokens}
	if s.cfg.Seed != nil {
		seed := int(*s.cfg.Seed)
		req.Seed = &seed
	}
	if s.schema != nil {
		req.ResponseFormat = &openai.ChatCompletionResponseFormat{
			Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{
				Name: "answer", Schema: json.RawMessage(s.cfg.Schema), Strict: true,
			},
		}
	}
	if payload != nil {
		var doc any
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			return req, llmcache.Call{}, err
		}
		system, err := s.render("system", doc)
		if err != nil {
			return req, llmcache.Call{}, err
		}
		prompt, err := s.render("prompt", doc)
		if err != nil {
			return req, llmcache.Call{}, err
		}
		if strings.TrimSpace(system) != "" {
			req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: system})
		}
		req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: prompt})
	}
	call := s.cacheCall(k, []byte("{}"))
	call.CompletionTokens = 0
	return req, call, nil
}

// RecordedAnswer reports whether note, the ledger record note of an
// intent of pipeline p, holds its step's first answer for the step as cfg
// configures it now: a redo of the intent takes it from there instead of
// calling the model. It is for package admin's preview of a redrive.
func RecordedAnswer(cfg *config.Config, p *config.Pipeline, note []byte) bool {
	if p.Step == nil {
		return false
	}
	s, err := newStep(&Consumer{cfg: cfg}, p)
	if err != nil || !s.inRecord {
		return false
	}
	return len(noted(note, s.version)) > 0
}
