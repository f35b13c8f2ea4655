package console_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/admin"
)

// TestConsoleAudit: every change an operator makes in the console is in
// the audit under the name their token carries, with what came of it,
// and the console shows it: bob redrives the dead letter (the receiver
// still broken, it fails again), alice forgets its record; the Audit page
// lists both, newest first, by who and with the outcome, filters by who,
// and the key's story tells it.
func TestConsoleAudit(t *testing.T) {
	const alice, bob = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef"
	f := startTokens(t, "alice "+alice+"\nbob "+bob+"\n")
	as := func(tok string) (func(string) string, func(string, url.Values) string) {
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar}
		get := func(path string) string {
			t.Helper()
			resp, err := c.Get(f.base + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return string(b)
		}
		post := func(path string, v url.Values) string {
			t.Helper()
			resp, err := c.PostForm(f.base+path, v)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return string(b)
		}
		post("/login", url.Values{"token": {tok}})
		return get, post
	}
	bobGet, bobPost := as(bob)
	m := csrfRE.FindStringSubmatch(bobGet("/dead/1"))
	if m == nil {
		t.Fatal("signed in, bob sees no CSRF token")
	}
	bobPost("/dead/1/redrive", url.Values{"csrf": {m[1]}})
	d, err := f.app.Admin.Show(ctx, admin.ShowRequest{Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the redriven trigger failed again", func() bool {
		r, err := f.app.Admin.Record(ctx, admin.RecordRequest{Key: d.Key})
		return err == nil && r.Record != nil && r.Record.State == "failed"
	})
	aliceGet, alicePost := as(alice)
	m = csrfRE.FindStringSubmatch(aliceGet("/dead/1"))
	alicePost("/forget", url.Values{"csrf": {m[1]}, "key": {d.Key}, "back": {"/dead/1"}})

	page := aliceGet("/audit")
	i, j := strings.Index(page, "alice (console)"), strings.Index(page, "bob (console)")
	if i < 0 || j < 0 || i > j {
		t.Fatalf("the audit page does not list alice's forget, then bob's redrive:\n%s", page)
	}
	for _, want := range []string{`class="action">forget<`, `class="outcome">cleared<`, `class="action">redrive<`, `class="outcome">redriven<`, d.Key} {
		if !strings.Contains(page, want) {
			t.Errorf("the audit page has no %q", want)
		}
	}
	if p := aliceGet("/audit?by=bob"); strings.Contains(p, "alice (console)") || !strings.Contains(p, "bob (console)") {
		t.Errorf("/audit?by=bob lists someone else's changes, or not bob's")
	}
	story := aliceGet("/key?key=" + d.Key)
	if !strings.Contains(story, `id="story"`) || !strings.Contains(story, "redriven</b> by bob (console)") || !strings.Contains(story, "forgotten</b> by alice (console)") {
		t.Errorf("the key's story does not tell bob's redrive and alice's forget:\n%s", story)
	}
}

// TestBulkRedriveNeedsSignIn: a bulk redrive's preview and its start are
// changes: without a session, or with the session but not its CSRF token,
// or from another site, they are refused and nothing is saved or sent;
// signed in, the preview saves a job that sends nothing until confirmed.
func TestBulkRedriveNeedsSignIn(t *testing.T) {
	f := start(t)
	f.recv.set(false)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path string, v url.Values, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, f.base+path, strings.NewReader(v.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	jobs := func() int {
		r, err := f.app.Admin.Jobs(ctx, admin.JobsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Jobs)
	}
	if r := post("/redrive/preview", url.Values{"reason": {"permanent_effect"}}); r.StatusCode != http.StatusForbidden || jobs() != 0 {
		t.Errorf("a preview without a session = %d, %d jobs; want 403, none", r.StatusCode, jobs())
	}
	post("/login", url.Values{"token": {token}})
	resp, err := c.Get(f.base + "/dead")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := csrfRE.FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("signed in, the dead letters' page has no CSRF token")
	}
	if r := post("/redrive/preview", url.Values{"csrf": {"0000"}, "reason": {"permanent_effect"}}); r.StatusCode != http.StatusForbidden || jobs() != 0 {
		t.Errorf("a preview with a wrong CSRF token = %d, %d jobs; want 403, none", r.StatusCode, jobs())
	}
	if r := post("/redrive/preview", url.Values{"csrf": {m[1]}, "reason": {"permanent_effect"}}, "Sec-Fetch-Site", "cross-site"); r.StatusCode != http.StatusForbidden || jobs() != 0 {
		t.Errorf("a cross-site preview = %d, %d jobs; want 403, none", r.StatusCode, jobs())
	}
	r := post("/redrive/preview", url.Values{"csrf": {m[1]}, "reason": {"permanent_effect"}})
	if r.StatusCode != http.StatusSeeOther || jobs() != 1 {
		t.Fatalf("a preview signed in = %d, %d jobs; want 303, one", r.StatusCode, jobs())
	}
	id := strings.TrimPrefix(r.Header.Get("Location"), "/redrive/")
	c2 := &http.Client{CheckRedirect: c.CheckRedirect} // no session
	resp, err = c2.PostForm(f.base+"/redrive/"+id+"/start", url.Values{"csrf": {m[1]}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	j, err := f.app.Admin.Job(ctx, admin.JobRequest{ID: id})
	if resp.StatusCode != http.StatusForbidden || err != nil || j.State != admin.JobPreviewed || f.recv.count() != 0 {
		t.Errorf("a start without a session = %d; job %s, %v; %d effects; want 403, still previewed, none", resp.StatusCode, j.State, err, f.recv.count())
	}
}
