package standin

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
)

// responseFormat is the request's response_format, as much as the
// stand-in reads.
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict bool            `json:"strict"`
	} `json:"json_schema"`
}

// schemaAnswer is the content of an answer to a request for structured
// output: JSON valid against schema (the subset of JSON Schema that
// structured output uses: type, properties, required, items, enum, const,
// minimum, maximum, minItems, maxItems, maxLength, anyOf), a function of
// the request's digest like every answer. Strings that are free text
// begin with Label. When off is true the answer leaves out the first
// required property (or, for a schema with none, is an empty array): what
// a model that ignored the schema would send.
func schemaAnswer(schema json.RawMessage, d [32]byte, off bool) string {
	var s any
	if err := json.Unmarshal(schema, &s); err != nil {
		return "{}"
	}
	r := rand.New(rand.NewPCG(binary.BigEndian.Uint64(d[0:8]), binary.BigEndian.Uint64(d[8:16])))
	v := generate(s, r, 0)
	if off {
		m, ok := v.(map[string]any)
		req := required(s)
		if !ok || len(req) == 0 {
			return "[]"
		}
		delete(m, req[0])
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func required(s any) []string {
	m, _ := s.(map[string]any)
	var out []string
	if l, ok := m["required"].([]any); ok {
		for _, x := range l {
			if n, ok := x.(string); ok {
				out = append(out, n)
			}
		}
	}
	return out
}

func num(m map[string]any, k string, def float64) float64 {
	if f, ok := m[k].(float64); ok {
		return f
	}
	return def
}

// generate returns a value valid against the schema s.
func generate(s any, r *rand.Rand, depth int) any {
	m, ok := s.(map[string]any)
	if !ok || depth > 8 {
		return nil
	}
	if c, ok := m["const"]; ok {
		return c
	}
	if e, ok := m["enum"].([]any); ok && len(e) > 0 {
		return e[r.IntN(len(e))]
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if l, ok := m[k].([]any); ok && len(l) > 0 {
			return generate(l[0], r, depth+1)
		}
	}
	typ, _ := m["type"].(string)
	if l, ok := m["type"].([]any); ok && len(l) > 0 {
		typ, _ = l[0].(string)
	}
	switch typ {
	case "object":
		props, _ := m["properties"].(map[string]any)
		out := make(map[string]any, len(props))
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range props {
				if !yield(k) {
					return
				}
			}
		}) {
			out[k] = generate(props[k], r, depth+1)
		}
		return out
	case "array":
		lo, hi := int(num(m, "minItems", 1)), int(num(m, "maxItems", 3))
		n := lo
		if hi > lo {
			n += r.IntN(hi - lo + 1)
		}
		out := make([]any, n)
		for i := range out {
			out[i] = generate(m["items"], r, depth+1)
		}
		return out
	case "integer":
		lo, hi := num(m, "minimum", 0), num(m, "maximum", 100)
		return int64(lo) + r.Int64N(int64(math.Max(hi-lo, 0))+1)
	case "number":
		lo, hi := num(m, "minimum", 0), num(m, "maximum", 1)
		return math.Round((lo+r.Float64()*(hi-lo))*1000) / 1000
	case "boolean":
		return r.IntN(2) == 0
	case "null":
		return nil
	case "string":
		ws := []string{Label}
		for range 3 + r.IntN(5) {
			ws = append(ws, words[r.IntN(len(words))])
		}
		text := strings.Join(ws, " ")
		if max := int(num(m, "maxLength", 0)); max > 0 && len(text) > max {
			text = text[:max]
		}
		return text
	}
	return nil
}
