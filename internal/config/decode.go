package config

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// maxFileBytes bounds a configuration document.
const maxFileBytes = 256 << 10

// maxMergeDepth bounds the nesting of YAML merge keys ("<<: *base").
const maxMergeDepth = 16

// refused are keys that look like configuration but are refused, with the
// reason: secrets are read from files and the environment, never from the
// configuration file.
var refused = map[reflect.Type]map[string]string{
	reflect.TypeFor[NATS](): {
		"password": "secrets are not read from the config file: use password_file, or the environment variable ONCEGATE_NATS_PASSWORD",
		"token":    "secrets are not read from the config file: use token_file, or the environment variable ONCEGATE_NATS_TOKEN",
		"nkey":     "secrets are not read from the config file: use nkey_seed_file",
		"seed":     "secrets are not read from the config file: use nkey_seed_file",
	},
	reflect.TypeFor[LLM](): {
		"api_key": "the API key is not read from the config file: name the environment variable that holds it with api_key_env (default OPENAI_API_KEY)",
	},
	reflect.TypeFor[Effect](): {
		"routing_key": "the routing key is a secret and is not read from the config file: use routing_key_env or routing_key_file",
		"token":       "a token is a secret and is not read from the config file: use token_env or token_file",
		"password":    "a password is a secret and is not read from the config file: use headers_env, or token_env for the jira preset",
	},
}

// decoder turns a YAML document into a Config, by reflection over the yaml
// field tags, collecting every problem rather than stopping at the first,
// and recording the line of every value.
//
// It works on goccy/go-yaml's syntax tree instead of decoding with
// yaml.Strict(): Strict reports one unknown field and stops, truncates
// 1.5 into an int field without a word, and loses the position of a bad
// duration. Here every problem has its path and line.
type decoder struct {
	lines   map[string]int
	anchors map[string]ast.Node
	issues  []issue
}

func decode(data []byte, name string) (*Config, []issue) {
	c := &Config{meta: newMeta(name)}
	if len(data) > maxFileBytes {
		return c, []issue{{err: invalid("the file is %d bytes; the limit is %d", len(data), maxFileBytes)}}
	}
	f, err := parseYAML(data)
	if err != nil {
		is := issue{err: invalid("yaml: %v", err)}
		var ye yaml.Error
		if errors.As(err, &ye) {
			is.err = invalid("yaml: %s", ye.GetMessage())
			if tk := ye.GetToken(); tk != nil {
				is.line = tk.Position.Line
			}
		}
		return c, []issue{is}
	}
	// Empty documents (a trailing "---") and directives ("%YAML 1.2") do
	// not count.
	var docs []*ast.DocumentNode
	for _, doc := range f.Docs {
		if _, directive := doc.Body.(*ast.DirectiveNode); doc.Body != nil && !directive {
			docs = append(docs, doc)
		}
	}
	if len(docs) > 1 {
		is := issue{err: invalid("yaml: one document expected, found %d", len(docs))}
		if tk := docs[1].Start; tk != nil {
			is.line = tk.Position.Line
		}
		return c, []issue{is}
	}
	if len(docs) == 0 {
		if hasContent(data) {
			// The parser drops a document that follows an empty one.
			return c, []issue{{err: invalid("yaml: no document found, yet the file is not empty: remove empty documents (a \"---\" line followed by another)")}}
		}
		return c, nil
	}
	d := &decoder{lines: c.meta.lines, anchors: map[string]ast.Node{}}
	body := docs[0].Body
	d.collectAnchors(body)
	if len(d.issues) == 0 {
		d.value("", body, reflect.ValueOf(c).Elem())
	}
	return c, d.issues
}

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

func (d *decoder) problem(path string, n ast.Node, err error) {
	d.issues = append(d.issues, issue{path: path, line: line(n), err: err})
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

var (
	durationType        = reflect.TypeFor[time.Duration]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// value decodes n into v. A null node leaves v as it is.
func (d *decoder) value(path string, n ast.Node, v reflect.Value) {
	n = d.resolve(path, n)
	if n == nil {
		return
	}
	switch {
	case v.Type() == durationType:
		d.duration(path, n, v)
		return
	case v.Type() == jsonValueType:
		if text, ok := n.(*ast.StringNode); ok {
			// JSON written as a string (a block scalar), or "" for none.
			if err := v.Addr().Interface().(*JSONValue).UnmarshalText([]byte(text.Value)); err != nil {
				d.problem(path, n, invalid("%v", err))
			}
			return
		}
		if text, ok := n.(*ast.LiteralNode); ok && text.Value != nil {
			if err := v.Addr().Interface().(*JSONValue).UnmarshalText([]byte(text.Value.Value)); err != nil {
				d.problem(path, n, invalid("%v", err))
			}
			return
		}
		var x any
		if err := yaml.NodeToValue(n, &x); err != nil {
			d.problem(path, n, invalid("%v", err))
			return
		}
		b, err := json.Marshal(jsonSafe(x))
		if err != nil {
			d.problem(path, n, invalid("not representable as JSON: %v", err))
			return
		}
		v.SetBytes(b)
		return
	case reflect.PointerTo(v.Type()).Implements(textUnmarshalerType):
		s, ok := scalarText(n)
		if !ok {
			d.problem(path, n, invalid("want a scalar, got %s", kind(n)))
			return
		}
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			d.problem(path, n, invalid("%v", err))
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.value(path, n, v.Elem())
	case reflect.Struct:
		d.structure(path, n, v)
	case reflect.Slice:
		d.list(path, n, v)
	case reflect.Map:
		d.dict(path, n, v)
	case reflect.String:
		switch n.(type) {
		case *ast.StringNode, *ast.LiteralNode, *ast.IntegerNode, *ast.FloatNode:
			s, _ := scalarText(n)
			v.SetString(s)
		default:
			d.problem(path, n, invalid("want a string, got %s", kind(n)))
		}
	case reflect.Int, reflect.Int64:
		x, ok := n.(*ast.IntegerNode)
		if !ok {
			d.problem(path, n, invalid("want a whole number, got %s", kind(n)))
			return
		}
		var i int64
		switch iv := x.Value.(type) {
		case int64:
			i = iv
		case uint64:
			if iv > math.MaxInt64 {
				d.problem(path, n, invalid("%s is out of range", x.Token.Value))
				return
			}
			i = int64(iv)
		}
		if v.OverflowInt(i) {
			d.problem(path, n, invalid("%s is out of range", x.Token.Value))
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		switch x := n.(type) {
		case *ast.FloatNode:
			v.SetFloat(x.Value)
		case *ast.IntegerNode:
			switch iv := x.Value.(type) {
			case int64:
				v.SetFloat(float64(iv))
			case uint64:
				v.SetFloat(float64(iv))
			}
		default:
			d.problem(path, n, invalid("want a finite number, got %s", kind(n)))
		}
	case reflect.Bool:
		x, ok := n.(*ast.BoolNode)
		if !ok {
			d.problem(path, n, invalid("want true or false, got %s", kind(n)))
			return
		}
		v.SetBool(x.Value)
	default:
		panic("config: cannot decode into " + v.Type().String())
	}
}

func (d *decoder) duration(path string, n ast.Node, v reflect.Value) {
	switch x := n.(type) {
	case *ast.StringNode:
		t, err := parseDuration(x.Value)
		if err != nil {
			d.problem(path, n, invalid("%v", err))
			return
		}
		v.SetInt(int64(t))
	case *ast.IntegerNode:
		if x.Token.Value != "0" {
			d.problem(path, n, invalid("want a duration with a unit, such as %q, got the bare number %s", x.Token.Value+"s", x.Token.Value))
			return
		}
		v.SetInt(0)
	default:
		d.problem(path, n, invalid("want a duration such as \"30s\", got %s", kind(n)))
	}
}

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

func (d *decoder) structure(path string, n ast.Node, v reflect.Value) {
	es, ok := d.entries(path, n, 0)
	if !ok {
		return
	}
	t := v.Type()
	fields := yamlFields(t)
	for _, e := range es {
		p := joinPath(path, e.key)
		i, ok := fields[e.key]
		if !ok {
			if why, ok := refused[t][e.key]; ok {
				d.problem(p, e.node, invalid("%s", why))
			} else {
				d.problem(p, e.node, unknown("unknown key %q%s", e.key, suggest(e.key, slices.Sorted(mapKeys(fields)))))
			}
			continue
		}
		if r := d.resolve(p, e.value); r != nil {
			d.lines[p] = line(e.node)
			d.value(p, r, v.Field(i))
		}
	}
}

func (d *decoder) list(path string, n ast.Node, v reflect.Value) {
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		d.problem(path, n, invalid("want a list, got %s", kind(n)))
		return
	}
	if len(seq.Values) == 0 {
		v.SetZero() // an empty list is a nil slice, as everywhere else
		return
	}
	s := reflect.MakeSlice(v.Type(), len(seq.Values), len(seq.Values))
	for i, el := range seq.Values {
		p := indexPath(path, i)
		d.lines[p] = line(el)
		r := d.resolve(p, el)
		if r == nil {
			if _, null := el.(*ast.NullNode); null {
				d.problem(p, el, invalid("want a value, got null"))
			}
			continue
		}
		d.value(p, r, s.Index(i))
	}
	v.Set(s)
}

func (d *decoder) dict(path string, n ast.Node, v reflect.Value) {
	es, ok := d.entries(path, n, 0)
	if !ok {
		return
	}
	if len(es) == 0 {
		v.SetZero()
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(es))
	for _, e := range es {
		p := keyPath(path, e.key)
		d.lines[p] = line(e.node)
		el := reflect.New(v.Type().Elem()).Elem()
		d.value(p, e.value, el)
		m.SetMapIndex(reflect.ValueOf(e.key), el)
	}
	v.Set(m)
}

var jsonValueType = reflect.TypeFor[JSONValue]()

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

// yamlFields maps the yaml names of t's exported fields to their indexes.
func yamlFields(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		m[name] = i
	}
	return m
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
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
