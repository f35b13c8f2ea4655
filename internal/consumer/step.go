package consumer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"text/template"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/llmcache"
)

// step is a pipeline's model step: a prompt rendered from the trigger, sent
// through the LLM cache.
type step struct {
	pipeline string
	cfg      *config.Step
	tmpl     *template.Template
	model    string
	version  string // changes whenever the prompt or the model parameters do
	budget   int64
	timeout  time.Duration
	client   *openai.Client
}

// answer is what the model step produced.
type answer struct {
	Text     string
	Model    string
	Cache    string // hit, shared, miss or bypass
	cacheKey string

	// InputTokens and OutputTokens are the usage the answer reports (the
	// first call's, for an answer from the cache).
	InputTokens, OutputTokens int
}

// stepError is a step failure; a permanent one dead-letters the trigger.
type stepError struct {
	reason    Reason
	permanent bool
	err       error
}

func (e *stepError) Error() string { return "model step: " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

func newStep(c *Consumer, p *config.Pipeline) (*step, error) {
	t, err := p.Step.Templates()
	if err != nil {
		return nil, err
	}
	model := p.Step.Model
	if model == "" {
		model = c.cfg.LLM.Model
	}
	budget := p.Step.BudgetTokens
	if budget == 0 {
		budget = c.cfg.LLM.Cache.BudgetTokens
	}
	if budget == 0 {
		budget = -1 // no limit
	}
	// The cache keys a step's answer by the intent and this version, not
	// by the rendered prompt: a reworded duplicate of a trigger (same
	// intent) reuses the answer, and a change to the prompt, the model or
	// its parameters asks again.
	h := sha256.New()
	params, _ := json.Marshal(struct {
		System, Prompt, Model string
		Temperature           float64
		MaxTokens             int
		Seed                  *int64
	}{p.Step.System, p.Step.Prompt, model, p.Step.Temperature, p.Step.MaxTokens, p.Step.Seed})
	h.Write(params)
	return &step{
		pipeline: p.Name, cfg: p.Step, tmpl: t, model: model,
		version: hex.EncodeToString(h.Sum(nil)[:8]),
		budget:  budget, timeout: c.cfg.LLM.Timeout, client: c.opts.Model,
	}, nil
}

func (s *step) render(name string, doc any) (string, error) {
	var b strings.Builder
	if err := s.tmpl.ExecuteTemplate(&b, name, doc); err != nil {
		return "", err
	}
	return b.String(), nil
}

// run renders the prompt from payload and asks the model through the cache.
func (s *step) run(ctx context.Context, k dedupe.Key, payload []byte) (answer, error) {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return answer{}, &stepError{ReasonInvalidJSON, true, err}
	}
	system, err := s.render("system", doc)
	if err != nil {
		return answer{}, &stepError{ReasonTemplate, true, err}
	}
	prompt, err := s.render("prompt", doc)
	if err != nil {
		return answer{}, &stepError{ReasonTemplate, true, err}
	}
	req := openai.ChatCompletionRequest{
		Model:       s.model,
		Temperature: float32(s.cfg.Temperature),
		MaxTokens:   s.cfg.MaxTokens,
	}
	if s.cfg.Seed != nil {
		seed := int(*s.cfg.Seed)
		req.Seed = &seed
	}
	if strings.TrimSpace(system) != "" {
		req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: system})
	}
	req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: prompt})

	call := llmcache.Call{
		Namespace: s.pipeline, Step: s.cfg.Name, Intent: k.String(), KeyByIntent: true,
		Template: &llmcache.Template{Name: s.pipeline + "/" + s.cfg.Name, Version: s.version, Input: []byte("{}")},
		Budget:   s.budget,
	}
	ctx, cancel := context.WithTimeout(llmcache.WithCall(ctx, call), s.timeout)
	defer cancel()
	resp, err := s.client.CreateChatCompletion(ctx, req)
	if err != nil {
		var apiErr *openai.APIError
		switch {
		case errors.Is(err, llmcache.ErrBudgetExceeded):
			return answer{}, &stepError{ReasonBudget, true, err}
		case errors.As(err, &apiErr) && (apiErr.HTTPStatusCode == http.StatusBadRequest ||
			apiErr.HTTPStatusCode == http.StatusRequestEntityTooLarge || apiErr.HTTPStatusCode == http.StatusUnprocessableEntity):
			return answer{}, &stepError{ReasonPoison, true, err}
		}
		return answer{}, &stepError{"", false, err}
	}
	if len(resp.Choices) == 0 {
		return answer{}, &stepError{"", false, errors.New("the model returned no choices")}
	}
	return answer{
		Text: resp.Choices[0].Message.Content, Model: resp.Model,
		Cache:       resp.Header().Get(llmcache.HeaderCache),
		cacheKey:    resp.Header().Get(llmcache.HeaderCacheKey),
		InputTokens: resp.Usage.PromptTokens, OutputTokens: resp.Usage.CompletionTokens,
	}, nil
}

// effectBody is what a full pipeline's effect carries: the intent, the
// model's answer and the trigger.
func (g *gate) effectBody(k dedupe.Key, payload []byte, a answer) ([]byte, error) {
	b, err := json.Marshal(struct {
		Key      string          `json:"key"`
		Pipeline string          `json:"pipeline"`
		Step     string          `json:"step"`
		Model    string          `json:"model"`
		Answer   string          `json:"answer"`
		Trigger  json.RawMessage `json:"trigger"`
	}{k.String(), g.pipeline, g.step.cfg.Name, a.Model, a.Text, payload})
	if err != nil {
		return nil, fmt.Errorf("effect body: %w", err)
	}
	return b, nil
}
