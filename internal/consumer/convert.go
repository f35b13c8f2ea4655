package consumer

import (
	"text/template"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/tmpl"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// gateStep is the step name of the key spec of a pipeline without a step.
const gateStep = "gate"

// KeySpec returns the key spec of pipeline p's step (or, for a gate
// pipeline, of its gate): the key section, with the pipeline's and the
// step's names. Keys are derived from it, here and wherever a key is
// recomputed (the key and inspect commands, the admin operations), so it
// is the one translation of the section; renaming a step changes its keys.
func KeySpec(p *config.Pipeline) dedupe.KeySpec {
	ks := dedupe.KeySpec{
		Pipeline: p.Name,
		Step:     gateStep,
		Fields:   p.Key.Fields,
		Volatile: p.Key.Volatile,
		Version:  p.Key.Version,
	}
	if p.Step != nil {
		ks.Step = p.Step.Name
	}
	ks.PerRun = p.Key.Scope == config.ScopeRun
	ks.SHA256 = p.Key.Hash == config.HashSHA256
	ks.Headers = p.Key.Headers
	return ks
}

// StepTemplates parses step s's system and prompt templates into one set
// (package tmpl: its functions, and missingkey=error, so that a prompt
// naming a key the trigger lacks fails rather than sending "<no value>" to
// the model). Execute the templates named "system" and "prompt" with the
// trigger's JSON decoded into a map[string]any. Validation has parsed them
// already: for a validated Config the error is nil.
func StepTemplates(s *config.Step) (*template.Template, error) {
	t, err := tmpl.Parse("prompt", s.Prompt)
	if err != nil {
		return nil, err
	}
	if _, err := t.New("system").Parse(s.System); err != nil {
		return nil, &tmpl.Error{Name: "system", Err: err}
	}
	return t, nil
}
