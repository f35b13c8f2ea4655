package canon

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// fuzzSeeds returns the test vectors, the small hostile cases and the
// smaller benchmark fixtures.
func fuzzSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	files, _ := filepath.Glob("testdata/input/*.json")
	files = append(files, "testdata/bench/alert.json", "testdata/bench/sentry.json")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	for _, h := range hostile {
		if len(h.in) <= 256 {
			seeds = append(seeds, []byte(h.in))
		}
	}
	for _, s := range []string{
		`{"b":{"d":1,"c":[1e20,-0.0,0.1]},"a":"\u00e9\n"}`,
		`[9007199254740993,9007199254740994,1E400,1e-400]`,
		`{"😂":1,"\ufb33":2,"\ud83d\ude02x":3}`,
		`"\ud800\udc00\udbff\udfff"`,
	} {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

// policyErrors are the deliberate differences from the oracle: input that
// jsontext canonicalizes but this package rejects on purpose.
var policyErrors = []error{
	ErrInexactInteger, // jsontext rounds integers above 2^53
	ErrBOM,            // (jsontext rejects a BOM too)
	// jsontext clamps numbers beyond binary64 to ±MaxFloat64
	// (1e400 → 1.7976931348623157e+308); RFC 8785 requires an error.
	ErrNumberRange,
	ErrTooLarge, ErrTooDeep, ErrStringTooLong, ErrTooManyMembers, // limits
}

func FuzzAppend(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Append(nil, in)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Append(%q) error = %T %v; want *Error", in, err, err)
			}
			if e.Offset < 0 || e.Offset > int64(len(in)) {
				t.Fatalf("Append(%q) error offset = %d; want within the input (%v)", in, e.Offset, err)
			}
		} else {
			again, err := Append(nil, out)
			if err != nil || !bytes.Equal(again, out) {
				t.Fatalf("Append(%q) = %q, but Append of that = %q, %v; want a fixed point", in, out, again, err)
			}
			if !json.Valid(out) {
				t.Fatalf("Append(%q) = %q, which encoding/json rejects", in, out)
			}
		}

		v := jsontext.Value(bytes.Clone(in))
		oerr := v.Canonicalize()
		switch {
		case err == nil && oerr == nil:
			if !bytes.Equal(out, v) {
				t.Fatalf("Append(%q) = %q; jsontext gives %q", in, out, []byte(v))
			}
		case err == nil:
			t.Fatalf("Append(%q) = %q, nil; jsontext rejects it: %v", in, out, oerr)
		case oerr == nil:
			for _, p := range policyErrors {
				if errors.Is(err, p) {
					return
				}
			}
			t.Fatalf("Append(%q) error = %v; jsontext accepts it as %q", in, err, []byte(v))
		}
	})
}

func FuzzPointer(f *testing.F) {
	f.Add([]byte(pointerDoc), "/arr/1/x")
	f.Add([]byte(pointerDoc), "/a~1b")
	f.Add([]byte(pointerDoc), "")
	f.Add([]byte(`{"":{"":[0,{"~":1}]}}`), "//")
	f.Add([]byte(`[1,[2,[3]]]`), "/1/1/0")
	f.Add([]byte(`{"a":{"b":1}}x`), "/a/b")
	f.Add([]byte(`[{"a\"":"\u0000"}]`), "/0/a\"")
	f.Fuzz(func(t *testing.T, doc []byte, ptr string) {
		p, err := ParsePointer(ptr)
		if err == nil {
			if p.String() != ptr {
				t.Fatalf("ParsePointer(%q).String() = %q", ptr, p.String())
			}
		} else if !errors.Is(err, ErrPointerSyntax) {
			t.Fatalf("ParsePointer(%q) error = %v; want %v", ptr, err, ErrPointerSyntax)
		}

		// Arbitrary bytes: no panic, and Omit fails or succeeds consistently.
		_, _, _ = Lookup(doc, p)
		_, _ = Select(nil, doc, []Pointer{p, p})
		_, _ = Omit(nil, doc, []Pointer{p})

		canon, err := Append(nil, doc)
		if err != nil {
			return
		}
		checkPointerOps(t, canon, p)
		// Every path in the document.
		var tree any
		d := json.NewDecoder(bytes.NewReader(canon))
		d.UseNumber()
		if err := d.Decode(&tree); err != nil {
			t.Fatalf("encoding/json cannot decode %q: %v", canon, err)
		}
		n := 0
		walk(tree, "", func(path string, v any) {
			if n++; n > 64 {
				return
			}
			p, err := ParsePointer(path)
			if err != nil {
				t.Fatalf("ParsePointer(%q) error = %v", path, err)
			}
			got, ok, err := Lookup(canon, p)
			if want := marshalCanonical(t, v); err != nil || !ok || !bytes.Equal(got, want) {
				t.Fatalf("Lookup(%q, %q) = %q, %v, %v; want %q", canon, path, got, ok, err, want)
			}
			checkPointerOps(t, canon, p)
			if path == "" {
				return
			}
			got, err = Omit(nil, canon, []Pointer{p})
			if want := marshalCanonical(t, without(tree, path)); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("Omit(%q, %q) = %q, %v; want %q", canon, path, got, err, want)
			}
		})
	})
}

// checkPointerOps checks Lookup, Select and Omit with p on a canonical doc.
func checkPointerOps(t *testing.T, canon []byte, p Pointer) {
	t.Helper()
	v, ok, err := Lookup(canon, p)
	if err != nil {
		t.Fatalf("Lookup(%q, %q) error = %v", canon, p, err)
	}
	sel, err := Select(nil, canon, []Pointer{p, p})
	if ok {
		if again, err := Append(nil, v); err != nil || !bytes.Equal(again, v) {
			t.Fatalf("Lookup(%q, %q) = %q, which is not canonical", canon, p, v)
		}
		if want := "[" + string(v) + "," + string(v) + "]"; err != nil || string(sel) != want {
			t.Fatalf("Select(%q, %q) = %q, %v; want %q", canon, p, sel, err, want)
		}
	} else if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Select(%q, %q) error = %v; want %v", canon, p, err, ErrNotFound)
	}
	if p == (Pointer{}) {
		return
	}
	out, err := Omit(nil, canon, []Pointer{p})
	if err != nil {
		t.Fatalf("Omit(%q, %q) error = %v", canon, p, err)
	}
	if again, err := Append(nil, out); err != nil || !bytes.Equal(again, out) {
		t.Fatalf("Omit(%q, %q) = %q, which is not canonical: %v", canon, p, out, err)
	}
	if !ok && !bytes.Equal(out, canon) {
		t.Fatalf("Omit(%q, %q) = %q; want the document unchanged, as nothing is there", canon, p, out)
	}
}

func escapeToken(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// walk calls fn for v and everything in it, with their pointers.
func walk(v any, path string, fn func(path string, v any)) {
	fn(path, v)
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			walk(e, path+"/"+escapeToken(k), fn)
		}
	case []any:
		for i, e := range v {
			walk(e, path+"/"+strconv.Itoa(i), fn)
		}
	}
}

// without returns a copy of tree without the value at path.
func without(tree any, path string) any {
	tok, rest, _ := strings.Cut(path[1:], "/")
	tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
	switch v := tree.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = e
		}
		if rest == "" && strings.Count(path, "/") == 1 {
			delete(m, tok)
		} else {
			m[tok] = without(v[tok], "/"+rest)
		}
		return m
	case []any:
		i, _ := strconv.Atoi(tok)
		s := append([]any(nil), v...)
		if strings.Count(path, "/") == 1 {
			return append(s[:i], s[i+1:]...)
		}
		s[i] = without(v[i], "/"+rest)
		return s
	}
	panic("without: path into a scalar")
}

func marshalCanonical(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Append(nil, b)
	if err != nil {
		t.Fatalf("Append(%q) error = %v", b, err)
	}
	return out
}
