package consumer

import "testing"

// TestStatusText: a key.status value read without decoding where it can
// be, and decoded where it has escapes, gives the same text.
func TestStatusText(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`"resolved"`, "resolved"},
		{`"firing"`, "firing"},
		{`""`, ""},
		{`"a\"b"`, `a"b`},
		{`"\u00e9t\u00e9"`, "été"},
		{`"re\\solved"`, `re\solved`},
		{`1.5`, "1.5"},
		{`true`, "true"},
		{`{"a":1}`, `{"a":1}`},
	} {
		if got := statusText([]byte(tc.raw)); got != tc.want {
			t.Errorf("statusText(%s) = %q; want %q", tc.raw, got, tc.want)
		}
	}
}
