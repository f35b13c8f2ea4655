package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/oncegate/oncegate/internal/tmpl"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Step is a pipeline's model call.
type Step struct {
	// Name names the step in keys and cache entries: lower-case letters,
	// digits and '-'. Required. Renaming a step changes its keys.
	Name string `yaml:"name"`
	// Model is the model to call. The default is LLM.Model.
	Model string `yaml:"model"`
	// System is the system message, a text/template like Prompt.
	System string `yaml:"system"`
	// Prompt is a text/template executed with the trigger's JSON decoded
	// into a map ({{.alert.labels.alertname}}), with the template functions
	// of docs/effects.md; a key the trigger lacks is an error. Required.
	Prompt string `yaml:"prompt"`
	// Temperature is the sampling temperature, 0 to 2. The default is 0.
	Temperature float64 `yaml:"temperature"`
	// MaxTokens caps the completion; 0 (the default) leaves it to the
	// model.
	MaxTokens int `yaml:"max_tokens"`
	// Seed, if set, is sent for reproducible sampling.
	Seed *int64 `yaml:"seed"`
	// BudgetTokens caps the tokens spent on one intent; 0 means no cap.
	// The default is LLM.Cache.BudgetTokens.
	BudgetTokens int64 `yaml:"budget_tokens"`
	// MaxBudget is the most the step's model calls may spend per
	// BudgetDuration, in US dollars at llm.prices, across every replica
	// with a shared cache; 0 (the default) means no limit. The model
	// needs a price, and a call's answer is reserved before it goes out:
	// MaxTokens, or else the price's max_output_tokens, one of which must
	// be set. See spend.go.
	MaxBudget float64 `yaml:"max_budget"`
	// BudgetDuration is the period of MaxBudget, such as "1d" or "30d";
	// 0 (the default) is one period that never ends.
	BudgetDuration Period `yaml:"budget_duration"`
	// OverBudget is what a trigger whose model call MaxBudget refuses
	// does: OverBudgetDeadLetter (the default: dead-lettered with reason
	// over_budget, to redrive once the budget allows) or OverBudgetWait
	// (put back until the period ends, for at most an hour at a time).
	OverBudget string `yaml:"over_budget"`
	// SkipWhen is a CEL condition (package cond) over the trigger, its
	// headers and status: when it holds the step is not run and nothing is
	// paid (a resolve: `status == "resolved"`). Templates then see an
	// empty answer.
	SkipWhen string `yaml:"skip_when"`
	// Schema, a JSON Schema (written in YAML or JSON), asks the model for
	// structured output (response_format json_schema, strict): the answer
	// must be JSON valid against it, and its fields are what templates
	// and routes read as .answer / answer. An answer that is not is asked
	// again, up to AnswerAttempts calls within the intent's token budget,
	// then dead-lettered (bad_answer). The schema is part of the cache key.
	Schema JSONValue `yaml:"schema"`
	// AnswerAttempts bounds the calls for one structured answer. The
	// default is 3.
	AnswerAttempts int `yaml:"answer_attempts"`
}

// DefaultAnswerAttempts is Step.AnswerAttempts's default.
const DefaultAnswerAttempts = 3

// JSONValue is a JSON document written in the configuration as YAML (or
// JSON, which is YAML), or given to an ONCEGATE_* variable as JSON text.
type JSONValue []byte

// UnmarshalText implements encoding.TextUnmarshaler, for environment
// variables: the text is JSON.
func (j *JSONValue) UnmarshalText(b []byte) error {
	if len(bytes.TrimSpace(b)) == 0 {
		*j = nil
		return nil
	}
	if !json.Valid(b) {
		return fmt.Errorf("not JSON")
	}
	*j = append(JSONValue(nil), b...)
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (j JSONValue) MarshalText() ([]byte, error) { return j, nil }

// stepDefaults fills in pipeline p's step, if it has one: its model and
// token budget from the llm section's.
func (c *Config) stepDefaults(at func(string) string, p *Pipeline) {
	if p.Step == nil {
		return
	}
	setDefault(c, at("step.model"), &p.Step.Model, c.LLM.Model)
	setDefault(c, at("step.temperature"), &p.Step.Temperature, 0)
	setDefault(c, at("step.max_tokens"), &p.Step.MaxTokens, 0)
	setDefault(c, at("step.budget_tokens"), &p.Step.BudgetTokens, c.LLM.Cache.BudgetTokens)
	setDefault(c, at("step.answer_attempts"), &p.Step.AnswerAttempts, DefaultAnswerAttempts)
}

// step checks a pipeline's model step: its name, model, templates,
// schema and limits.
func (v *validator) step(at func(string) string, s *Step) {
	if err := checkName(s.Name); err != nil {
		v.add(at("step.name"), err)
	}
	if s.Model == "" {
		v.add(at("step.model"), missing("a model is required"))
	}
	if s.Prompt == "" {
		v.add(at("step.prompt"), missing("a prompt template is required"))
	}
	for _, t := range []struct{ key, text string }{{"system", s.System}, {"prompt", s.Prompt}} {
		if _, err := tmpl.Parse(t.key, t.text); err != nil {
			v.add(at("step."+t.key), invalid("%v", errors.Unwrap(err)))
		}
	}
	v.schema(at("step.schema"), s.Schema)
	if s.AnswerAttempts < 1 {
		v.add(at("step.answer_attempts"), invalid("must be at least 1, got %d", s.AnswerAttempts))
	}
	if s.Temperature < 0 || s.Temperature > 2 || math.IsNaN(s.Temperature) {
		v.add(at("step.temperature"), invalid("must be 0 to 2, got %v", s.Temperature))
	}
	if s.MaxTokens < 0 {
		v.add(at("step.max_tokens"), invalid("must be 0 (the model's default) or positive, got %d", s.MaxTokens))
	}
	if s.BudgetTokens < 0 {
		v.add(at("step.budget_tokens"), invalid("must be 0 (no cap) or positive, got %d", s.BudgetTokens))
	}
}

// schema checks a step's JSON Schema.
func (v *validator) schema(path string, s JSONValue) {
	if len(s) == 0 {
		return
	}
	if _, err := CompileSchema(s); err != nil {
		v.add(path, invalid("%v", err))
	}
}

// CompileSchema compiles a step's JSON Schema (draft 2020-12 unless it
// says otherwise with $schema). The schema must describe an object, as
// the providers' structured output requires.
func CompileSchema(s JSONValue) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(s)))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if m, ok := doc.(map[string]any); !ok || m["type"] != "object" {
		return nil, errors.New(`the schema must describe an object ("type": "object")`)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("step.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("step.json")
}

// step explains a pipeline's model step, or says it has none.
func (x *explainer) step(at func(string) string, s *Step) []string {
	if s == nil {
		return []string{"none"}
	}
	c := x.c
	maxTok := "unset (the model decides)"
	if s.MaxTokens > 0 {
		maxTok = strconv.Itoa(s.MaxTokens)
	}
	parts := []string{
		s.Name + " on model " + x.d(at("step.model"), s.Model, s.Model),
		"temperature " + x.d(at("step.temperature"), s.Temperature, strconv.FormatFloat(s.Temperature, 'g', -1, 64)),
		"max_tokens " + x.d(at("step.max_tokens"), s.MaxTokens, maxTok),
	}
	if s.Seed != nil {
		parts = append(parts, "seed "+strconv.FormatInt(*s.Seed, 10))
	}
	parts = append(parts, "token budget per intent "+x.d(at("step.budget_tokens"), s.BudgetTokens, budgetText(s.BudgetTokens)))
	if s.MaxBudget > 0 {
		parts = append(parts, spendLimit(s.MaxBudget, s.BudgetDuration)+", then "+x.d(at("step.over_budget"), s.OverBudget, s.OverBudget))
	}
	if len(s.Schema) > 0 {
		parts = append(parts, fmt.Sprintf("structured output: a JSON answer valid against the schema, %d calls at most", s.AnswerAttempts))
	}
	if s.SkipWhen != "" {
		parts = append(parts, "skipped when "+s.SkipWhen)
	}
	switch {
	case c.LLM.Standin:
		parts = append(parts, "served by the stand-in model (llm.standin)")
	case c.LLM.BaseURL == "":
		parts = append(parts, "no model to serve it: set llm.base_url, or llm.standin: true")
	}
	return parts
}
