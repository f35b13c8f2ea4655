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

	"github.com/santhosh-tekuri/jsonschema/v6"
	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/tmpl"
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
	limits   []llmcache.SpendLimit // the pipeline's spend limit, if any
	// completion is what a call reserves for its answer from the spend
	// limit when the step sets no max_tokens: the model's output limit.
	completion int64
	waitOver   bool // over_budget: wait
	timeout    time.Duration
	client     *openai.Client
	// schema validates a structured answer; nil without step.schema.
	schema   *jsonschema.Schema
	attempts int // calls for one structured answer
	// inRecord says the step's answers are kept in the intent's ledger
	// record (stepRecord), not in the cache: its pipeline has a ledger.
	inRecord bool
	// share sends the calls through the cache keyed by the rendered
	// prompt (llm.cache.share).
	share bool
}

// stepRecord is where a step keeps its answers in its intent's ledger
// record: prior is the record's note when the work was claimed, and save
// writes a new one (ledger.Ledger.Note) before the effect. The zero
// stepRecord keeps nothing.
type stepRecord struct {
	prior []byte
	// elsewhere says prior is not the record's note: this process held it
	// for the ledger, or the holder this one took over from had it. The
	// step writes it into the record before the effect, as if it had paid
	// for it, so that it outlives this holder too.
	elsewhere bool
	save      func(note []byte)
	// live, if set, reports whether the claim still holds: the model is
	// asked only while it does (errLeaseLost otherwise).
	live func() bool
}

// stepNote is what a model step keeps in its intent's ledger record
// (ledger.Ledger.Note): the answers of its calls, in order (more than one
// for a structured answer asked again), for the step's version. A retry,
// a takeover or a redrive of the intent takes them from the record
// instead of paying for them again; a new version (another prompt, model
// or schema) asks again.
type stepNote struct {
	Version string        `json:"version"`
	Answers []notedAnswer `json:"answers"`
}

// notedAnswer is one call's answer in a stepNote.
type notedAnswer struct {
	Text   string `json:"text"`
	Model  string `json:"model,omitempty"`
	Input  int    `json:"input_tokens,omitempty"`
	Output int    `json:"output_tokens,omitempty"`
}

// CacheRecord is answer.Cache for an answer taken from the intent's
// ledger record.
const CacheRecord = "record"

// noted returns the answers the note holds for version, if any.
func noted(note []byte, version string) []notedAnswer {
	if len(note) == 0 {
		return nil
	}
	var n stepNote
	if err := json.Unmarshal(note, &n); err != nil || n.Version != version {
		return nil
	}
	return n.Answers
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

	// Fields is a structured answer's JSON, decoded; nil without a schema.
	Fields any
}

// stepError is a step failure; a permanent one dead-letters the trigger.
// Another is retried, after delay if set, and dead-lettered on its last
// try with reason, if set.
type stepError struct {
	reason    outcome.Reason
	permanent bool
	err       error
	delay     time.Duration
}

func (e *stepError) Error() string { return "model step: " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

func newStep(c *Consumer, p *config.Pipeline) (*step, error) {
	t, err := StepTemplates(p.Step)
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
	s := &step{
		pipeline: p.Name, cfg: p.Step, tmpl: t, model: model,
		budget: budget, timeout: c.cfg.LLM.Timeout, client: c.opts.Model,
		attempts: max(p.Step.AnswerAttempts, 1),
		inRecord: p.Mode != config.ModeGateWindow, share: c.cfg.LLM.Cache.Share,
	}
	if len(p.Step.Schema) > 0 {
		// The schema asks for other answers: it is part of the version,
		// hence of the cache key. (Written after the other parameters, so
		// that a step without a schema keeps the keys it had.)
		if s.schema, err = config.CompileSchema(p.Step.Schema); err != nil {
			return nil, fmt.Errorf("step schema: %w", err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, p.Step.Schema); err != nil {
			return nil, fmt.Errorf("step schema: %w", err)
		}
		h.Write([]byte("\x00schema\x00"))
		h.Write(compact.Bytes())
	}
	s.version = hex.EncodeToString(h.Sum(nil)[:8])
	s.waitOver = p.Step.OverBudget == config.OverBudgetWait
	if p.Step.MaxBudget > 0 {
		s.limits = []llmcache.SpendLimit{{Name: "pipeline:" + p.Name, Max: p.Step.MaxBudget, Period: time.Duration(p.Step.BudgetDuration)}}
		if pr, ok := c.cfg.LLM.PriceOf(s.model); ok {
			s.completion = pr.MaxOutputTokens
		}
	}
	return s, nil
}

func (s *step) render(name string, doc any) (string, error) {
	var b strings.Builder
	if err := s.tmpl.ExecuteTemplate(&b, name, doc); err != nil {
		return "", err
	}
	return b.String(), nil
}

// run renders the prompt from payload and asks the model, or takes its
// answers from rec (the intent's ledger record) and keeps new ones there.
func (s *step) run(ctx context.Context, k dedupe.Key, payload []byte, rec stepRecord) (answer, error) {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return answer{}, &stepError{outcome.ReasonInvalidJSON, true, err, 0}
	}
	system, err := s.render("system", doc)
	if err != nil {
		return answer{}, &stepError{outcome.ReasonTemplate, true, err, 0}
	}
	prompt, err := s.render("prompt", doc)
	if err != nil {
		return answer{}, &stepError{outcome.ReasonTemplate, true, err, 0}
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

	if s.schema != nil {
		req.ResponseFormat = &openai.ChatCompletionResponseFormat{
			Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{
				Name: "answer", Schema: json.RawMessage(s.cfg.Schema), Strict: true,
			},
		}
	}
	var why error
	kept := stepNote{Version: s.version}
	if s.inRecord {
		kept.Answers = noted(rec.prior, s.version)
		if len(kept.Answers) > 0 && rec.elsewhere && rec.save != nil {
			if note, err := json.Marshal(kept); err == nil {
				rec.save(note)
			}
		}
	}
	for attempt := range s.attempts {
		var ans answer
		if attempt < len(kept.Answers) {
			// Paid for before, by an earlier delivery or holder of the
			// intent, and kept in its record.
			n := kept.Answers[attempt]
			ans = answer{Text: n.Text, Model: n.Model, Cache: CacheRecord, InputTokens: n.Input, OutputTokens: n.Output}
		} else {
			if rec.live != nil && !rec.live() {
				return answer{}, errLeaseLost
			}
			var err error
			if ans, err = s.call(ctx, k, req, attempt); err != nil {
				if why != nil && errors.Is(err, llmcache.ErrBudgetExceeded) {
					// The budget ends the retries of a structured answer.
					return answer{}, &stepError{outcome.ReasonBadAnswer, true, fmt.Errorf("%w; asking again: %w", why, err), 0}
				}
				return answer{}, err
			}
			if s.inRecord && rec.save != nil {
				kept.Answers = append(kept.Answers[:attempt:attempt], notedAnswer{Text: ans.Text, Model: ans.Model, Input: ans.InputTokens, Output: ans.OutputTokens})
				if note, err := json.Marshal(kept); err == nil {
					rec.save(note)
				}
			}
		}
		if s.schema == nil {
			return ans, nil
		}
		if ans.Fields, why = s.check(ans.Text); why == nil {
			return ans, nil
		}
		// Ask again, saying what was wrong: another request, and another
		// answer kept in the record (or, by the attempt in the cache key,
		// another cache entry), so that a retry of the trigger replays
		// each attempt instead of paying for it again.
		req.Messages = append(req.Messages,
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: ans.Text},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: "That answer does not match the JSON schema (" + why.Error() + "). Answer again with JSON that matches it."})
	}
	return answer{}, &stepError{outcome.ReasonBadAnswer, true, fmt.Errorf("%d answers did not match the step's schema; the last: %w", s.attempts, why), 0}
}

// check validates a structured answer against the schema and returns its
// fields.
func (s *step) check(text string) (any, error) {
	v, err := tmpl.DecodeJSON([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	// The validator wants numbers as it decodes them itself.
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if err := s.schema.Validate(doc); err != nil {
		msg := strings.Join(strings.Fields(err.Error()), " ")
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		return nil, errors.New(msg)
	}
	return v, nil
}

// call makes one model call through the cache; attempt numbers the calls
// for one structured answer, and is part of the cache key past the first.
func (s *step) call(ctx context.Context, k dedupe.Key, req openai.ChatCompletionRequest, attempt int) (answer, error) {
	input := []byte("{}")
	if attempt > 0 {
		input = fmt.Appendf(nil, `{"attempt":%d}`, attempt)
	}
	call := s.cacheCall(k, input)
	ctx, cancel := context.WithTimeout(llmcache.WithCall(ctx, call), s.timeout)
	defer cancel()
	resp, err := s.client.CreateChatCompletion(ctx, req)
	if err != nil {
		var apiErr *openai.APIError
		switch {
		case errors.Is(err, llmcache.ErrBudgetExceeded):
			return answer{}, &stepError{outcome.ReasonBudget, true, err, 0}
		case errors.Is(err, llmcache.ErrSpendLimit):
			return answer{}, s.overBudget(err)
		case errors.As(err, &apiErr) && (apiErr.HTTPStatusCode == http.StatusBadRequest ||
			apiErr.HTTPStatusCode == http.StatusRequestEntityTooLarge || apiErr.HTTPStatusCode == http.StatusUnprocessableEntity):
			return answer{}, &stepError{outcome.ReasonPoison, true, err, 0}
		}
		return answer{}, &stepError{"", false, err, 0}
	}
	if len(resp.Choices) == 0 {
		return answer{}, &stepError{"", false, errors.New("the model returned no choices"), 0}
	}
	return answer{
		Text: resp.Choices[0].Message.Content, Model: resp.Model,
		Cache:       resp.Header().Get(llmcache.HeaderCache),
		cacheKey:    resp.Header().Get(llmcache.HeaderCacheKey),
		InputTokens: resp.Usage.PromptTokens, OutputTokens: resp.Usage.CompletionTokens,
	}, nil
}

// cacheCall is how call number attempt (input says which) for intent k
// uses the LLM cache: keyed by the rendered prompt, shared by every intent
// that sends it (llm.cache.share); past the cache, its answer kept in the
// intent's ledger record instead (a pipeline with a ledger); or keyed by
// the intent and the step's version (a pipeline without one), so that a
// reworded duplicate of a trigger reuses the answer. Budgets and spend
// limits apply to every call the cache lets out.
func (s *step) cacheCall(k dedupe.Key, input []byte) llmcache.Call {
	call := llmcache.Call{
		Namespace: s.pipeline, Step: s.cfg.Name, Intent: k.String(),
		Budget: s.budget, Limits: s.limits, CompletionTokens: s.completion,
	}
	switch {
	case s.share:
	case s.inRecord:
		call.Mode = llmcache.ModeBypass
	default:
		call.KeyByIntent = true
		call.Template = &llmcache.Template{Name: s.pipeline + "/" + s.cfg.Name, Version: s.version, Input: input}
	}
	return call
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

// overBudget is the failure of a call the pipeline's spend limit refused:
// dead-lettered at once, or (over_budget: wait) put back until the limit's
// period ends, an hour at most between looks, and dead-lettered on its
// last try.
func (s *step) overBudget(err error) *stepError {
	if !s.waitOver {
		return &stepError{outcome.ReasonOverBudget, true, err, 0}
	}
	d := time.Hour
	if sl, ok := errors.AsType[*llmcache.SpendLimitError](err); ok && !sl.Reset.IsZero() {
		d = min(d, time.Until(sl.Reset))
	}
	return &stepError{outcome.ReasonOverBudget, false, err, max(d, time.Second)}
}
