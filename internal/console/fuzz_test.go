package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/console"
)

// FuzzBack: whatever page a sign-in asks to return to (its back field),
// the redirect after it keeps the operator on the console: the Location
// header has no control character, and a browser resolves it (tabs and
// newlines dropped, backslashes taken for slashes) to the console's own
// host. It drives the real sign-in handler, then signs out, so that
// sessions do not pile up.
func FuzzBack(f *testing.F) {
	for _, back := range []string{
		"/dead", "/dead/1?msg=redriven%3B+ledger", "/\t/evil.example", "//evil.example", "/\\evil.example",
		"/%09/evil.example", "/%2F%2Fevil.example", "https://evil.example", "javascript:alert(1)", "/.//evil.example",
		"/..//evil.example", "/\u00a0/evil.example", "/\x00/evil.example", "/%5C%5Cevil.example", "\\/evil.example",
		"/a?b=//evil.example", "/#//evil.example", "", "/",
	} {
		f.Add(back)
	}
	a, err := startConsole(f, "", 0, nil)
	if err != nil {
		f.Fatal(err)
	}
	s := consoleOn(f, a, token+"\n", io.Discard, nil)
	f.Fuzz(func(t *testing.T, back string) {
		form := url.Values{"token": {token}, "back": {back}}
		w := signInAt(s, "192.0.2.1:1234", form)
		loc := w.Header().Get("Location")
		if len(form.Encode()) > 16<<10 {
			if w.Code != http.StatusRequestEntityTooLarge || loc != "" {
				t.Fatalf("sign-in with a form of %d bytes = %d, Location %q; want 413 and no redirect", len(form.Encode()), w.Code, loc)
			}
			return
		}
		if w.Code != http.StatusSeeOther {
			t.Fatalf("sign-in with back %q = %d; want 303", back, w.Code)
		}
		if strings.ContainsFunc(loc, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Fatalf("sign-in with back %q: Location %q has a control character", back, loc)
		}
		u, err := browserResolve(loc)
		if err != nil || u.Scheme != "http" || u.Host != "console.example" {
			t.Fatalf("sign-in with back %q: Location %q takes a browser to %v (%v); want this host", back, loc, u, err)
		}
		r := httptest.NewRequest(http.MethodPost, "/logout", nil)
		for _, c := range w.Result().Cookies() {
			r.AddCookie(c)
		}
		s.Handler().ServeHTTP(httptest.NewRecorder(), r)
	})
}

// TestSafeBack: a local path is kept as it is; anything a browser could
// take for another host, or that is not a path, is replaced.
func TestSafeBack(t *testing.T) {
	for _, tt := range []struct{ back, want string }{
		{"/dead", "/dead"},
		{"/dead/1?msg=redriven%3B+ledger%3A+cleared", "/dead/1?msg=redriven%3B+ledger%3A+cleared"},
		{"/dead?pipeline=orders&reason=permanent_effect", "/dead?pipeline=orders&reason=permanent_effect"},
		{"/", "/"},
		{"/\t/evil.example", "/x"},
		{"/%09/evil.example", "/x"},
		{"//evil.example", "/x"},
		{"/\\evil.example", "/x"},
		{"/%2F/evil.example", "/x"},
		{"/%5Cevil.example", "/x"},
		{"/%zz", "/x"},
		{"/a b", "/x"},
		{"/é", "/x"},
		{"https://evil.example/", "/x"},
		{"dead", "/x"},
		{"", "/x"},
	} {
		if got := console.SafeBack(tt.back, "/x"); got != tt.want {
			t.Errorf("safeBack(%q) = %q; want %q", tt.back, got, tt.want)
		}
	}
}
