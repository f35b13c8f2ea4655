package canon

import (
	"errors"
	"strings"
	"testing"
)

// pointerDoc is canonicalized once for the pointer tests.
const pointerDoc = `{
	"nested": {"deep": {"k": "v", "j": null}},
	"arr": [10, {"x": "y"}, [true], -1.5],
	"a/b": 1, "m~n": 3, "esc\"q": 2, "tab\t": 4, "\u00fc": 5, "": 0,
	"~1": "tilde-one", "0": "zero"
}`

func canonical(t *testing.T, s string) []byte {
	t.Helper()
	out, err := Append(nil, []byte(s))
	if err != nil {
		t.Fatalf("Append(%q) error = %v", s, err)
	}
	return out
}

func mustParse(t *testing.T, s string) Pointer {
	t.Helper()
	p, err := ParsePointer(s)
	if err != nil {
		t.Fatalf("ParsePointer(%q) error = %v", s, err)
	}
	return p
}

func TestParsePointer(t *testing.T) {
	for _, s := range []string{"", "/", "//", "/a", "/a/b", "/~0", "/~1", "/~01", "/a~1b~0c", "/ü/€", "/\"", "/\t", "/0", "/-"} {
		p, err := ParsePointer(s)
		if err != nil {
			t.Errorf("ParsePointer(%q) error = %v; want nil", s, err)
			continue
		}
		if got := p.String(); got != s {
			t.Errorf("ParsePointer(%q).String() = %q; want %q", s, got, s)
		}
		if q, _ := ParsePointer(s); q != p {
			t.Errorf("ParsePointer(%q) twice gives unequal Pointers", s)
		}
	}
	for _, s := range []string{"a", "a/b", "#/a", "/~", "/~2", "/a~", "/a~x/b", "/\xff", "\xff"} {
		_, err := ParsePointer(s)
		var pe *PointerError
		if !errors.Is(err, ErrPointerSyntax) || !errors.As(err, &pe) || pe.Pointer != s {
			t.Errorf("ParsePointer(%q) error = %v; want *PointerError wrapping %v", s, err, ErrPointerSyntax)
		}
	}
	if a, b := mustParse(t, "/a~1b"), mustParse(t, "/a/b"); a == b {
		t.Errorf("ParsePointer(%q) == ParsePointer(%q); want different", "/a~1b", "/a/b")
	}
}

func TestLookup(t *testing.T) {
	doc := canonical(t, pointerDoc)
	tests := []struct {
		ptr  string
		want string // "" means not found
	}{
		{"", string(doc)},
		{"/", `0`},
		{"/a~1b", `1`},
		{"/m~0n", `3`},
		{"/~01", `"tilde-one"`},
		{`/esc"q`, `2`},
		{"/tab\t", `4`},
		{"/ü", `5`},
		{"/0", `"zero"`},
		{"/arr", `[10,{"x":"y"},[true],-1.5]`},
		{"/arr/0", `10`},
		{"/arr/1", `{"x":"y"}`},
		{"/arr/1/x", `"y"`},
		{"/arr/2/0", `true`},
		{"/arr/3", `-1.5`},
		{"/nested/deep", `{"j":null,"k":"v"}`},
		{"/nested/deep/j", `null`},
		{"/arr/4", ""},
		{"/arr/-", ""},
		{"/arr/01", ""},
		{"/arr/x", ""},
		{"/arr/99999999999999999999", ""},
		{"/missing", ""},
		{"/a", ""},
		{"/a~1b/c", ""},
		{"/arr/1/x/y", ""},
		{"/nested/deep/k/0", ""},
		{"/~1", ""},
		{"/u", ""},
	}
	for _, tt := range tests {
		got, ok, err := Lookup(doc, mustParse(t, tt.ptr))
		if err != nil {
			t.Errorf("Lookup(%q) error = %v; want nil", tt.ptr, err)
			continue
		}
		if tt.want == "" {
			if ok {
				t.Errorf("Lookup(%q) = %q, true; want not found", tt.ptr, got)
			}
			continue
		}
		if !ok || string(got) != tt.want {
			t.Errorf("Lookup(%q) = %q, %v; want %q, true", tt.ptr, got, ok, tt.want)
		}
	}
}

func TestSelect(t *testing.T) {
	doc := canonical(t, pointerDoc)
	ptrs := []Pointer{mustParse(t, "/arr/1/x"), mustParse(t, "/a~1b"), mustParse(t, "/nested/deep"), mustParse(t, "/arr/1/x")}
	got, err := Select([]byte("key="), doc, ptrs)
	want := `key=["y",1,{"j":null,"k":"v"},"y"]`
	if err != nil || string(got) != want {
		t.Errorf("Select = %q, %v; want %q", got, err, want)
	}
	got, err = Select(nil, doc, nil)
	if err != nil || string(got) != "[]" {
		t.Errorf("Select(no pointers) = %q, %v; want %q", got, err, "[]")
	}

	got, err = Select([]byte("key="), doc, []Pointer{ptrs[0], mustParse(t, "/arr/-")})
	var pe *PointerError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &pe) || pe.Pointer != "/arr/-" {
		t.Errorf("Select(/arr/-) error = %v; want *PointerError for %q wrapping %v", err, "/arr/-", ErrNotFound)
	}
	if string(got) != "key=" {
		t.Errorf("Select(/arr/-) = %q; want dst unchanged", got)
	}
	if want := `canon: pointer "/arr/-": no value at pointer`; err == nil || err.Error() != want {
		t.Errorf("Select(/arr/-) error = %v; want %s", err, want)
	}
}

func TestOmit(t *testing.T) {
	doc := canonical(t, pointerDoc)
	tests := []struct {
		name string
		drop []string
		want string
	}{
		{"nothing", nil, string(doc)},
		{"missing", []string{"/missing", "/arr/9", "/arr/-", "/a~1b/c", "/nested/x/y"}, string(doc)},
		{"members", []string{"/a~1b", "/m~0n", "/", "/~01", "/0", "/esc\"q", "/tab\t", "/ü"},
			`{"arr":[10,{"x":"y"},[true],-1.5],"nested":{"deep":{"j":null,"k":"v"}}}`},
		{"first and last", []string{"/", "/ü"},
			`{"0":"zero","a/b":1,"arr":[10,{"x":"y"},[true],-1.5],"esc\"q":2,"m~n":3,"nested":{"deep":{"j":null,"k":"v"}},"tab\t":4,"~1":"tilde-one"}`},
		{"nested", []string{"/nested/deep/k", "/arr/1/x", "/arr/2/0", "/arr/0", "/arr/3", "/a~1b", "/m~0n", "/", "/~01", "/0", "/esc\"q", "/tab\t", "/ü"},
			`{"arr":[{},[]],"nested":{"deep":{"j":null}}}`},
		{"whole member and inside it", []string{"/nested", "/nested/deep/k", "/arr", "/a~1b", "/m~0n", "/", "/~01", "/0", "/esc\"q", "/tab\t", "/ü"},
			`{}`},
		{"duplicates", []string{"/arr/1", "/arr/1", "/arr/0"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var drop []Pointer
			for _, s := range tt.drop {
				drop = append(drop, mustParse(t, s))
			}
			got, err := Omit([]byte("x"), doc, drop)
			if err != nil {
				t.Fatalf("Omit(%q) error = %v", tt.drop, err)
			}
			want := tt.want
			if want == "" {
				want = strings.Replace(string(doc), `[10,{"x":"y"},`, `[`, 1)
			}
			if string(got) != "x"+want {
				t.Errorf("Omit(%q) =\n%s\nwant\nx%s", tt.drop, got, want)
			}
			checkFixedPoint(t, got[1:])
		})
	}
	got, err := Omit([]byte("x"), doc, []Pointer{mustParse(t, "/a"), {}})
	if !errors.Is(err, ErrPointerSyntax) || string(got) != "x" {
		t.Errorf("Omit(whole document) = %q, %v; want %q, %v", got, err, "x", ErrPointerSyntax)
	}
}

// TestPointerGarbage checks that Lookup, Select and Omit reject documents
// that are not canonical JSON without panicking.
func TestPointerGarbage(t *testing.T) {
	docs := []string{
		``, `{`, `[`, `"`, `"abc`, `[1,`, `[1 2]`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1`, `{"a" :1}`, `{ "a":1}`,
		`{a:1}`, `[tru]`, `[-]`, `[01x]`, `[1.]`, `[1e]`, "\x00", `[1]]`, `{"a":1}}`, `[}`, `{]`,
		`{"a":1}x`, `[1] `, "{\"a\n\":1}", `{"\u0041":1}`, `{"\/":1}`, `["\u001F"]`, `["\u000a"]`, `["\x"]`,
		strings.Repeat("[", 10000), strings.Repeat(`{"a":`, 5000), `{"a":[1,{"b":` + strings.Repeat("[", 100),
	}
	ptrs := []Pointer{{}, mustParse(t, "/a"), mustParse(t, "/a/1/b"), mustParse(t, "/0"), mustParse(t, "/a/b/c/d")}
	for _, d := range docs {
		doc := []byte(d)
		for _, p := range ptrs {
			v, ok, err := Lookup(doc, p)
			if err == nil && ok {
				if _, err := Append(nil, v); err != nil {
					t.Errorf("Lookup(%.20q, %q) = %q, which is not valid: %v", d, p, v, err)
				}
			}
			if _, err := Select(nil, doc, []Pointer{p}); err == nil && p == (Pointer{}) {
				t.Errorf("Select(%.20q, %q) error = nil; want an error", d, p)
			}
		}
		if got, err := Omit(nil, doc, ptrs[1:]); err == nil {
			t.Errorf("Omit(%.20q) = %q, nil; want an error", d, got)
		} else if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrTrailingData) {
			t.Errorf("Omit(%.20q) error = %v; want %v or %v", d, err, ErrSyntax, ErrTrailingData)
		}
	}
}
