package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestReferenceCurrent fails when docs/config.md is not what the
// configuration's types and doc comments generate: a key added, renamed or
// documented anew without go generate ./internal/config.
func TestReferenceCurrent(t *testing.T) {
	var b bytes.Buffer
	if err := writeReference(&b, filepath.Join("..", "..", "..")); err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), committed) {
		t.Errorf("docs/config.md is stale: run go generate ./internal/config and commit it")
	}
}

func TestSplitSentences(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"One. Two.", []string{"One.", "Two."}},
		{"A base, e.g. \"http://x\" (below it). Next.", []string{"A base, e.g. \"http://x\" (below it).", "Next."}},
		{"Sizes like 1.5 stay. \"always\" starts one.", []string{"Sizes like 1.5 stay.", "\"always\" starts one."}},
		{"", nil},
	}
	for _, tt := range tests {
		if got := splitSentences(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("splitSentences(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}
