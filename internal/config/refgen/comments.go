package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/oncegate/oncegate/internal/config"
)

// parseDocs reads, from every package of the module below root that
// declares a configuration type, the doc comments of struct fields (keyed
// "importpath.Type.Field") and of struct types ("importpath.Type#type"),
// and the values of string constants ("importpath#const.Name").
func parseDocs(root string) (map[string]string, error) {
	docs := map[string]string{}
	var pkgs []string
	var walk func(t reflect.Type)
	seen := map[reflect.Type]bool{}
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] || leafType(t) {
			return
		}
		seen[t] = true
		if !slices.Contains(pkgs, t.PkgPath()) {
			pkgs = append(pkgs, t.PkgPath())
		}
		for i := range t.NumField() {
			walk(t.Field(i).Type)
		}
	}
	walk(reflect.TypeFor[config.Config]())
	for _, pkg := range pkgs {
		rel, ok := strings.CutPrefix(pkg, modulePath+"/")
		if !ok {
			return nil, fmt.Errorf("refgen: type of package %s outside the module", pkg)
		}
		dir := filepath.Join(root, filepath.FromSlash(rel))
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("refgen: no Go source in %s: give the module's root directory", dir)
		}
		fset := token.NewFileSet()
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(name)
			if err != nil {
				return nil, err
			}
			f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
			if err != nil {
				return nil, err
			}
			collectDocs(fset, f, pkg, docs)
		}
	}
	return docs, nil
}

func collectDocs(fset *token.FileSet, f *ast.File, pkg string, docs map[string]string) {
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range gd.Specs {
			switch s := spec.(type) {
			case *ast.ValueSpec:
				if gd.Tok != token.CONST {
					continue
				}
				for i, n := range s.Names {
					if i >= len(s.Values) {
						continue
					}
					if lit, ok := s.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if v, err := strconv.Unquote(lit.Value); err == nil {
							docs[pkg+"#const."+n.Name] = v
						}
					}
				}
			case *ast.TypeSpec:
				st, ok := s.Type.(*ast.StructType)
				if !ok {
					continue
				}
				typeDoc := s.Doc
				if typeDoc == nil && len(gd.Specs) == 1 {
					typeDoc = gd.Doc
				}
				docs[pkg+"."+s.Name.Name+"#type"] = strings.TrimSpace(typeDoc.Text())
				// A field without a comment of its own shares the one of
				// the field on the line before it when that one names it
				// ("CertFile and KeyFile are ...").
				prev, prevLine := "", -1
				for _, fld := range st.Fields.List {
					text := strings.TrimSpace(fld.Doc.Text())
					if c := strings.TrimSpace(fld.Comment.Text()); c != "" {
						text = strings.TrimSpace(text + " " + c)
					}
					line := fset.Position(fld.Pos()).Line
					for _, n := range fld.Names {
						t := text
						if t == "" && line == prevLine+1 && regexp.MustCompile(`\b`+n.Name+`\b`).MatchString(prev) {
							t = prev
						}
						docs[pkg+"."+s.Name.Name+"."+n.Name] = t
						text = t
					}
					prev, prevLine = text, line
				}
			}
		}
	}
}

// leafType reports whether values of t are written as one scalar.
func leafType(t reflect.Type) bool {
	return t == durationType || t == jsonValueType || reflect.PointerTo(t).Implements(textUnmarshalerType)
}

// identifier matches a Go name or a dotted path of them in a comment.
var identifier = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*(\.[A-Z][A-Za-z0-9]*)*\b`)

// meaning is the first sentence of a field's doc comment, without the
// field's name as its subject, with Go names of fields and constants
// written as the keys and values the file uses; and the sentence that
// states the default, when the default depends on other keys.
func (r *refWriter) meaning(t reflect.Type, field, doc, def string) string {
	sentences := splitSentences(doc)
	if len(sentences) == 0 {
		return ""
	}
	first := sentences[0]
	for _, verb := range []string{" is ", " are ", " "} {
		rest, ok := strings.CutPrefix(first, field+verb)
		if !ok || rest == "" || strings.HasPrefix(rest, "and ") || strings.HasPrefix(rest, "or ") {
			continue
		}
		first = capitalize(rest)
		break
	}
	out := []string{first}
	for _, s := range sentences[1:] {
		if !strings.HasPrefix(s, "The default") && !strings.HasPrefix(s, "The defaults") {
			continue
		}
		conditional := strings.Contains(def, "none") || !strings.Contains(s, strings.Trim(def, "`\"")) ||
			regexp.MustCompile(`\b(when|else|unless|if|whichever|or|for)\b`).MatchString(s)
		if conditional {
			out = append(out, s)
		}
	}
	text := strings.Join(out, " ")
	text = goFileRef.ReplaceAllString(text, "")
	return r.goNames(t, text)
}

// goFileRef matches a comment's pointer to a Go file ("; see proxy.go").
var goFileRef = regexp.MustCompile(`;? ?\(?see [a-z_]+\.go\)?`)

// goNames rewrites the Go names of fields and constants in text, a doc
// comment of a field of t, as the keys and values the file uses.
func (r *refWriter) goNames(t reflect.Type, text string) string {
	fields := yamlFields(t)
	byGo := map[string]string{}
	for name, i := range fields {
		byGo[t.Field(i).Name] = name
	}
	var b strings.Builder
	last := 0
	for _, m := range identifier.FindAllStringIndex(text, -1) {
		id := text[m[0]:m[1]]
		if m[0] > 0 && strings.ContainsRune("-:/<", rune(text[m[0]-1])) || m[1] < len(text) && text[m[1]] == '-' {
			continue // part of a header name or a path: Idempotency-Key, header:Name
		}
		b.WriteString(text[last:m[0]])
		b.WriteString(r.goName(t, byGo, id, m[0] == 0))
		last = m[1]
	}
	b.WriteString(text[last:])
	return b.String()
}

// goName returns the key or value the Go name id stands for in a doc
// comment of a field of t, or id. An upper-case word (TLS, URL) is taken
// for a field only at the start of the comment.
func (r *refWriter) goName(t reflect.Type, byGo map[string]string, id string, start bool) string {
	if v, ok := r.docs[t.PkgPath()+"#const."+id]; ok {
		return "`" + v + "`"
	}
	if v, ok := r.docs[modulePath+"/internal/config#const."+id]; ok {
		return "`" + v + "`"
	}
	if !start && !strings.Contains(id, ".") && strings.ToUpper(id) == id {
		return id // TLS, URL, KV: words more often than fields
	}
	if k, ok := byGo[id]; ok {
		return "`" + k + "`"
	}
	if k, ok := r.goYAML[id]; ok {
		return "`" + k + "`"
	}
	return id
}

// splitSentences splits a comment into sentences: at a full stop followed
// by a space and a capital letter or a quote, or at the end.
func splitSentences(doc string) []string {
	doc = strings.Join(strings.Fields(doc), " ")
	var out []string
	start := 0
	for i := 0; i < len(doc); i++ {
		if doc[i] != '.' || i+2 >= len(doc) || doc[i+1] != ' ' {
			continue
		}
		next := rune(doc[i+2])
		if strings.HasSuffix(doc[:i+1], "e.g.") || strings.HasSuffix(doc[:i+1], "i.e.") {
			continue
		}
		if unicode.IsUpper(next) || next == '"' || next == '`' {
			out = append(out, doc[start:i+1])
			start = i + 2
		}
	}
	if rest := strings.TrimSpace(doc[start:]); rest != "" {
		out = append(out, rest)
	}
	return out
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// cell escapes text for a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// The types the reference writes as one scalar: durations, JSON values and
// the configuration's text types (sizes, periods, sync intervals).
