package cond

import (
	"math"
	"strings"

	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// The cost of an evaluation is CEL's own measure — one unit per variable,
// member or index read and per call, ten per list or map built — with
// every call charged by the size of what it reads and makes, as the
// interpreter sees it when it runs (meter), and every comprehension
// charged for the elements it may visit before it starts (rangeFn).
//
// CEL's own charges are by the overload the checker picked: a call on
// `trigger`, which is dyn, has no overload picked, and CEL charges it one
// unit whatever its size (a string concatenation of 128 KiB, a list
// membership of ten thousand lists). And CEL charges a comprehension by
// the operations of each iteration, which can cost nothing
// (`l.filter(x, false)`); cel-go's cost tracker itself takes time that
// grows with the square of the iterations (it keeps each iteration's
// results on a stack that it searches), so iterations must be few: each
// is charged rangeUnits up front.
//
// The charges, in units (a text is a string or bytes; its units are one
// per 10 bytes, rounded up, as CEL counts a string's traversal):
//
//	x.all(…), x.exists(…), x.exists_one(…), x.map(…), x.filter(…)
//	                  1 + rangeUnits × the size of x (a list's length, a
//	                  map's entries), unless x is a list or map literal
//	a == b, a != b    1 + the smaller of the two, counted deep (each member
//	                  of a list or map 1 plus its own count, each text its units)
//	e in list         1 + the list's length + the smaller of length × e's deep
//	                  count and the list's deep count
//	k in map          1 + k's units
//	s.contains(t)     1 + units(s) × units(t), as CEL charges it
//	s.matches(re)     1 + units(1+len(s)) × ⌈len(re)/4⌉, as CEL charges it
//	startsWith, endsWith  1 + the units of the prefix or suffix
//	dyn(x), type(x)   1
//	any other call    1 + the units of each text it reads and of a text it
//	                  makes
//
// Each charge is bounded by the work the call did, within a constant, and
// each call's work by its charge: so the cost limit bounds an evaluation's
// time and the memory it allocates whatever the trigger holds, with no
// help from the deadline. A deep count stops once it passes the limit.

// rangeUnits is the charge for each element a comprehension may visit:
// with the default limit, 10,000 iterations at most, which cel-go's cost
// tracker goes through in about 0.2 s.
const rangeUnits = 10

// textUnits is the cost of traversing n bytes of text.
func textUnits(n int) uint64 { return uint64(n+9) / 10 }

// text returns the units of v when it is a string or bytes, else 0.
func text(v ref.Val) uint64 {
	switch x := v.(type) {
	case types.String:
		return textUnits(len(x))
	case types.Bytes:
		return textUnits(len(x))
	}
	return 0
}

// size returns v's length when it is a list or a map, else 0.
func size(v ref.Val) uint64 {
	if s, ok := v.(traits.Sizer); ok && isContainer(v) {
		if n, ok := s.Size().(types.Int); ok && n > 0 {
			return uint64(n)
		}
	}
	return 0
}

func isContainer(v ref.Val) bool {
	switch v.(type) {
	case traits.Lister, traits.Mapper:
		return true
	}
	return false
}

// meter is the interpreter.ActualCostEstimator of every evaluation.
type meter struct {
	limit uint64
}

// CallCost implements interpreter.ActualCostEstimator.
func (m meter) CallCost(function, _ string, args []ref.Val, result ref.Val) *uint64 {
	c := m.charge(function, args, result)
	return &c
}

func (m meter) charge(function string, args []ref.Val, result ref.Val) uint64 {
	switch function {
	case operators.Equals, operators.NotEquals:
		if len(args) == 2 {
			return 1 + m.equal(args[0], args[1])
		}
	case operators.In:
		if len(args) == 2 {
			return 1 + m.in(args[0], args[1])
		}
	case overloads.Contains:
		if len(args) == 2 {
			return 1 + mul(text(args[0]), text(args[1]))
		}
	case overloads.Matches:
		if len(args) == 2 {
			re := uint64(0)
			if s, ok := args[1].(types.String); ok {
				re = uint64(len(s)+3) / 4
			}
			n := 0
			if s, ok := args[0].(types.String); ok {
				n = len(s)
			}
			return 1 + mul(textUnits(1+n), re)
		}
	case overloads.StartsWith, overloads.EndsWith:
		if len(args) == 2 {
			return 1 + text(args[1])
		}
	case overloads.TypeConvertDyn, overloads.TypeConvertType:
		return 1
	case rangeFn:
		if len(args) == 1 {
			return 1 + mul(rangeUnits, size(args[0]))
		}
	}
	c := 1 + text(result)
	for _, a := range args {
		c = add(c, text(a))
	}
	return c
}

// equal is the work of comparing a and b: the smaller, counted deep. The
// two are counted in step, so that comparing a large value with a small
// one costs (and counts) little.
func (m meter) equal(a, b ref.Val) uint64 {
	if !isContainer(a) || !isContainer(b) {
		return min(text(a), text(b))
	}
	for budget := uint64(16); ; budget = mul(budget, 4) {
		da, db := deep(a, budget), deep(b, budget)
		if da < budget || db < budget || budget > m.limit || budget == math.MaxUint64 {
			return min(da, db)
		}
	}
}

// in is the work of e in c: for a list, each element compared with e.
func (m meter) in(e, c ref.Val) uint64 {
	switch x := c.(type) {
	case traits.Mapper:
		return text(e)
	case traits.Lister:
		n := size(x)
		if n == 0 {
			return 0
		}
		for budget := uint64(16); ; budget = mul(budget, 4) {
			de, dl := deep(e, budget), deep(x, mul(n, budget))
			switch {
			case de < budget:
				return add(n, min(mul(n, de), dl))
			case dl < mul(n, budget), mul(n, budget) > m.limit, budget == math.MaxUint64:
				return add(n, dl)
			}
		}
	}
	return 0
}

// deep counts v — 1 per scalar, a text's units, a list's or map's
// members each 1 plus its own count — and stops at budget.
func deep(v ref.Val, budget uint64) uint64 {
	w := walker{budget: budget}
	w.walk(v)
	return min(w.n, budget)
}

type walker struct{ n, budget uint64 }

func (w *walker) walk(v ref.Val) {
	if w.n >= w.budget {
		return
	}
	switch x := v.(type) {
	case types.String, types.Bytes:
		w.n += 1 + text(x)
	case traits.Lister:
		n, _ := x.Size().(types.Int)
		for i := types.Int(0); i < n && w.n < w.budget; i++ {
			w.n++
			w.walk(x.Get(i))
		}
	case traits.Mapper:
		for it := x.Iterator(); it.HasNext() == types.True && w.n < w.budget; {
			k := it.Next()
			w.n++
			w.walk(k)
			w.walk(x.Get(k))
		}
	default:
		w.n++
	}
}

func add(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

func mul(a, b uint64) uint64 {
	if b != 0 && a > math.MaxUint64/b {
		return math.MaxUint64
	}
	return a * b
}

// sizes is the checker.CostEstimator of the static worst case: every
// variable a trigger's sender sets (trigger, headers, status, answer) and
// what is read from it may be as large as scale, and the calls CEL
// charges less than meter does are charged as meter does. It estimates
// the condition as the standard macros expand it (checkEnv): CEL's
// estimate charges each iteration at least one unit, and keeps the path
// of an iteration variable (trigger.alerts' elements are the trigger's).
type sizes struct {
	scale uint64
}

// dataVars are the variables whose size the trigger's sender decides.
var dataVars = map[string]bool{"trigger": true, "headers": true, "status": true, "answer": true}

// EstimateSize implements checker.CostEstimator: what is read from a
// variable the trigger's sender sets may be as large as scale.
func (s sizes) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	if p := n.Path(); len(p) > 0 && dataVars[p[0]] {
		return &checker.SizeEstimate{Min: 0, Max: s.scale}
	}
	return nil
}

// EstimateCallCost implements checker.CostEstimator.
func (s sizes) EstimateCallCost(function, overload string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	all := args
	if target != nil {
		all = append([]checker.AstNode{*target}, args...)
	}
	sizeOf := func(n checker.AstNode) checker.SizeEstimate {
		if sz := n.ComputedSize(); sz != nil {
			return *sz
		}
		return checker.SizeEstimate{Min: 0, Max: math.MaxUint64}
	}
	switch {
	case overload == overloads.SizeString, overload == overloads.SizeBytes,
		overload == overloads.SizeStringInst, overload == overloads.SizeBytesInst,
		strings.HasPrefix(overload, "string_to_") && overload != overloads.StringToBytes:
		if len(all) == 1 {
			return &checker.CallEstimate{CostEstimate: checker.FixedCostEstimate(1).Add(sizeOf(all[0]).MultiplyByCostFactor(0.1))}
		}
	}
	return nil
}
