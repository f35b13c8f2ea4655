package config

import (
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// meta records the provenance of a Config's values, by internal path: the
// path as in the file, but with pipelines by index ("pipelines[0].subject")
// so that renaming a pipeline cannot confuse it.
type meta struct {
	file string
	// lines holds the line of every key and list element the file set to
	// something other than null.
	lines map[string]int
	// env holds the environment variable that set a path.
	env map[string]string
	// defaulted holds the value applyDefaults put at a path, so that it can
	// tell a default (which it may recompute) from a value set in Go.
	defaulted map[string]any
}

func newMeta(file string) *meta {
	return &meta{file: file, lines: map[string]int{}, env: map[string]string{}, defaulted: map[string]any{}}
}

// present reports whether the file or the environment set path.
func (m *meta) present(path string) bool {
	if m == nil {
		return false
	}
	_, inFile := m.lines[path]
	_, inEnv := m.env[path]
	return inFile || inEnv
}

// position returns where the value at path came from: the environment
// variable that set it, or else the line of it or of its nearest enclosing
// key in the file.
func (m *meta) position(path string) (env string, line int) {
	if m == nil {
		return "", 0
	}
	for p := path; p != ""; p = parentPath(p) {
		if e, ok := m.env[p]; ok {
			return e, 0
		}
		if l, ok := m.lines[p]; ok {
			return "", l
		}
	}
	return "", 0
}

// setByEnv records that the environment variable name set path, which
// replaces whatever the file had there and below.
func (m *meta) setByEnv(path, name string) {
	m.env[path] = name
	for p := range m.lines {
		if p == path || strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[") {
			delete(m.lines, p)
		}
	}
}

// isDefault reports whether the value at path is a default: one that
// applyDefaults put there and nobody changed since.
func (m *meta) isDefault(path string, v any) bool {
	if m == nil || m.present(path) {
		return false
	}
	d, ok := m.defaulted[path]
	return ok && reflect.DeepEqual(d, v)
}

// parentPath strips the last element of a path: "a.b[c].d" → "a.b[c]" →
// "a.b" → "a" → "". Map keys in brackets may contain dots.
func parentPath(path string) string {
	depth, cut := 0, 0
	for i := 0; i < len(path); i++ {
		switch path[i] {
		case '[':
			if depth == 0 {
				cut = i
			}
			depth++
		case ']':
			depth = max(depth-1, 0)
		case '.':
			if depth == 0 {
				cut = i
			}
		}
	}
	return path[:cut]
}

func joinPath(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

func indexPath(prefix string, i int) string { return prefix + "[" + strconv.Itoa(i) + "]" }

func keyPath(prefix, key string) string { return prefix + "[" + key + "]" }

// displayPath turns an internal path into the one users see, naming
// pipelines by name: "pipelines[0].effect.url" → "pipelines[alerts].effect.url".
func (c *Config) displayPath(path string) string {
	rest, ok := strings.CutPrefix(path, "pipelines[")
	if !ok {
		return path
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return path
	}
	i, err := strconv.Atoi(rest[:end])
	if err != nil || i < 0 || i >= len(c.Pipelines) || c.Pipelines[i].Name == "" {
		return path
	}
	return "pipelines[" + c.Pipelines[i].Name + "]" + rest[end+1:]
}

// clone returns a copy of v that shares no slice or map with it, for
// recording defaults.
func clone(v any) any {
	switch x := v.(type) {
	case []string:
		return slices.Clone(x)
	case map[string]Price:
		m := make(map[string]Price, len(x))
		for k, p := range x {
			m[k] = p
		}
		return m
	}
	return v
}

// SetByFlag records that the command-line flag (such as "-log-level") set
// the field at path, a path as FieldError spells it, so that a problem with
// the value names the flag rather than the file or the defaults.
func (c *Config) SetByFlag(path, flag string) {
	if c.meta == nil {
		c.meta = newMeta("")
	}
	c.meta.setByEnv(path, flag)
}

// Defaulted returns the values the defaults filled in, by path: the path
// as in the file, with list elements by index ("pipelines[0].ack_wait") and
// map entries by key ("proxy.clients[ci].max_budget"). It is for tools
// that document the defaults (the reference, docs/config.md); nil for a
// Config built in Go.
func (c *Config) Defaulted() map[string]any {
	if c.meta == nil {
		return nil
	}
	return maps.Clone(c.meta.defaulted)
}
