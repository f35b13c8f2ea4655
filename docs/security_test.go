// Package docs_test keeps the threat model (security.md) and the list of
// fuzz targets (.ci/fuzz-targets) true to the code: every test a line of
// the threat model names exists where the line says, every line that says
// what must not happen names a test, and every fuzz target is listed to be
// run.
package docs_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// testFuncs returns the Test and Fuzz functions of the _test.go files of
// each directory under root (relative to it, slash-separated), module
// boundaries ignored: a line may name a test of bench/ or contrib/.
func testFuncs(t *testing.T, root string) map[string][]string {
	t.Helper()
	funcs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil {
				if n := fd.Name.Name; strings.HasPrefix(n, "Test") || strings.HasPrefix(n, "Fuzz") {
					funcs[rel] = append(funcs[rel], n)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return funcs
}

// A threat line names its tests as `TestA`, `FuzzB` (some/package): the
// names, then the directory, in parentheses, that holds them.
var (
	namedTests = regexp.MustCompile("((?:`(?:Test|Fuzz)\\w+`(?:, | and | or )?)+) \\(([\\w./-]+)\\)")
	testName   = regexp.MustCompile("`((?:Test|Fuzz)\\w+)`")
)

// TestThreatModelNamesRealTests: every test security.md names exists, in the
// package the line names; every line of a "Must not" list names at least
// one; and every door has such a list.
func TestThreatModelNamesRealTests(t *testing.T) {
	funcs := testFuncs(t, "..")
	f, err := os.Open("security.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		door     string
		inMustNt bool
		lines    = map[string]int{} // "must not" lines per door
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			door, inMustNt = strings.TrimPrefix(line, "## "), false
			continue
		case strings.HasPrefix(line, "#"):
			inMustNt = strings.Contains(strings.ToLower(line), "must not")
			continue
		}
		named := 0
		for _, m := range namedTests.FindAllStringSubmatch(line, -1) {
			dir := m[2]
			for _, name := range testName.FindAllStringSubmatch(m[1], -1) {
				named++
				if !slices.Contains(funcs[dir], name[1]) {
					t.Errorf("security.md:%d names %s in %s; there is no such test there", n, name[1], dir)
				}
			}
		}
		if loose := len(testName.FindAllString(line, -1)); loose != named {
			t.Errorf("security.md:%d names a test without its package: write `TestX` (its/package)", n)
		}
		if inMustNt && strings.HasPrefix(line, "- ") {
			lines[door]++
			if named == 0 {
				t.Errorf("security.md:%d (%s) says what must not happen and names no test that holds it: %s", n, door, line)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"The webhook ingress", "The OpenAI-compatible proxy", "The console", "The NATS bus", "httponce"} {
		found := false
		for door, n := range lines {
			if strings.HasPrefix(door, d) && n > 0 {
				found = true
			}
		}
		if !found {
			t.Errorf("security.md has no door %q with lines of what must not happen", d)
		}
	}
}

// TestFuzzTargetsListed: .ci/fuzz-targets lists every fuzz target of the
// main module, and nothing else, so that CI runs each one and a long run
// (.ci/fuzz 10m) misses none.
func TestFuzzTargetsListed(t *testing.T) {
	funcs := testFuncs(t, "..")
	b, err := os.ReadFile("../.ci/fuzz-targets")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for n, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 2 {
			t.Errorf("fuzz-targets:%d: want a package and a target", n+1)
			continue
		}
		dir := strings.TrimPrefix(f[0], "./")
		if !slices.Contains(funcs[dir], f[1]) {
			t.Errorf("fuzz-targets:%d: %s has no %s", n+1, f[0], f[1])
		}
		listed[dir+" "+f[1]] = true
	}
	for dir, names := range funcs {
		if inOtherModule(dir) {
			continue
		}
		for _, name := range names {
			if strings.HasPrefix(name, "Fuzz") && !listed[dir+" "+name] {
				t.Errorf("%s (./%s) is not in .ci/fuzz-targets: CI would never run it", name, dir)
			}
		}
	}
}

// inOtherModule reports whether dir belongs to a module of its own
// (bench/, contrib/watermill, deploy/helm), whose targets its own CI step
// runs.
func inOtherModule(dir string) bool {
	for d := dir; d != "." && d != "/"; d = filepath.ToSlash(filepath.Dir(d)) {
		if _, err := os.Stat(filepath.Join("..", d, "go.mod")); err == nil {
			return true
		}
	}
	return false
}
