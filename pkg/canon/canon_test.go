package canon

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVectors checks the official RFC 8785 test vectors byte for byte.
func TestVectors(t *testing.T) {
	files, err := filepath.Glob("testdata/input/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no vectors in testdata/input: %v", err)
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			in := readFile(t, file)
			want := readFile(t, filepath.Join("testdata/output", name))
			got, err := Append(nil, in)
			if err != nil {
				t.Fatalf("Append(%s) error = %v; want nil", name, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Append(%s) =\n%s\nwant\n%s", name, got, want)
			}
			hex := strings.Join(strings.Fields(string(readFile(t, filepath.Join("testdata/outhex", strings.TrimSuffix(name, ".json")+".txt")))), "")
			if gotHex := hexString(got); gotHex != hex {
				t.Errorf("Append(%s) hex = %s; want %s", name, gotHex, hex)
			}
			checkFixedPoint(t, got)
			if err := Valid(in); err != nil {
				t.Errorf("Valid(%s) = %v; want nil", name, err)
			}
		})
	}
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	var sb strings.Builder
	for _, c := range b {
		sb.WriteByte(digits[c>>4])
		sb.WriteByte(digits[c&0xF])
	}
	return sb.String()
}

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkFixedPoint checks that canonical output canonicalizes to itself.
func checkFixedPoint(t *testing.T, out []byte) {
	t.Helper()
	again, err := Append(nil, out)
	if err != nil {
		t.Fatalf("Append(%q) of canonical output error = %v; want nil", out, err)
	}
	if !bytes.Equal(again, out) {
		t.Fatalf("Append(%q) = %q; want it unchanged", out, again)
	}
	if !json.Valid(out) {
		t.Fatalf("output %q is not valid JSON", out)
	}
}

func TestAppendCanonical(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"scalar string", `"x"`, `"x"`},
		{"scalar number", ` 42 `, `42`},
		{"literals", "[true,false,null]", "[true,false,null]"},
		{"whitespace", " \t\r\n{ \"a\" : [ 1 , 2 ] , \"b\" : { } }\n", `{"a":[1,2],"b":{}}`},
		{"empty containers", `[{},[],""]`, `[{},[],""]`},
		{"sorted already", `{"a":1,"b":2,"c":3}`, `{"a":1,"b":2,"c":3}`},
		{"reverse", `{"c":3,"b":2,"a":1}`, `{"a":1,"b":2,"c":3}`},
		{"prefix sorts first", `{"ab":1,"a":2}`, `{"a":2,"ab":1}`},
		{"nested reorder", `{"z":{"y":1,"x":[{"b":1,"a":2}]},"a":0}`, `{"a":0,"z":{"x":[{"a":2,"b":1}],"y":1}}`},
		{"many members", `{"m":1,"l":1,"k":1,"j":1,"i":1,"h":1,"g":1,"f":1,"e":1,"d":1,"c":1,"b":1,"a":1,"n":1}`,
			`{"a":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1,"j":1,"k":1,"l":1,"m":1,"n":1}`},
		// U+FB33 is above the surrogates in UTF-16, U+1F602 is a surrogate pair
		// (0xD83D 0xDE02), so in UTF-16 order the emoji comes first even though
		// its UTF-8 (and code point) order is later.
		{"utf16 order", `{"\ufb33":1,"😂":2,"\uffff":3,"\ud7ff":4}`, "{\"\ud7ff\":4,\"😂\":2,\"\ufb33\":1,\"\uffff\":3}"},
		{"escaped name sorts unescaped", `{"b":1,"\u0061":2}`, `{"a":2,"b":1}`},
		{"escape names keep escapes", `{"\n":1,"\u0000":2}`, `{"\u0000":2,"\n":1}`},
		{"minimal escapes", `"\u0022\u005c\/\b\f\n\r\t\u0001\u001f\u007f"`, `"\"\\/\b\f\n\r\t\u0001\u001f` + "\x7f" + `"`},
		{"html and separators not escaped", `"<>&\u2028\u2029"`, "\"<>&\u2028\u2029\""},
		{"unicode escapes decoded", `"\u00e9\u20AC\ud83d\ude00"`, `"é€😀"`},
		{"raw utf8 kept", `"héllo wörld ✓ 😀"`, `"héllo wörld ✓ 😀"`},
		{"noncharacter accepted", `"\ufffe\uffff"`, "\"\ufffe\uffff\""},
		{"integers", `[0,-0,1,-1,123456789012345,9007199254740992,-9007199254740992]`, `[0,0,1,-1,123456789012345,9007199254740992,-9007199254740992]`},
		// Integer literals above 2^53 that are their own canonical form.
		{"canonical large integers", `[9007199254740994,-18014398509481984,295147905179352830000,100000000000000000000]`,
			`[9007199254740994,-18014398509481984,295147905179352830000,100000000000000000000]`},
		{"floats", `[1.0,1e0,0.5,-0.0,4.50,2e-3,1E30,1e21,1e20,1e-6,1e-7,0.1,0.30000000000000004,123.456]`,
			`[1,1,0.5,0,4.5,0.002,1e+30,1e+21,100000000000000000000,0.000001,1e-7,0.1,0.30000000000000004,123.456]`},
		{"short decimals", `[0.000001,0.0000012,0.0000001,-0.05,1.5,999999999999999.9,12345678901234.5,0.123456789012345,0.1234567890123456]`,
			`[0.000001,0.0000012,1e-7,-0.05,1.5,999999999999999.9,12345678901234.5,0.123456789012345,0.1234567890123456]`},
		{"underflow", `1e-400`, `0`},
		{"max", `1.7976931348623157e308`, `1.7976931348623157e+308`},
		{"exponent forms", `[1E+2,1e-2,5e-324,-1.5e-10]`, `[100,0.01,5e-324,-1.5e-10]`},
	}

	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.Append(nil, []byte(tt.in))
			if err != nil {
				t.Fatalf("Append(%q) error = %v; want nil", tt.in, err)
			}
			if string(got) != tt.want {
				t.Errorf("Append(%q) = %q; want %q", tt.in, got, tt.want)
			}
			checkFixedPoint(t, got)
		})
	}
}

func TestAppendKeepsDst(t *testing.T) {
	dst := []byte("prefix:")
	got, err := Append(dst, []byte(`{"b":1,"a":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `prefix:{"a":2,"b":1}` {
		t.Errorf("Append(prefix) = %q; want %q", got, `prefix:{"a":2,"b":1}`)
	}
	got, err = Append(dst, []byte(`{"a":1,"a":2}`))
	if err == nil || string(got) != "prefix:" {
		t.Errorf("Append(prefix, duplicate) = %q, %v; want %q and an error", got, err, "prefix:")
	}
}

// hostileCase is an input that must be rejected with err at offset.
type hostileCase struct {
	name   string
	in     string
	err    error
	offset int64
}

var hostile = []hostileCase{
	// Grammar.
	{"empty", ``, ErrSyntax, 0},
	{"only whitespace", "  \n", ErrSyntax, 3},
	{"bad literal", `[tru]`, ErrSyntax, 4},
	{"NaN", `NaN`, ErrSyntax, 0},
	{"Infinity", `[Infinity]`, ErrSyntax, 1},
	{"negative Infinity", `-Infinity`, ErrSyntax, 1},
	{"leading zero", `[01]`, ErrSyntax, 2},
	{"negative leading zero", `-012`, ErrSyntax, 2},
	{"plus sign", `+1`, ErrSyntax, 0},
	{"bare fraction", `.5`, ErrSyntax, 0},
	{"trailing point", `[1.]`, ErrSyntax, 3},
	{"point before exponent", `1.e5`, ErrSyntax, 2},
	{"empty exponent", `1e`, ErrSyntax, 2},
	{"signed empty exponent", `[1e+]`, ErrSyntax, 4},
	{"hex number", `0x10`, ErrTrailingData, 1},
	{"lone minus", `-`, ErrSyntax, 1},
	{"trailing comma array", `[1,]`, ErrSyntax, 3},
	{"trailing comma object", `{"a":1,}`, ErrSyntax, 7},
	{"missing colon", `{"a" 1}`, ErrSyntax, 5},
	{"missing comma", `[1 2]`, ErrSyntax, 3},
	{"unquoted name", `{a:1}`, ErrSyntax, 1},
	{"single quotes", `['a']`, ErrSyntax, 1},
	{"unclosed array", `[1,2`, ErrSyntax, 4},
	{"unclosed object", `{"a":1`, ErrSyntax, 6},
	{"unclosed string", `"abc`, ErrSyntax, 4},
	{"mismatched bracket", `[1}`, ErrSyntax, 2},
	{"comment", `[1]//x`, ErrTrailingData, 3},
	{"vertical tab whitespace", "\v1", ErrSyntax, 0},
	{"nbsp whitespace", "\u00a01", ErrSyntax, 0},
	{"raw control char", "\"a\x01b\"", ErrSyntax, 2},
	{"raw newline in string", "\"a\nb\"", ErrSyntax, 2},
	{"raw tab in string", "[\"\t\"]", ErrSyntax, 2},
	{"bad escape", `"\x41"`, ErrSyntax, 1},
	{"escaped apostrophe", `"\'"`, ErrSyntax, 1},
	{"short unicode escape", `"\u12"`, ErrSyntax, 5},
	{"bad hex", `"\u12G4"`, ErrSyntax, 5},
	{"trailing data", `{} {}`, ErrTrailingData, 3},
	{"trailing garbage", `1 x`, ErrTrailingData, 2},
	{"trailing NUL", "1\x00", ErrTrailingData, 1},

	// Duplicate names, compared after unescaping.
	{"duplicate", `{"id":1,"id":2}`, ErrDuplicateName, 8},
	{"duplicate escaped", `{"a":1,"\u0061":2}`, ErrDuplicateName, 7},
	{"duplicate unsorted", `{"b":1,"a":1,"c":1,"a":2}`, ErrDuplicateName, 19},
	{"duplicate in nested", `[{"x":{"k":1,"k":1}}]`, ErrDuplicateName, 13},
	{"duplicate many", `{"m":1,"l":1,"k":1,"j":1,"i":1,"h":1,"g":1,"f":1,"e":1,"d":1,"c":1,"b":1,"a":1,"b":2,"m":3}`, ErrDuplicateName, 79},
	{"duplicate surrogate escapes", `{"😀":1,"\ud83d\ude00":2}`, ErrDuplicateName, 10},

	// UTF-8.
	{"invalid byte", "\"a\xffb\"", ErrInvalidUTF8, 2},
	{"truncated sequence", "\"\xe2\x82\"", ErrInvalidUTF8, 1},
	{"overlong", "\"\xc0\xaf\"", ErrInvalidUTF8, 1},
	{"encoded surrogate", "\"\xed\xa0\x80\"", ErrInvalidUTF8, 1},
	{"above U+10FFFF", "\"\xf4\x90\x80\x80\"", ErrInvalidUTF8, 1},
	{"invalid in name", "{\"\x80\":1}", ErrInvalidUTF8, 2},
	{"lone continuation after escape", "\"\\n\xbf\"", ErrInvalidUTF8, 3},

	// Surrogate escapes.
	{"lone high surrogate", `"\ud83d"`, ErrSurrogate, 1},
	{"lone low surrogate", `"\ude00"`, ErrSurrogate, 1},
	{"reversed surrogates", `"\ude00\ud83d"`, ErrSurrogate, 1},
	{"high then letter", `"\ud83dx"`, ErrSurrogate, 1},
	{"high then high", `"ab\ud83d\ud83d"`, ErrSurrogate, 3},
	{"high then escape", `"\ud83d\n"`, ErrSurrogate, 1},

	// Numbers.
	{"overflow", `1e400`, ErrNumberRange, 0},
	{"negative overflow", `[-1e400]`, ErrNumberRange, 1},
	{"overflow by rounding", `1.7976931348623159e308`, ErrNumberRange, 0},
	{"inexact integer", `{"id":9007199254740993}`, ErrInexactInteger, 6},
	{"inexact negative integer", `-9007199254740993`, ErrInexactInteger, 0},
	{"not canonical above 2^53", `18014398509481985`, ErrInexactInteger, 0},
	{"exact but not canonical", `295147905179352825856`, ErrInexactInteger, 0},
	{"22 digits", `1000000000000000000000`, ErrInexactInteger, 0},
	{"huge integer", `[` + strings.Repeat("9", 400) + `]`, ErrInexactInteger, 1},

	// BOM.
	{"BOM", "\xef\xbb\xbf{}", ErrBOM, 0},

	// Limits.
	{"depth bomb", strings.Repeat("[", 100_000), ErrTooDeep, 64},
	{"depth 65", strings.Repeat("[", 65) + strings.Repeat("]", 65), ErrTooDeep, 64},
	{"object depth 65", strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65), ErrTooDeep, 64 * 5},
	{"too large", `"` + strings.Repeat("a", 1<<20) + `"`, ErrTooLarge, 1 << 20},
	{"string too long", `["` + strings.Repeat("a", 256<<10+1) + `"]`, ErrStringTooLong, 1},
	{"string too long after escape", `["\n` + strings.Repeat("a", 256<<10) + `"]`, ErrStringTooLong, 1},
	{"name too long", `{"` + strings.Repeat("é", 128<<10+1) + `":1}`, ErrStringTooLong, 1},
	{"too many elements", `[` + strings.Repeat("0,", 10_000) + `0]`, ErrTooManyMembers, 20_001},
	{"too many members", `{` + manyMembers(10_001) + `}`, ErrTooManyMembers, int64(len(manyMembers(10_000))) + 2},
}

func manyMembers(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k`)
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(string(rune('a' + i%26)))
		b.WriteString(itoa(i))
		b.WriteString(`":0`)
	}
	return b.String()
}

func itoa(i int) string {
	b, _ := AppendFloat(nil, float64(i))
	return string(b)
}

func TestHostile(t *testing.T) {
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range hostile {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.in)
			got, err := c.Append(nil, in)
			if err == nil {
				t.Fatalf("Append(%s) = %.80q, nil; want error %v", tt.name, got, tt.err)
			}
			if !errors.Is(err, tt.err) {
				t.Errorf("Append(%s) error = %v; want errors.Is %v", tt.name, err, tt.err)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Append(%s) error = %T; want *Error", tt.name, err)
			}
			if e.Offset != tt.offset {
				t.Errorf("Append(%s) error offset = %d (%v); want %d", tt.name, e.Offset, err, tt.offset)
			}
			if e.Err != tt.err { //nolint:errorlint // the sentinel itself, not an error wrapping it
				t.Errorf("Append(%s) error.Err = %v; want the sentinel %v", tt.name, e.Err, tt.err)
			}
			if len(got) != 0 {
				t.Errorf("Append(%s) on error returned %d bytes; want dst unchanged", tt.name, len(got))
			}
			if len(err.Error()) > 200 {
				t.Errorf("Append(%s) error message is %d bytes; want it bounded", tt.name, len(err.Error()))
			}
			if Valid(in) == nil {
				t.Errorf("Valid(%s) = nil; want error", tt.name)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{`{"id":1,"x":{},"id":2}`, `canon: duplicate object member name "id" at byte 15`},
		{`{"id":9007199254740993}`, `canon: integer cannot be represented exactly: 9007199254740993 exceeds 2^53 and would become 9007199254740992 (send IDs as strings) at byte 6`},
		{`[1 2]`, `canon: invalid JSON: unexpected character '2' after array element at byte 3`},
		{`[1`, `canon: invalid JSON: unexpected end of input after array element at byte 2`},
	}
	for _, tt := range tests {
		_, err := Append(nil, []byte(tt.in))
		if err == nil || err.Error() != tt.want {
			t.Errorf("Append(%q) error = %v; want %s", tt.in, err, tt.want)
		}
	}
}

func TestLimitOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		in   string
		err  error
	}{
		{"MaxBytes ok", Options{MaxBytes: 7}, `[1,2,3]`, nil},
		{"MaxBytes", Options{MaxBytes: 6}, `[1,2,3]`, ErrTooLarge},
		{"MaxDepth ok", Options{MaxDepth: 2}, `[[1]]`, nil},
		{"MaxDepth", Options{MaxDepth: 2}, `[[[1]]]`, ErrTooDeep},
		{"MaxDepth object", Options{MaxDepth: 1}, `{"a":{}}`, ErrTooDeep},
		{"MaxStringBytes ok", Options{MaxStringBytes: 3}, `["abc","\u00e9x"]`, nil},
		{"MaxStringBytes", Options{MaxStringBytes: 3}, `"abcd"`, ErrStringTooLong},
		{"MaxStringBytes unescaped", Options{MaxStringBytes: 3}, `"\u00e9\u00e9"`, ErrStringTooLong},
		{"MaxStringBytes name", Options{MaxStringBytes: 3}, `{"abcd":1}`, ErrStringTooLong},
		{"MaxMembers ok", Options{MaxMembers: 2}, `{"a":[1,2],"b":{"c":1,"d":2}}`, nil},
		{"MaxMembers array", Options{MaxMembers: 2}, `[1,2,3]`, ErrTooManyMembers},
		{"MaxMembers object", Options{MaxMembers: 2}, `{"a":1,"b":2,"c":3}`, ErrTooManyMembers},
		{"inexact rejected", Options{}, `9007199254740993`, ErrInexactInteger},
		{"inexact allowed", Options{AllowInexactIntegers: true}, `9007199254740993`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Append(nil, []byte(tt.in))
			if !errors.Is(err, tt.err) {
				t.Errorf("Append(%q) with %+v error = %v; want %v", tt.in, tt.opts, err, tt.err)
			}
		})
	}
}

func TestAllowInexactIntegers(t *testing.T) {
	c, err := New(Options{AllowInexactIntegers: true})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ in, want string }{
		{`9007199254740993`, `9007199254740992`},
		{`-9007199254740993`, `-9007199254740992`},
		{`295147905179352825856`, `295147905179352830000`},
		{`1000000000000000000000`, `1e+21`},
		{strings.Repeat("9", 400), ``},
	}
	for _, tt := range tests {
		got, err := c.Append(nil, []byte(tt.in))
		if tt.want == "" {
			if !errors.Is(err, ErrNumberRange) {
				t.Errorf("Append(%.20q…) error = %v; want %v", tt.in, err, ErrNumberRange)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("Append(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestNewInvalidOptions(t *testing.T) {
	for _, opts := range []Options{{MaxBytes: -1}, {MaxDepth: -1}, {MaxStringBytes: -1}, {MaxMembers: -5}} {
		c, err := New(opts)
		if !errors.Is(err, ErrInvalidOptions) || c != nil {
			t.Errorf("New(%+v) = %v, %v; want nil, %v", opts, c, err, ErrInvalidOptions)
		}
	}
}

func TestZeroCanonicalizer(t *testing.T) {
	var c Canonicalizer
	got, err := c.Append(nil, []byte(`{"b":[],"a":1}`))
	if err != nil || string(got) != `{"a":1,"b":[]}` {
		t.Errorf("zero Canonicalizer Append = %q, %v; want %q", got, err, `{"a":1,"b":[]}`)
	}
	if _, err := c.Append(nil, []byte(strings.Repeat("[", 65))); !errors.Is(err, ErrTooDeep) {
		t.Errorf("zero Canonicalizer depth 65 error = %v; want %v", err, ErrTooDeep)
	}
}

func TestCompareNames(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "a", -1},
		{"a", "b", -1},
		{"b", "a", 1},
		{"a", "ab", -1},
		{"\u00e9", "z", 1},
		{"\ue000", "\U00010000", 1},
		{"\uffff", "\U0010ffff", 1},
		{"\U0001f602", "\ufb33", -1},
		{"\ud7ff", "\U00010000", -1},
		{"\U00010000", "\U00010001", -1},
		{"x\U00010000", "x\uffff", -1},
	}
	for _, tt := range tests {
		if got := compareNames([]byte(tt.a), []byte(tt.b)); got != tt.want {
			t.Errorf("compareNames(%+q, %+q) = %d; want %d", tt.a, tt.b, got, tt.want)
		}
		if got := compareNames([]byte(tt.b), []byte(tt.a)); got != -tt.want {
			t.Errorf("compareNames(%+q, %+q) = %d; want %d", tt.b, tt.a, got, -tt.want)
		}
	}
}

// raceEnabled is set by race_test.go.
var raceEnabled bool

// TestAllocs checks that a reused Canonicalizer does not allocate in the
// steady state, for payloads with unsorted objects and escapes.
func TestAllocs(t *testing.T) {
	files, _ := filepath.Glob("testdata/bench/*.json")
	files = append(files, "testdata/input/weird.json", "testdata/input/values.json")
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		in := readFile(t, file)
		var dst []byte
		allocs := testing.AllocsPerRun(20, func() {
			dst, err = c.Append(dst[:0], in)
			if err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("Append(%s) allocates %v times per run; want 0", file, allocs)
		}
		if raceEnabled {
			continue
		}
		allocs = testing.AllocsPerRun(20, func() {
			dst, _ = Append(dst[:0], in)
		})
		if allocs != 0 {
			t.Errorf("package Append(%s) allocates %v times per run; want 0", file, allocs)
		}
	}
}

// TestHostileMemory checks that a long string fails at the limit without
// copying the payload into the output.
func TestHostileMemory(t *testing.T) {
	c, err := New(Options{MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	in := make([]byte, 0, 50<<20+16)
	in = append(in, `["\n`...)
	in = append(in, bytes.Repeat([]byte("a"), 50<<20)...)
	in = append(in, `"]`...)
	dst := make([]byte, 0, 16)
	_, err = c.Append(dst, in)
	if !errors.Is(err, ErrStringTooLong) {
		t.Fatalf("Append(50 MB string) error = %v; want %v", err, ErrStringTooLong)
	}
	if cap(c.tmp) > 1<<20 || cap(c.names) > 1<<20 {
		t.Errorf("scratch grew to tmp %d, names %d bytes; want bounded by the limits", cap(c.tmp), cap(c.names))
	}
}

// TestPlainRun checks the word-at-a-time scan against a byte loop.
func TestPlainRun(t *testing.T) {
	alphabet := []byte{'a', 'Z', ' ', '~', 0x7f, '"', '\\', 0x00, 0x1f, 0x20, 0x21, 0x5b, 0x5d, 0x80, 0xa0, 0xc3, 0xff}
	rnd := uint64(1)
	for n := range 5000 {
		src := make([]byte, n%40)
		for i := range src {
			rnd = rnd*6364136223846793005 + 1442695040888963407
			if rnd>>60 < 12 {
				src[i] = 'a' + byte(rnd>>40)%26
			} else {
				src[i] = alphabet[(rnd>>33)%uint64(len(alphabet))]
			}
		}
		for start := 0; start <= len(src); start += 3 {
			want := start
			for want < len(src) && plain[src[want]] {
				want++
			}
			if got := plainRun(src, start, len(src)); got != want {
				t.Fatalf("plainRun(%q, %d) = %d; want %d", src, start, got, want)
			}
		}
	}
}

// TestNamePrefix checks that comparing members by prefix agrees with
// compareNames.
func TestNamePrefix(t *testing.T) {
	names := []string{"", "a", "a\x00", "ab", "abcdefgh", "abcdefgh\x00", "abcdefghi", "abcdefgg\xff",
		"\ufb33", "😂", "\uffff", "\ud7ff", "x😂", "x\uffff", "abcdefg😂", "abcdefg\uffff", "abcdefgh😂", "abcdefgh\uffff",
		"é", "\u0080", "\u07ff", "\u0800", "\U0010ffff", "\U00010000z"}
	var c Canonicalizer
	for _, a := range names {
		for _, b := range names {
			src := []byte(a + "\x00" + b)
			ma := member{key: 0, keyLen: len(a)}
			mb := member{key: len(a) + 1, keyLen: len(b)}
			ma.prefix = namePrefix(c.name(src, &ma))
			mb.prefix = namePrefix(c.name(src, &mb))
			want := compareNames([]byte(a), []byte(b))
			if got := c.compare(src, &ma, &mb); sign(got) != want {
				t.Errorf("compare(%+q, %+q) = %d; want sign %d", a, b, got, want)
			}
		}
	}
}

func sign(x int) int {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}
