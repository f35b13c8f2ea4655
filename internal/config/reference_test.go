package config

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReferenceCurrent fails when docs/config.md is not what the
// configuration's types and doc comments generate: a key added, renamed or
// documented anew without go generate ./internal/config.
func TestReferenceCurrent(t *testing.T) {
	var b bytes.Buffer
	if err := WriteReference(&b, filepath.Join("..", "..")); err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join("..", "..", "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), committed) {
		t.Errorf("docs/config.md is stale: run go generate ./internal/config and commit it")
	}
}

// TestReferenceListsEveryKey checks the reference against the decoder:
// every yaml key of every configuration struct is a row, and a key in no
// row is refused by Parse.
func TestReferenceListsEveryKey(t *testing.T) {
	var b bytes.Buffer
	if err := WriteReference(&b, filepath.Join("..", "..")); err != nil {
		t.Fatal(err)
	}
	ref := b.String()
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(rt reflect.Type) {
		for rt.Kind() == reflect.Pointer || rt.Kind() == reflect.Slice || rt.Kind() == reflect.Map {
			rt = rt.Elem()
		}
		if rt.Kind() != reflect.Struct || leafType(rt) || seen[rt] {
			return
		}
		seen[rt] = true
		for name, i := range yamlFields(rt) {
			if !strings.Contains(ref, "| `"+name+"` |") {
				t.Errorf("%s.%s (%s) has no row in the reference", rt.Name(), rt.Field(i).Name, name)
			}
			walk(rt.Field(i).Type)
		}
	}
	walk(reflect.TypeFor[Config]())
	if len(seen) < 20 {
		t.Errorf("walked %d configuration types; want the whole schema", len(seen))
	}
	for _, row := range []string{"| `ack_wait` | duration | `30s` |", "| `retention` | duration | `168h` |", "| `sync_interval` | duration or `always` | `100ms` |"} {
		if !strings.Contains(ref, row) {
			t.Errorf("the reference has no row starting %q", row)
		}
	}
	if strings.Contains(ref, "| `not_a_key` |") {
		t.Fatal("the reference lists not_a_key")
	}
	if _, err := Parse([]byte("ledger:\n  not_a_key: 1\n"), "t.yaml"); err == nil || !strings.Contains(err.Error(), "not_a_key") {
		t.Errorf("Parse of a key the reference does not list: %v; want it refused, naming the key", err)
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
