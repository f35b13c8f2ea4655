package config

// The YAML document as goccy/go-yaml parses it: what the decoder reads of
// its syntax tree (anchors, aliases, scalars), and how it names a node or
// a near miss in a message.

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// hasContent reports whether data has a line that is not blank, a comment,
// a directive or a document marker.
func hasContent(data []byte) bool {
	for l := range strings.Lines(string(data)) {
		l = strings.TrimSpace(l)
		if l == "" || l == "---" || l == "..." || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "%") || strings.HasPrefix(l, "--- #") {
			continue
		}
		return true
	}
	return false
}

// parseYAML parses data, turning a parser panic into an error: a
// configuration file must not be able to crash the process.
func parseYAML(data []byte) (f *ast.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("parser failure: %v", r)
		}
	}()
	return parser.ParseBytes(data, 0)
}

func line(n ast.Node) int {
	if n == nil {
		return 0
	}
	if tk := n.GetToken(); tk != nil && tk.Position != nil {
		return tk.Position.Line
	}
	return 0
}

func (d *decoder) collectAnchors(root ast.Node) {
	ast.Walk(visitFunc(func(n ast.Node) {
		a, ok := n.(*ast.AnchorNode)
		if !ok || a.Name == nil {
			return
		}
		name := a.Name.GetToken().Value
		if _, dup := d.anchors[name]; dup {
			d.problem("", a, invalid("yaml: anchor &%s is defined twice", name))
			return
		}
		d.anchors[name] = a.Value
	}), root)
}

type visitFunc func(ast.Node)

func (f visitFunc) Visit(n ast.Node) ast.Visitor {
	f(n)
	return f
}

// resolve strips tags and anchors and follows aliases. It returns nil for
// null and for an alias to an unknown anchor (reported).
func (d *decoder) resolve(path string, n ast.Node) ast.Node {
	for range 64 {
		switch x := n.(type) {
		case nil, *ast.NullNode:
			return nil
		case *ast.TagNode:
			n = x.Value
		case *ast.AnchorNode:
			n = x.Value
		case *ast.AliasNode:
			name := ""
			if x.Value != nil {
				name = x.Value.GetToken().Value
			}
			target, ok := d.anchors[name]
			if !ok {
				d.problem(path, x, invalid("yaml: alias *%s names no anchor", name))
				return nil
			}
			n = target
		default:
			return n
		}
	}
	d.problem(path, n, invalid("yaml: aliases nested too deep"))
	return nil
}

// scalarText returns the text of a scalar node: a string's value, a
// number's or boolean's source text.
func scalarText(n ast.Node) (string, bool) {
	switch x := n.(type) {
	case *ast.StringNode:
		return x.Value, true
	case *ast.LiteralNode:
		if x.Value == nil {
			return "", true
		}
		return x.Value.Value, true
	case *ast.IntegerNode:
		return x.Token.Value, true
	case *ast.FloatNode:
		return x.Token.Value, true
	case *ast.BoolNode:
		return x.Token.Value, true
	}
	return "", false
}

// kind names the kind of a node for messages.
func kind(n ast.Node) string {
	switch x := n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.StringNode, *ast.LiteralNode:
		return "a string"
	case *ast.IntegerNode:
		return "the integer " + x.Token.Value
	case *ast.FloatNode:
		return "the number " + x.Token.Value
	case *ast.BoolNode:
		return "the boolean " + x.Token.Value
	case *ast.InfinityNode, *ast.NanNode:
		return "the non-finite number " + n.GetToken().Value
	case nil, *ast.NullNode:
		return "null"
	}
	return "a " + n.Type().String()
}

// jsonSafe turns what YAML decodes (maps with any keys) into what JSON
// encodes.
func jsonSafe(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonSafe(e)
		}
		return x
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = jsonSafe(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = jsonSafe(e)
		}
		return x
	}
	return v
}

// suggest returns " (did you mean "x"?)" for the known name closest to
// name, or a list of the known names when none is close.
func suggest(name string, known []string) string {
	best, bestDist := "", 3
	norm := func(s string) string { return strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(s)) }
	for _, k := range known {
		dist := editDistance(name, k)
		if norm(name) == norm(k) {
			dist = 0
		}
		if dist < bestDist {
			best, bestDist = k, dist
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return " (known keys: " + strings.Join(known, ", ") + ")"
}

// editDistance is the Levenshtein distance between a and b, by bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// maxMergeDepth bounds the nesting of YAML merge keys ("<<: *base").
const maxMergeDepth = 16

// entry is one key of a mapping, after merge keys are expanded.
type entry struct {
	key   string
	node  ast.Node // the key, for its position
	value ast.Node
}

// entries lists the keys of the mapping n, or reports that n is not one.
func (d *decoder) entries(path string, n ast.Node, depth int) ([]entry, bool) {
	var values []*ast.MappingValueNode
	switch x := n.(type) {
	case *ast.MappingNode:
		values = x.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{x}
	default:
		d.problem(path, n, invalid("want a mapping, got %s", kind(n)))
		return nil, false
	}
	var own, merged []entry
	seen, seenMerged := map[string]bool{}, map[string]bool{}
	for _, mv := range values {
		switch k := mv.Key.(type) {
		case *ast.MergeKeyNode:
			if depth >= maxMergeDepth {
				d.problem(path, k, invalid("yaml: merge keys nested too deep"))
				continue
			}
			src := d.resolve(path, mv.Value)
			var srcs []ast.Node
			if seq, ok := src.(*ast.SequenceNode); ok {
				for _, s := range seq.Values {
					srcs = append(srcs, d.resolve(path, s))
				}
			} else if src != nil {
				srcs = []ast.Node{src}
			}
			for _, s := range srcs {
				if s == nil {
					continue
				}
				es, _ := d.entries(path, s, depth+1)
				for _, e := range es {
					if !seenMerged[e.key] {
						seenMerged[e.key] = true
						merged = append(merged, e)
					}
				}
			}
		case *ast.MappingKeyNode:
			d.problem(path, k, invalid("yaml: complex mapping keys are not supported"))
		default:
			key, ok := scalarText(mv.Key)
			if !ok {
				d.problem(path, mv.Key, invalid("want a plain key, got %s", kind(mv.Key)))
				continue
			}
			if seen[key] {
				d.problem(joinPath(path, key), mv.Key, invalid("duplicate key %q", key))
				continue
			}
			seen[key] = true
			own = append(own, entry{key: key, node: mv.Key, value: mv.Value})
		}
	}
	for _, m := range merged {
		if !seen[m.key] {
			own = append(own, m)
		}
	}
	return own, true
}
