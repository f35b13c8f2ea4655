package tmpl

import (
	"bytes"
	"encoding/json"
)

// Input is what an effect's templates (and the routes' conditions) see of
// one trigger, through [Input.Data].
type Input struct {
	// Trigger is the trigger's JSON, decoded with numbers as json.Number.
	Trigger any
	// Headers are the trigger's headers, the first value of each.
	Headers map[string]string
	// Key is the intent key; Identity is the key of the intent less its
	// status (equal to Key when the pipeline's key has no status): a
	// firing and its resolve share it.
	Key, Identity string
	// Status is the value at the pipeline's key.status ("firing",
	// "resolved"), or "".
	Status string
	// Pipeline, Step, Route and Effect name where the template runs.
	Pipeline, Step, Route, Effect string
	// Answer is the model step's answer, nil when there is no step or it
	// was skipped.
	Answer *Answer
}

// Answer is a model step's answer.
type Answer struct {
	// Text is the answer as the model wrote it.
	Text string
	// Fields is the answer's JSON, decoded, when the step asks for
	// structured output; nil otherwise.
	Fields any
	// Model is the model that answered.
	Model string
}

// Data returns the data value of an effect's templates, a map with these
// keys (so that templates read {{.trigger.alert.labels.severity}}):
//
//	trigger      the trigger's JSON
//	headers      its headers (map of string to string)
//	key          the intent key (32 hex digits)
//	identity     the intent key less the status: a firing and its resolve share it
//	status       the trigger's status (key.status), or ""
//	pipeline     the pipeline's name
//	step         the model step's name, or ""
//	route        the route taken, or "" without routes
//	effect       the effect's name
//	answer       the answer's fields with structured output, else its text; "" when the step did not run
//	answer_text  the answer's text, "" when the step did not run
//	model        the model that answered, or ""
func (in Input) Data() map[string]any {
	h := in.Headers
	if h == nil {
		h = map[string]string{}
	}
	d := map[string]any{
		"trigger": in.Trigger, "headers": h, "key": in.Key, "identity": in.Identity,
		"status": in.Status, "pipeline": in.Pipeline, "step": in.Step, "route": in.Route, "effect": in.Effect,
		"answer": "", "answer_text": "", "model": "",
	}
	if a := in.Answer; a != nil {
		d["answer"], d["answer_text"], d["model"] = a.Text, a.Text, a.Model
		if a.Fields != nil {
			d["answer"] = a.Fields
		}
	}
	return d
}

// DecodeJSON decodes a JSON document as templates and conditions see it:
// objects as map[string]any, numbers as json.Number.
func DecodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}
