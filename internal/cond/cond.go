// Package cond compiles and evaluates the conditions of a pipeline — its
// when: filter and its routes — written in CEL (github.com/google/cel-go),
// the expression language of Kubernetes admission policies and Envoy:
// typed, sandboxed, without loops, and bounded here by a cost limit per
// evaluation.
//
// # Variables
//
// A condition sees these variables, the same values the effect templates
// see (package tmpl):
//
//	trigger   dyn                  the trigger's JSON (numbers as int or double)
//	headers   map(string, string)  the trigger's headers, the first value of each
//	status    string               the trigger's status (key.status), or ""
//	answer    dyn                  the model's answer: its fields with structured output, else its text; "" before the step or without one
//	key       string               the intent key
//	identity  string               the intent key less the status
//	pipeline  string               the pipeline's name
//
// and must be of type bool: `status == "resolved"`,
// `trigger.alert.labels.severity in ["critical", "page"]`,
// `answer.severity == "critical"`. A member a trigger lacks is an error
// when the condition is evaluated, not false: guard optional members with
// has(trigger.alert.labels.team).
package cond

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"

	"github.com/oncegate/oncegate/internal/tmpl"
)

// DefaultCostLimit bounds the cost of one evaluation (CEL's own measure,
// about one unit per operation and per element a list or string operation
// visits). A condition that passes it on some trigger fails on it with
// ErrEval.
const DefaultCostLimit = 100_000

var (
	// ErrCompile is matched by the error of Compile: the expression does
	// not parse, names an unknown variable or function, or is not a bool.
	ErrCompile = errors.New("cond: condition does not compile")
	// ErrEval is matched by the error of Eval: the condition failed on
	// this trigger (a missing member, a type mismatch, the cost limit).
	ErrEval = errors.New("cond: condition failed")
)

// Error is a condition that does not compile or failed on a trigger.
type Error struct {
	Expr string
	// Line and Column locate the first problem in Expr, from 1; 0 when
	// unknown.
	Line, Column int
	Msg          string
	compile      bool
}

func (e *Error) Error() string {
	at := ""
	if e.Line > 0 {
		at = fmt.Sprintf(" at %d:%d", e.Line, e.Column)
	}
	what := "failed"
	if e.compile {
		what = "does not compile"
	}
	return fmt.Sprintf("cond: %q %s%s: %s", e.Expr, what, at, e.Msg)
}

// Is matches ErrCompile or ErrEval.
func (e *Error) Is(target error) bool {
	return target == ErrCompile && e.compile || target == ErrEval && !e.compile
}

var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("trigger", cel.DynType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("status", cel.StringType),
		cel.Variable("answer", cel.DynType),
		cel.Variable("key", cel.StringType),
		cel.Variable("identity", cel.StringType),
		cel.Variable("pipeline", cel.StringType),
		cel.CrossTypeNumericComparisons(true),
	)
})

// Condition is a compiled condition. It is safe for concurrent use.
type Condition struct {
	expr       string
	prg        cel.Program
	usesAnswer bool
}

// Compile parses and type-checks expr; the error is an [*Error] matching
// [ErrCompile], with the position of the first problem.
func Compile(expr string) (*Condition, error) {
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("cond: %w", err)
	}
	ast, iss := e.Compile(expr)
	if iss != nil && iss.Err() != nil {
		ce := &Error{Expr: expr, compile: true, Msg: iss.Err().Error()}
		if errs := iss.Errors(); len(errs) > 0 {
			loc := errs[0].Location
			ce.Line, ce.Column, ce.Msg = loc.Line(), loc.Column()+1, errs[0].Message
		}
		return nil, ce
	}
	if !ast.OutputType().IsExactType(types.BoolType) && !ast.OutputType().IsExactType(types.DynType) {
		return nil, &Error{Expr: expr, compile: true, Msg: "the condition is of type " + ast.OutputType().String() + "; want bool"}
	}
	prg, err := e.Program(ast, cel.CostLimit(DefaultCostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, &Error{Expr: expr, compile: true, Msg: err.Error()}
	}
	c := &Condition{expr: expr, prg: prg}
	for _, ref := range ast.NativeRep().ReferenceMap() {
		if ref.Name == "answer" {
			c.usesAnswer = true
		}
	}
	return c, nil
}

// String returns the expression.
func (c *Condition) String() string { return c.expr }

// UsesAnswer reports whether the condition reads the model's answer, so
// that it can be decided only after the model step.
func (c *Condition) UsesAnswer() bool { return c.usesAnswer }

// Vars are the values a condition is evaluated with; build them once per
// trigger with [NewVars].
type Vars map[string]any

// NewVars returns the variables of in: the trigger's JSON numbers become
// CEL ints (when whole and within int64) or doubles.
func NewVars(in tmpl.Input) Vars {
	v := Vars{
		"trigger": celValue(in.Trigger), "headers": in.Headers, "status": in.Status,
		"answer": "", "key": in.Key, "identity": in.Identity, "pipeline": in.Pipeline,
	}
	if v["headers"] == nil || in.Headers == nil {
		v["headers"] = map[string]string{}
	}
	if a := in.Answer; a != nil {
		v["answer"] = a.Text
		if a.Fields != nil {
			v["answer"] = celValue(a.Fields)
		}
	}
	return v
}

// Eval evaluates the condition; the error is an [*Error] matching
// [ErrEval].
func (c *Condition) Eval(v Vars) (bool, error) {
	out, _, err := c.prg.Eval(map[string]any(v))
	if err != nil {
		return false, &Error{Expr: c.expr, Msg: err.Error()}
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, &Error{Expr: c.expr, Msg: fmt.Sprintf("the condition gave %s, not a bool", strings.ToLower(out.Type().TypeName()))}
	}
	return b, nil
}

// celValue converts JSON decoded with json.Number into what CEL reads.
func celValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = celValue(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = celValue(e)
		}
		return l
	}
	return v
}
