// Package cond compiles and evaluates the conditions of a pipeline — its
// when: filter and its routes — written in CEL (github.com/google/cel-go),
// the expression language of Kubernetes admission policies and Envoy:
// typed, sandboxed, without loops, and bounded here in cost and time per
// evaluation whatever the trigger holds.
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
//
// # Limits
//
// The data a condition reads is whoever sent the trigger's: anyone who
// can reach the webhook ingress, or publish on a trigger subject. So each
// evaluation is bounded whatever that data is. Its cost — CEL's measure,
// with every call charged by the size of what it reads and makes and
// every comprehension by the elements it may visit (cost.go) — is at most
// [DefaultCostLimit], which bounds its time and the memory it allocates
// (about 16 MiB at most); and it is interrupted at [DefaultTimeout]
// (between two iterations of a comprehension). An evaluation stopped at
// either fails with an error matching [ErrLimit] (and [ErrEval]): the
// consumer dead-letters the trigger with reason condition, and a
// redelivery of it fails the same way, at the same cost.
//
// [Condition.Check], which config check runs on every condition, refuses
// a condition whose worst case grows faster than the trigger (a loop in a
// loop over the trigger's lists, a concatenation or an `in` in a loop):
// such a condition can be made to fail by whoever sends the trigger, and
// fails on large enough ordinary ones. A pattern of matches must be a
// literal: one read from the trigger could take hours in a single call.
package cond

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	"github.com/google/cel-go/parser"

	"github.com/oncegate/oncegate/internal/tmpl"
)

// DefaultCostLimit bounds the cost of one evaluation: CEL's own measure,
// about one unit per operation, ten per element a comprehension visits,
// with every call charged by the size of what it reads and makes (see
// cost.go). It bounds the evaluation's time (a few tens of milliseconds)
// and the memory it allocates (at most about 160 bytes a unit, so 16 MiB
// for the default) whatever the trigger holds. A condition that passes it
// on some trigger fails on it with ErrLimit. A comprehension over a list
// of more than about 5,000 elements passes it.
const DefaultCostLimit = 100_000

// DefaultTimeout bounds the wall time of one evaluation, as a second
// guard behind the cost limit (the cost limit alone bounds the memory).
// A condition that passes it fails with ErrLimit.
const DefaultTimeout = time.Second

// MaxTriggerBytes is the size of the largest trigger a pipeline accepts
// (pkg/canon's default), which Check takes as the size of everything a
// trigger's sender sets.
const MaxTriggerBytes = 1 << 20

var (
	// ErrCompile is matched by the error of Compile: the expression does
	// not parse, names an unknown variable or function, or is not a bool.
	ErrCompile = errors.New("cond: condition does not compile")
	// ErrEval is matched by the error of Eval: the condition failed on
	// this trigger (a missing member, a type mismatch, a limit).
	ErrEval = errors.New("cond: condition failed")
	// ErrLimit is matched, with ErrEval, by the error of an evaluation
	// stopped at its cost limit or its deadline.
	ErrLimit = errors.New("cond: condition over its limit")
	// ErrUnbounded is matched by the error of Check: the condition's
	// worst case grows faster than the trigger.
	ErrUnbounded = errors.New("cond: condition's worst case is unbounded")
)

// errKind says what an Error is.
type errKind uint8

const (
	kindEval errKind = iota
	kindCompile
	kindLimit
	kindUnbounded
)

// Error is a condition that does not compile, failed on a trigger, or is
// unbounded.
type Error struct {
	Expr string
	// Line and Column locate the first problem in Expr, from 1; 0 when
	// unknown.
	Line, Column int
	Msg          string
	kind         errKind
}

func (e *Error) Error() string {
	at := ""
	if e.Line > 0 {
		at = fmt.Sprintf(" at %d:%d", e.Line, e.Column)
	}
	what := "failed"
	switch e.kind {
	case kindCompile:
		what = "does not compile"
	case kindUnbounded:
		what = "is unbounded"
	}
	return fmt.Sprintf("cond: %q %s%s: %s", e.Expr, what, at, e.Msg)
}

// Is matches ErrCompile, ErrEval (and ErrLimit for a limit), or
// ErrUnbounded.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrCompile:
		return e.kind == kindCompile
	case ErrEval:
		return e.kind == kindEval || e.kind == kindLimit
	case ErrLimit:
		return e.kind == kindLimit
	case ErrUnbounded:
		return e.kind == kindUnbounded
	}
	return false
}

// rangeFn wraps the range of each comprehension that is not a literal
// (see ranged), so that the meter charges the iterations before they run.
// It returns its argument; a condition cannot name it.
const rangeFn = "@range"

// vars declares the variables of a condition.
var vars = []cel.EnvOption{
	cel.Variable("trigger", cel.DynType),
	cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
	cel.Variable("status", cel.StringType),
	cel.Variable("answer", cel.DynType),
	cel.Variable("key", cel.StringType),
	cel.Variable("identity", cel.StringType),
	cel.Variable("pipeline", cel.StringType),
	cel.CrossTypeNumericComparisons(true),
}

// env compiles the conditions that run: each comprehension's range goes
// through rangeFn.
var env = sync.OnceValues(func() (*cel.Env, error) {
	macros := []cel.Macro{parser.HasMacro}
	for _, m := range parser.AllMacros {
		if m.IsReceiverStyle() {
			macros = append(macros, parser.NewReceiverMacro(m.Function(), m.ArgCount(), ranged(m.Expander())))
		}
	}
	t := cel.TypeParamType("T")
	return cel.NewEnv(slices.Concat(vars, []cel.EnvOption{
		cel.ClearMacros(),
		cel.Macros(macros...),
		cel.Function(rangeFn, cel.Overload("@range_T", []*cel.Type{t}, t, cel.UnaryBinding(func(v ref.Val) ref.Val { return v }))),
	})...)
})

// checkEnv compiles the conditions that Check estimates, with the
// standard macros.
var checkEnv = sync.OnceValues(func() (*cel.Env, error) { return cel.NewEnv(vars...) })

// ranged is the comprehension macro expand with its range wrapped in
// rangeFn, unless the range is a list or map literal (whose size the
// expression fixes).
func ranged(expand parser.MacroExpander) parser.MacroExpander {
	return func(eh parser.ExprHelper, target ast.Expr, args []ast.Expr) (ast.Expr, *common.Error) {
		if k := target.Kind(); k != ast.ListKind && k != ast.MapKind {
			target = eh.NewCall(rangeFn, target)
		}
		return expand(eh, target, args)
	}
}

// Options bound a condition's evaluations. The zero value means the
// defaults.
type Options struct {
	// CostLimit bounds the cost of one evaluation. The default is
	// DefaultCostLimit.
	CostLimit uint64
	// Timeout bounds the wall time of one evaluation. The default is
	// DefaultTimeout.
	Timeout time.Duration
}

// Condition is a compiled condition. It is safe for concurrent use.
type Condition struct {
	expr       string
	prg        cel.Program
	opts       Options
	usesAnswer bool
}

// Compile parses and type-checks expr, bounded by the default limits; the
// error is an [*Error] matching [ErrCompile], with the position of the
// first problem.
func Compile(expr string) (*Condition, error) { return CompileWith(expr, Options{}) }

// CompileWith is Compile with the limits o.
func CompileWith(expr string, o Options) (*Condition, error) {
	if o.CostLimit == 0 {
		o.CostLimit = DefaultCostLimit
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("cond: %w", err)
	}
	a, iss := e.Compile(expr)
	if iss != nil && iss.Err() != nil {
		ce := &Error{Expr: expr, kind: kindCompile, Msg: iss.Err().Error()}
		if errs := iss.Errors(); len(errs) > 0 {
			loc := errs[0].Location
			ce.Line, ce.Column, ce.Msg = loc.Line(), loc.Column()+1, errs[0].Message
		}
		return nil, ce
	}
	if !a.OutputType().IsExactType(types.BoolType) && !a.OutputType().IsExactType(types.DynType) {
		return nil, &Error{Expr: expr, kind: kindCompile, Msg: "the condition is of type " + a.OutputType().String() + "; want bool"}
	}
	if at, ok := dynamicPattern(a); ok {
		loc := a.NativeRep().SourceInfo().GetStartLocation(at)
		return nil, &Error{Expr: expr, kind: kindCompile, Line: loc.Line(), Column: loc.Column() + 1,
			Msg: "matches takes a literal pattern: a pattern read from the trigger could take hours to match"}
	}
	prg, err := e.Program(a, cel.CostLimit(o.CostLimit), cel.CostTracking(meter{limit: o.CostLimit}), cel.InterruptCheckFrequency(1))
	if err != nil {
		return nil, &Error{Expr: expr, kind: kindCompile, Msg: err.Error()}
	}
	c := &Condition{expr: expr, prg: prg, opts: o}
	for _, ref := range a.NativeRep().ReferenceMap() {
		if ref.Name == "answer" {
			c.usesAnswer = true
		}
	}
	return c, nil
}

// dynamicPattern returns the id of the first pattern of matches that is
// not a string literal.
func dynamicPattern(a *cel.Ast) (int64, bool) {
	var id int64
	found := false
	ast.PostOrderVisit(a.NativeRep().Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		if found || e.Kind() != ast.CallKind || e.AsCall().FunctionName() != overloads.Matches {
			return
		}
		args := e.AsCall().Args()
		pattern := args[len(args)-1]
		if pattern.Kind() != ast.LiteralKind {
			id, found = pattern.ID(), true
		}
	}))
	return id, found
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
// [ErrEval], and [ErrLimit] too when the evaluation was stopped at its
// cost limit or its deadline.
func (c *Condition) Eval(v Vars) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	out, _, err := c.prg.ContextEval(ctx, map[string]any(v))
	if err != nil {
		var ce interpreter.EvalCancelledError
		switch {
		case errors.As(err, &ce) && ce.Cause == interpreter.CostLimitExceeded:
			return false, &Error{Expr: c.expr, kind: kindLimit, Msg: fmt.Sprintf("stopped at the cost limit (%d)", c.opts.CostLimit)}
		case errors.Is(err, interpreter.InterruptError{}):
			return false, &Error{Expr: c.expr, kind: kindLimit, Msg: fmt.Sprintf("stopped at the deadline (%v)", c.opts.Timeout)}
		}
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

// Check reports whether the condition's worst case is bounded by the
// trigger: whether its cost can grow faster than the data it reads. It
// estimates the most an evaluation can cost when everything a trigger's
// sender sets (trigger, headers, status, answer, and every member of
// them) is as large as MaxTriggerBytes, then four times as large: a
// condition whose worst case grows more than eightfold does, for each
// element of a list or map it reads, work that itself grows with the
// trigger (a loop in a loop, a concatenation, `in` or a comparison with
// another member of the trigger). Such a condition can be made to pass
// its cost limit by whoever sends the trigger, and may fail on an
// ordinary large one; the error is an [*Error] matching [ErrUnbounded].
//
// The estimate is CEL's, which does not know that the elements of a list
// share its size: comparing each element of a list with another member
// of the trigger (`trigger.alerts.all(a, a.status == trigger.status)`)
// counts as growing with the square of the trigger although it does not.
func (c *Condition) Check() error {
	e, err := checkEnv()
	if err != nil {
		return fmt.Errorf("cond: %w", err)
	}
	a, iss := e.Compile(c.expr)
	if iss != nil && iss.Err() != nil {
		return &Error{Expr: c.expr, kind: kindCompile, Msg: iss.Err().Error()}
	}
	worst := func(scale uint64) uint64 {
		est, err := e.EstimateCost(a, sizes{scale: scale})
		if err != nil {
			return math.MaxUint64
		}
		return est.Max
	}
	lo, hi := worst(MaxTriggerBytes), worst(4*MaxTriggerBytes)
	if lo == math.MaxUint64 || hi == math.MaxUint64 || float64(hi) > 8*float64(lo) {
		growth := "without bound"
		if lo > 0 && hi < math.MaxUint64 {
			growth = fmt.Sprintf("%.0f-fold", float64(hi)/float64(lo))
		}
		return &Error{Expr: c.expr, kind: kindUnbounded, Msg: "its worst case grows faster than the trigger: on a trigger four times as large it grows " + growth +
			" (for each element of a list or map it reads, it does work that grows with the trigger: a loop in a loop, a concatenation, `in`, or a comparison with another member);" +
			" a large enough trigger would stop it at its cost limit and be dead-lettered (reason condition)"}
	}
	return nil
}
