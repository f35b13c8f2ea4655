// Package count counts the exported API of a Go package directory.
package count

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Counts is the exported API of one or more packages.
type Counts struct {
	Names, Methods, Fields int
	// Undocumented lists the exported names without a doc comment.
	Undocumented []string
}

// Total is Names + Methods + Fields.
func (c Counts) Total() int { return c.Names + c.Methods + c.Fields }

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Names += o.Names
	c.Methods += o.Methods
	c.Fields += o.Fields
	c.Undocumented = append(c.Undocumented, o.Undocumented...)
}

// Dir counts the exported API of the package in dir, from its non-test
// .go files.
func Dir(dir string) (Counts, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return Counts{}, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			return Counts{}, err
		}
		if f.Name.Name == "main" {
			continue
		}
		files = append(files, f)
	}
	var c Counts
	seen := map[string]bool{} // names declared in several files under build constraints count once
	undoc := func(what string) {
		if !seen["undoc "+what] {
			seen["undoc "+what] = true
			c.Undocumented = append(c.Undocumented, what)
		}
	}
	name := func(n string) bool {
		if seen[n] {
			return false
		}
		seen[n] = true
		return true
	}
	exportedTypes := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					if ts := s.(*ast.TypeSpec); ts.Name.IsExported() {
						exportedTypes[ts.Name.Name] = true
					}
				}
			}
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					if name(d.Name.Name) {
						c.Names++
						if d.Doc == nil {
							undoc(d.Name.Name)
						}
					}
					continue
				}
				recv := recvName(d.Recv.List[0].Type)
				if !exportedTypes[recv] {
					continue
				}
				if name(recv + "." + d.Name.Name) {
					c.Methods++
					if d.Doc == nil && !wellKnown(d.Name.Name) {
						undoc(recv + "." + d.Name.Name)
					}
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() && name(n.Name) {
								c.Names++
								if s.Doc == nil && d.Doc == nil && s.Comment == nil {
									undoc(n.Name)
								}
							}
						}
					case *ast.TypeSpec:
						if !s.Name.IsExported() || !name(s.Name.Name) {
							continue
						}
						c.Names++
						if s.Doc == nil && d.Doc == nil {
							undoc(s.Name.Name)
						}
						switch t := s.Type.(type) {
						case *ast.StructType:
							for _, fl := range t.Fields.List {
								for _, fn := range fieldNames(fl) {
									if ast.IsExported(fn) {
										c.Fields++
										if fl.Doc == nil && fl.Comment == nil && !documentedGroup(t, fl) {
											undoc(s.Name.Name + "." + fn)
										}
									}
								}
							}
						case *ast.InterfaceType:
							for _, m := range t.Methods.List {
								for _, mn := range m.Names {
									if mn.IsExported() {
										c.Methods++
										if m.Doc == nil && m.Comment == nil && !documentedGroup(nil, m) {
											undoc(s.Name.Name + "." + mn.Name)
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(c.Undocumented)
	return c, nil
}

// wellKnown reports whether a method implements a standard interface whose
// doc is the interface's (String, Error, Unwrap, Is, marshalers).
func wellKnown(m string) bool {
	switch m {
	case "String", "Error", "Unwrap", "Is", "MarshalText", "UnmarshalText", "AppendText", "MarshalBinary", "UnmarshalBinary", "MarshalJSON", "UnmarshalJSON":
		return true
	}
	return false
}

// documentedGroup reports whether fl shares a line with a documented
// field, as in "Created, Updated time.Time" under one comment. (Such a
// field has the doc itself; this only guards against odd layouts.)
func documentedGroup(_ *ast.StructType, _ *ast.Field) bool { return false }

func fieldNames(f *ast.Field) []string {
	if len(f.Names) > 0 {
		out := make([]string, len(f.Names))
		for i, n := range f.Names {
			out[i] = n.Name
		}
		return out
	}
	// Embedded: the type's name.
	t := f.Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch t := t.(type) {
	case *ast.Ident:
		return []string{t.Name}
	case *ast.SelectorExpr:
		return []string{t.Sel.Name}
	}
	return []string{fmt.Sprint(t)}
}

func recvName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if ix, ok := e.(*ast.IndexExpr); ok {
		e = ix.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
