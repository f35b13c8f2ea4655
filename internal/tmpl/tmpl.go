// Package tmpl executes the templates of Oncegate's configuration — the
// model step's prompts and the effects' bodies — strictly: Go text/template
// with missingkey=error, over one documented data value ([Data]), with
// JSON-safe helpers ([Funcs]).
//
// # Strictness
//
// A template that names a key the data does not have fails with an
// [*Error] instead of printing "<no value>": a prompt with a typo is never
// sent to a paid model, and an effect body is never sent half-rendered.
// A template is executed into a buffer and returned only whole. Optional
// values are read with get, which returns nothing for a missing path, and
// default:
//
//	{{ get .trigger "alert" "labels" "team" | default "unowned" }}
//
// # JSON bodies
//
// [Execute] with [JSON] set checks that the rendered text is JSON, so that
// a body template that forgot to quote a value fails here, with the
// template's name, rather than at the receiver. The helpers quote and
// toJSON write JSON values; truncate cuts a string to a byte limit on a
// rune boundary (the limits of the providers are in bytes or characters,
// never in half runes).
package tmpl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"text/template"
	"unicode/utf8"
)

// ErrTemplate is matched, through errors.Is, by every error of Parse and
// Execute.
var ErrTemplate = errors.New("tmpl: template failed")

// Error is a template that does not parse or does not execute on the data
// it was given. It matches [ErrTemplate] under errors.Is.
type Error struct {
	Name string // the template's name: "prompt", "effects[slack].body"
	Err  error  // text/template's error, or why the output is not JSON
}

func (e *Error) Error() string        { return "tmpl: " + e.Name + ": " + e.Err.Error() }
func (e *Error) Unwrap() error        { return e.Err }
func (e *Error) Is(target error) bool { return target == ErrTemplate }

// Funcs returns the functions templates may call besides text/template's
// built-ins:
//
//	json v, toJSON v      v as compact JSON (HTML characters not escaped)
//	quote s               s as a JSON string literal, quotes included
//	truncate n s          s cut to at most n bytes on a rune boundary, ending in "…" when cut
//	join sep list         the elements of list, each printed as by print, separated by sep
//	default def v         v, or def when v is missing, nil, "", 0, false or empty
//	get m k...            the value at the path k... in the maps m, or nil when any key is missing
//	lower s, upper s, trim s
//	severity s            s as one of critical, error, warning, info (the levels PagerDuty
//	                      takes): page, fatal, high → critical; major → error; minor,
//	                      medium, warn → warning; low, none, ok → info; other → error
//	adf text              text as an Atlassian Document Format document, as JSON: one
//	                      paragraph per block of lines separated by a blank line
//	mrkdwn s              s escaped for Slack's mrkdwn: & < > as &amp; &lt; &gt;, so that
//	                      it cannot mention anyone or add a link
//	slackLink url text    a Slack link <url|text> when url is an http or https URL (with
//	                      | < > and spaces percent-encoded, & as &amp;), else "text: url"
//	                      escaped
func Funcs() template.FuncMap {
	return template.FuncMap{
		"json":      toJSON,
		"toJSON":    toJSON,
		"quote":     quote,
		"truncate":  truncate,
		"join":      join,
		"default":   deflt,
		"get":       get,
		"lower":     strings.ToLower,
		"upper":     strings.ToUpper,
		"trim":      strings.TrimSpace,
		"adf":       adf,
		"severity":  severity,
		"mrkdwn":    mrkdwn,
		"slackLink": slackLink,
	}
}

// Parse parses text as the template name, with [Funcs], set to fail on a
// missing key. An error is an [*Error].
func Parse(name, text string) (*template.Template, error) {
	t, err := template.New(name).Funcs(Funcs()).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, &Error{Name: name, Err: err}
	}
	return t, nil
}

// Output says what Execute checks of the rendered text.
type Output uint8

const (
	// Text is any text.
	Text Output = iota
	// JSON must be one JSON value.
	JSON
)

// Execute renders the template t, or its associated template name when name
// is not empty, with data, and returns the whole output, or an [*Error]
// and nothing.
func Execute(t *template.Template, name string, data any, out Output) ([]byte, error) {
	var b bytes.Buffer
	var err error
	if name == "" {
		name = t.Name()
		err = t.Execute(&b, data)
	} else {
		err = t.ExecuteTemplate(&b, name, data)
	}
	if err != nil {
		return nil, &Error{Name: name, Err: err}
	}
	if out == JSON && !json.Valid(b.Bytes()) {
		return nil, &Error{Name: name, Err: fmt.Errorf("the output is not JSON: %s", Snippet(b.Bytes(), 120))}
	}
	return b.Bytes(), nil
}

// Snippet returns at most n bytes of b as a printable one-line string,
// cut on a rune boundary: for error messages that quote what a receiver or
// a template produced.
func Snippet(b []byte, n int) string {
	s := strings.ToValidUTF8(string(b), "?")
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	return truncate(n, s)
}

func toJSON(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

func quote(v any) (string, error) {
	return toJSON(fmt.Sprint(str(v)))
}

// str turns a template value into text: a string as it is, nil as "",
// anything else as fmt prints it.
func str(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case json.Number:
		return x.String()
	case fmt.Stringer:
		return x.String()
	}
	return fmt.Sprint(v)
}

// truncate cuts s to at most n bytes, "…" (3 bytes) included when it cuts,
// on a rune boundary.
func truncate(n int, v any) string {
	s := str(v)
	if len(s) <= n {
		return s
	}
	const ell = "…"
	if n < len(ell) {
		n = max(n, 0)
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		return s[:n]
	}
	m := n - len(ell)
	for m > 0 && !utf8.RuneStart(s[m]) {
		m--
	}
	return s[:m] + ell
}

func join(sep string, list any) (string, error) {
	if list == nil {
		return "", nil
	}
	v := reflect.ValueOf(list)
	if v.Kind() != reflect.Slice && v.Kind() != reflect.Array {
		return "", fmt.Errorf("join: want a list, got %T", list)
	}
	parts := make([]string, v.Len())
	for i := range parts {
		parts[i] = str(v.Index(i).Interface())
	}
	return strings.Join(parts, sep), nil
}

func deflt(def any, v ...any) any {
	if len(v) == 0 || empty(v[0]) {
		return def
	}
	return v[0]
}

func empty(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Array:
		return r.Len() == 0
	}
	return r.IsZero()
}

func get(m any, path ...string) any {
	v := m
	for _, k := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			if ms, ok := v.(map[string]string); ok {
				s, ok := ms[k]
				if !ok {
					return nil
				}
				v = s
				continue
			}
			return nil
		}
		if v, ok = mm[k]; !ok {
			return nil
		}
	}
	return v
}

// adfNode is a node of an Atlassian Document Format document.
type adfNode struct {
	Type    string    `json:"type"`
	Version int       `json:"version,omitempty"`
	Text    string    `json:"text,omitempty"`
	Content []adfNode `json:"content,omitempty"`
}

func adf(v any) (string, error) {
	doc := adfNode{Type: "doc", Version: 1, Content: []adfNode{}}
	text := strings.ReplaceAll(str(v), "\r\n", "\n")
	for para := range strings.SplitSeq(text, "\n\n") {
		para = strings.Trim(para, "\n")
		if strings.TrimSpace(para) == "" {
			continue
		}
		p := adfNode{Type: "paragraph"}
		for i, line := range strings.Split(para, "\n") {
			if i > 0 {
				p.Content = append(p.Content, adfNode{Type: "hardBreak"})
			}
			if line != "" {
				p.Content = append(p.Content, adfNode{Type: "text", Text: line})
			}
		}
		doc.Content = append(doc.Content, p)
	}
	return toJSON(doc)
}

func severity(v any) string {
	switch strings.ToLower(strings.TrimSpace(str(v))) {
	case "critical", "page", "fatal", "high", "emergency", "alert":
		return "critical"
	case "warning", "warn", "minor", "medium":
		return "warning"
	case "info", "informational", "low", "none", "ok", "notice":
		return "info"
	}
	return "error"
}
