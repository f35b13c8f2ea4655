package httponce

import (
	"strings"
	"testing"
)

// quote writes s as a structured-field string.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// FuzzParseKey: a header value parses to a string that, quoted again,
// parses back to itself; a quoted value never yields a string with bytes
// outside printable ASCII.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `plain-key`, `"a\"b\\c"`, `"unclosed`, `""`, `"x" ;p=1`, " \t\"k\" "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		s, err := parseKey([]string{v})
		if err != nil {
			return
		}
		if s == "" {
			t.Fatalf("parseKey(%q) = empty string", v)
		}
		if strings.HasPrefix(strings.TrimLeft(v, " \t"), `"`) {
			for i := 0; i < len(s); i++ {
				if s[i] < 0x20 || s[i] > 0x7e {
					t.Fatalf("parseKey(%q) = %q, with byte %#x", v, s, s[i])
				}
			}
			if back, err := parseKey([]string{quote(s)}); err != nil || back != s {
				t.Fatalf("parseKey(quote(%q)) = %q, %v", s, back, err)
			}
		}
	})
}
