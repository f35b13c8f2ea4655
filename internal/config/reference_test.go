package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReferenceListsEveryKey checks the reference, docs/config.md, against
// the decoder: every yaml key of every configuration struct is a row, and a
// key in no row is refused by Parse. (refgen's TestReferenceCurrent checks
// that the file is what the types generate.)
func TestReferenceListsEveryKey(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	ref := string(b)
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

// leafType reports whether values of t are written as one scalar.
func leafType(t reflect.Type) bool {
	return t == durationType || t == jsonValueType || reflect.PointerTo(t).Implements(textUnmarshalerType)
}
