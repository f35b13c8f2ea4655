// Command refgen writes the configuration reference, docs/config.md, from
// the configuration's Go types and their doc comments (see
// writeReference). Run from the module's root it prints the reference:
//
//	go run ./internal/config/refgen > docs/config.md
//
// and go generate ./internal/config writes the file.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
)

func main() {
	root := flag.String("root", ".", "the module's root directory")
	out := flag.String("o", "", "the file to write; empty: standard output")
	flag.Parse()
	var b bytes.Buffer
	if err := writeReference(&b, *root); err != nil {
		fmt.Fprintln(os.Stderr, "refgen:", err)
		os.Exit(1)
	}
	if *out == "" {
		os.Stdout.Write(b.Bytes())
		return
	}
	if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "refgen:", err)
		os.Exit(1)
	}
}
