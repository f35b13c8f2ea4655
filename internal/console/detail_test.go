package console_test

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// get returns the body of GET path, failing unless it answers 200.
func get(t *testing.T, f *fixture, path string) string {
	t.Helper()
	resp, err := http.Get(f.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d:\n%s", path, resp.StatusCode, b)
	}
	return string(b)
}

// cell returns the text of the element of class (in the list) or id (on a
// letter's page) name in html, tags dropped, or "" if there is none.
func cell(html, attr, name string) string {
	m := regexp.MustCompile(`<[a-z0-9]+ [^>]*` + attr + `="` + name + `"[^>]*>(.*?)</`).FindStringSubmatch(html)
	if m == nil {
		return ""
	}
	return strings.TrimSpace(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(m[1], ""))
}

// TestDetailFirst: what a person needs first about a dead letter is at the
// top, not at the end of a detail cut at 120 characters: the effect that
// failed (its sink), the receiver's HTTP status and its message, the
// attempts made and the next step, each in a cell of its own in the list
// and in the summary that opens the letter's page, above the record, the
// headers and the payload.
func TestDetailFirst(t *testing.T) {
	f := start(t)
	list := get(t, f, "/dead")
	for _, c := range []struct{ name, want string }{
		{"effect", "http"},
		{"status", "400"},
		{"answer", "unknown field customer_ref"},
		{"attempts", "1"},
		{"next", "redrive"},
	} {
		if got := cell(list, "class", c.name); !strings.Contains(got, c.want) {
			t.Errorf("the list's %s cell = %q; want %q", c.name, got, c.want)
		}
	}
	page := get(t, f, "/dead/1")
	headers := strings.Index(page, "<h2>Headers")
	for _, c := range []struct{ name, want string }{
		{"effect", "http"},
		{"status", "400"},
		{"answer", "unknown field customer_ref"},
		{"attempts", "1"},
		{"next", "redrive"},
	} {
		got := cell(page, "id", c.name)
		if !strings.Contains(got, c.want) {
			t.Errorf("the letter's %s = %q; want %q", c.name, got, c.want)
		}
		if i := strings.Index(page, `id="`+c.name+`"`); i < 0 || headers >= 0 && i > headers {
			t.Errorf("the letter's %s is not in the summary above the headers", c.name)
		}
	}
}
