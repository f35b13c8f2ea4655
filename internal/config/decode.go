package config

import (
	"encoding"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
)

// maxFileBytes bounds a configuration document.
const maxFileBytes = 256 << 10

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

func (d *decoder) problem(path string, n ast.Node, err error) {
	d.issues = append(d.issues, issue{path: path, line: line(n), err: err})
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

// refused are keys that look like configuration but are refused, with the
// reason: secrets are read from files and the environment, never from the
// configuration file. Each section adds its own (an init in its file).
var refused = map[reflect.Type]map[string]string{}
