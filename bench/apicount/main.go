// Command apicount counts the exported API of Go packages: top-level names
// (types, functions, variables, constants), methods (of exported types,
// interface methods included) and fields (of exported struct types,
// embedded ones included), and lists the exported names without a doc
// comment.
//
//	go run -C bench ./apicount ./pkg/dedupe/...
//
// Without patterns it counts the two libraries users embed,
// ./pkg/dedupe/... and ./pkg/llmcache/... (issue 38).
//
// Package patterns are relative to the repository's root (it lists them
// there, in the oncegate module), wherever the command runs.
//
// It reads the non-test .go files of each directory, whatever their build
// constraints.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/oncegate/oncegate/bench/apicount/count"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: apicount [package patterns]")
	}
	flag.Parse()
	pats := flag.Args()
	if len(pats) == 0 {
		pats = []string{"./pkg/dedupe/...", "./pkg/llmcache/..."}
	}
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/oncegate/oncegate").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicount: go list -m github.com/oncegate/oncegate:", err)
		os.Exit(1)
	}
	cmd := exec.Command("go", append([]string{"list", "-f", "{{.ImportPath}} {{.Dir}}"}, pats...)...)
	cmd.Dir = strings.TrimSpace(string(root))
	out, err := cmd.Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicount: go list:", err)
		os.Exit(1)
	}
	var total, visible count.Counts
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, dir, _ := strings.Cut(line, " ")
		c, err := count.Dir(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "apicount:", err)
			os.Exit(1)
		}
		fmt.Printf("%-50s names %3d  methods %3d  fields %3d  total %3d\n", path, c.Names, c.Methods, c.Fields, c.Total())
		for _, u := range c.Undocumented {
			fmt.Printf("    undocumented: %s\n", u)
		}
		total.Add(c)
		if !isInternal(path) {
			visible.Add(c)
		}
	}
	fmt.Printf("%-50s names %3d  methods %3d  fields %3d  total %3d\n", "all", total.Names, total.Methods, total.Fields, total.Total())
	if visible.Total() != total.Total() {
		fmt.Printf("%-50s names %3d  methods %3d  fields %3d  total %3d\n", "user-visible (all but internal)", visible.Names, visible.Methods, visible.Fields, visible.Total())
	}
}

// isInternal reports whether path is an internal package, which only its
// own module can import.
func isInternal(path string) bool {
	return strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/")
}
