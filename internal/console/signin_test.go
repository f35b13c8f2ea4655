package console_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/console"
	"github.com/oncegate/oncegate/internal/logbuf"
	"github.com/oncegate/oncegate/internal/secretfile"
)

// noFollow is an HTTP client that returns redirects rather than
// following them.
var noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// browserResolve resolves a Location header as a browser's URL parser
// (WHATWG) does: ASCII tabs and newlines are removed and a backslash is
// taken for a slash, and the result is resolved against the console's
// origin, http://console.example/.
func browserResolve(loc string) (*url.URL, error) {
	loc = strings.Map(func(r rune) rune {
		switch r {
		case '\t', '\n', '\r':
			return -1
		case '\\':
			return '/'
		}
		return r
	}, loc)
	loc = strings.TrimFunc(loc, func(r rune) bool { return r <= ' ' })
	u, err := url.Parse(loc)
	if err != nil {
		return nil, err
	}
	base, _ := url.Parse("http://console.example/")
	return base.ResolveReference(u), nil
}

// TestSignInBackStaysOnSite: whatever back a sign-in carries, the
// redirect after it stays on the console's own host, as a browser reads
// it; a page of the console's is where it goes.
func TestSignInBackStaysOnSite(t *testing.T) {
	f := start(t)
	signIn := func(back string) *http.Response {
		t.Helper()
		// A round trip of its own: a client that follows (or checks)
		// redirects refuses a Location with a control character in it.
		req, _ := http.NewRequest(http.MethodPost, f.base+"/login", strings.NewReader(url.Values{"token": {token}, "back": {back}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Errorf("sign-in with back %q: %v", back, err)
			return nil
		}
		resp.Body.Close()
		return resp
	}
	for _, back := range []string{
		"/\t/evil.example", "/\n/evil.example", "/\r\n/evil.example", "/ /evil.example", " //evil.example",
		"//evil.example", "/\\evil.example", "\\\\evil.example", "/\\/evil.example", "https://evil.example/",
		"http:evil.example", "javascript:alert(1)", "/%09/evil.example", "/%2F/evil.example", "/%5C/evil.example",
		"/\x00/evil.example", "/\x7f/evil.example", "", "dead",
	} {
		resp := signIn(back)
		if resp == nil {
			continue
		}
		loc := resp.Header.Get("Location")
		u, err := browserResolve(loc)
		if resp.StatusCode != http.StatusSeeOther || err != nil || u.Host != "console.example" || u.Scheme != "http" ||
			strings.ContainsFunc(loc, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Errorf("sign-in with back %q = %d, Location %q: a browser goes to %v (%v); want this host", back, resp.StatusCode, loc, u, err)
		}
	}
	if resp := signIn("/dead/1?msg=x"); resp == nil || resp.Header.Get("Location") != "/dead/1?msg=x" {
		t.Errorf("sign-in with back /dead/1?msg=x: %v; want Location /dead/1?msg=x", resp)
	}
}

// clock is a settable time for a console (console.SetClock).
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// consoleOn returns a console on a's admin operations whose operators are
// tokens (a token file's content), logging to log, on clk's time.
func consoleOn(tb testing.TB, a *app.App, tokens string, log io.Writer, clk *clock) *console.Server {
	tb.Helper()
	ops, err := secretfile.Parse("tokens", []byte(tokens), secretfile.Options{LoneName: console.LoneOperator})
	if err != nil {
		tb.Fatal(err)
	}
	s, err := console.New(console.Options{API: a.Admin, Config: a.Config, Operators: ops, Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	if clk != nil {
		console.SetClock(s, clk.Now)
	}
	return s
}

// signInAt posts a sign-in with form to s's handler, from the client
// address from.
func signInAt(s *console.Server, from string, form url.Values) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = from
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	return w
}

// TestSignInBackOff: failed sign-ins are slowed per client address: after
// five, the next waits 1 s (answered 429 with Retry-After, whatever token
// it carries, and not counted), and each further failure doubles the
// wait; another address is not slowed, a success forgets the address's
// failures, and an hour with none does too. Each failure is logged with
// the address.
func TestSignInBackOff(t *testing.T) {
	f := start(t)
	var logs logbuf.Buffer
	clk := &clock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	s := consoleOn(t, f.app, token+"\n", &logs, clk)
	const mallory, alice = "203.0.113.7:40000", "198.51.100.1:50000"
	try := func(from, tok string, want int, retryAfter string) {
		t.Helper()
		w := signInAt(s, from, url.Values{"token": {tok}})
		if w.Code != want || w.Header().Get("Retry-After") != retryAfter {
			t.Fatalf("sign-in from %s at +%s = %d, Retry-After %q; want %d, %q", from, clk.Now().Sub(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)), w.Code, w.Header().Get("Retry-After"), want, retryAfter)
		}
	}
	for range 5 {
		try(mallory, "wrong-token-guess-0123456789", http.StatusForbidden, "")
	}
	try(mallory, token, http.StatusTooManyRequests, "1")
	try("203.0.113.7:40001", "wrong-token-guess-0123456789", http.StatusTooManyRequests, "1") // the same address, another port
	try(alice, token, http.StatusSeeOther, "")                                                // another address is not slowed
	clk.Add(time.Second)
	try(mallory, "wrong-token-guess-0123456789", http.StatusForbidden, "")
	try(mallory, "wrong-token-guess-0123456789", http.StatusTooManyRequests, "2")
	clk.Add(1500 * time.Millisecond)
	try(mallory, "wrong-token-guess-0123456789", http.StatusTooManyRequests, "1") // 0.5 s left: rounded up
	clk.Add(500 * time.Millisecond)
	try(mallory, "wrong-token-guess-0123456789", http.StatusForbidden, "")
	clk.Add(3 * time.Second)
	try(mallory, "wrong-token-guess-0123456789", http.StatusTooManyRequests, "1")
	clk.Add(time.Second)
	try(mallory, token, http.StatusSeeOther, "") // a success forgets the failures
	for range 5 {
		try(mallory, "wrong-token-guess-0123456789", http.StatusForbidden, "")
	}
	try(mallory, token, http.StatusTooManyRequests, "1")
	clk.Add(time.Hour + time.Second) // quiet: forgotten
	for range 5 {
		try(mallory, "wrong-token-guess-0123456789", http.StatusForbidden, "")
	}
	if l := logs.String(); strings.Count(l, "console sign-in refused") < 15 || !strings.Contains(l, "client="+mallory) {
		t.Errorf("the failed sign-ins were not logged with the client's address:\n%s", l)
	}
}

// TestSignInBackOffGlobal: a guesser spread over many addresses is slowed
// too: past 100 failures over all addresses, every sign-in waits, from a
// new address and with the right token, until Retry-After has passed.
func TestSignInBackOffGlobal(t *testing.T) {
	f := start(t)
	clk := &clock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	s := consoleOn(t, f.app, token+"\n", io.Discard, clk)
	for i := range 100 {
		from := fmt.Sprintf("[2001:db8:%x::1]:40000", i) // another /64 each
		if w := signInAt(s, from, url.Values{"token": {"wrong-token-guess-0123456789"}}); w.Code != http.StatusForbidden {
			t.Fatalf("failed sign-in %d = %d; want 403", i+1, w.Code)
		}
	}
	w := signInAt(s, "192.0.2.1:1234", url.Values{"token": {token}})
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("sign-in after 100 failures from 100 addresses = %d, Retry-After %q; want 429, 1", w.Code, w.Header().Get("Retry-After"))
	}
	clk.Add(time.Second)
	if w := signInAt(s, "192.0.2.1:1234", url.Values{"token": {token}}); w.Code != http.StatusSeeOther {
		t.Fatalf("sign-in once the wait passed = %d; want 303", w.Code)
	}
}

// consoleOnly is a configuration with a console and nothing to do;
// format takes the data directory and the console's block.
const consoleOnly = `
data_dir: %s
metrics: {listen: ""}
nats: {embedded: {listen: "127.0.0.1:0"}}
console: {listen: "127.0.0.1:0"%s}
pipelines:
  - name: orders
    subject: triggers.orders
    key: {fields: [/order]}
    effect: {sink: http, url: "http://127.0.0.1:1/"}
`

// startConsole starts a consumer whose console reads its tokens from a
// file of content tokens and mode (none if tokens is empty), and env as
// its environment; it returns Start's error.
func startConsole(t testing.TB, tokens string, mode os.FileMode, env map[string]string) (*app.App, error) {
	t.Helper()
	dir := t.TempDir()
	extra := ""
	if tokens != "" {
		tf := filepath.Join(dir, "tokens")
		if err := os.WriteFile(tf, []byte(tokens), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(tf, mode); err != nil {
			t.Fatal(err)
		}
		extra = ", token_file: " + tf
	}
	cfg, err := config.Parse(fmt.Appendf(nil, consoleOnly, filepath.Join(dir, "data"), extra), "test")
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.Start(ctx, cfg, app.Options{Getenv: func(k string) string { return env[k] }})
	if err == nil {
		t.Cleanup(func() { a.Close() })
	}
	return a, err
}

// TestConsoleTokenRules: the console's tokens are held to the proxy keys'
// rules: a token file its group or others may read is refused, and so is
// a token shorter than 20 bytes, from the file or the environment.
func TestConsoleTokenRules(t *testing.T) {
	for _, tt := range []struct {
		name   string
		tokens string
		mode   os.FileMode
		env    string
		want   string // in the error
	}{
		{"group-readable file", token + "\n", 0o640, "", "chmod 600"},
		{"world-readable file", token + "\n", 0o644, "", "chmod 600"},
		{"short token in the file", "short-token-19bytes\n", 0o600, "", "20"},
		{"short named token", "alice short-token-19bytes\n", 0o600, "", "20"},
		{"short token in the environment", "", 0, "short-token-19bytes", "20"},
		{"a name twice", "alice " + token + "-a\nalice " + token + "-b\n", 0o600, "", "twice"},
		{"a token twice", "alice " + token + "\nbob " + token + "\n", 0o600, "", "also"},
		{"a lone token among named ones", token + "-a\nbob " + token + "-b\n", 0o600, "", "name"},
		{"a bad name", "Alice! " + token + "\n", 0o600, "", "name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := startConsole(t, tt.tokens, tt.mode, map[string]string{config.EnvConsoleToken: tt.env})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Start = %v; want refused, saying %q", err, tt.want)
			}
			if err != nil && (strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "short-token")) {
				t.Errorf("Start = %v: the error shows the token", err)
			}
		})
	}
}

// TestConsoleOperatorByName: with a token per operator (a "name token"
// file), the operator who signed in is who every change is by: bob's
// redrive is marked by bob, and his forget is recorded as his.
func TestConsoleOperatorByName(t *testing.T) {
	const alice, bob = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef"
	f := startTokens(t, "# one line per operator\nalice "+alice+"\n\nbob   "+bob+"\n")
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: noFollow.CheckRedirect}
	post := func(path string, form url.Values) *http.Response {
		t.Helper()
		resp, err := c.PostForm(f.base+path, form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := post("/login", url.Values{"token": {bob}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("bob's sign-in = %d; want 303", resp.StatusCode)
	}
	resp, err := c.Get(f.base + "/dead/1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := csrfRE.FindSubmatch(body)
	if m == nil {
		t.Fatalf("signed in, /dead/1 has no CSRF token")
	}
	csrf := string(m[1])
	if resp := post("/dead/1/redrive", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("redrive = %d; want 303", resp.StatusCode)
	}
	d, err := f.app.Admin.Dead(ctx, admin.Selection{})
	if err != nil || len(d.Letters) == 0 || d.Letters[0].Redriven == nil || !strings.HasPrefix(d.Letters[0].Redriven.By, "bob ") {
		t.Fatalf("after bob's redrive: %+v, %v; want the mark by bob", d, err)
	}
	// The receiver is still broken: the redriven trigger fails again.
	key := d.Letters[0].Key
	waitFor(t, "the redriven trigger failed again", func() bool {
		r, err := f.app.Admin.Record(ctx, admin.RecordRequest{Key: key})
		return err == nil && r.Record != nil && r.Record.State == "failed"
	})
	if resp := post("/forget", url.Values{"csrf": {csrf}, "key": {key}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("forget = %d; want 303", resp.StatusCode)
	}
	r, err := f.app.Admin.Record(ctx, admin.RecordRequest{Key: key})
	if err != nil || r.Record == nil || r.Record.State != "cleared" || !strings.Contains(r.Record.Reason, "by bob ") {
		t.Fatalf("after bob's forget: %+v, %v; want cleared, by bob", r.Record, err)
	}
}

// TestConsoleOperatorSources: the operators come from console.token_file
// if it is set, else from ONCEGATE_CONSOLE_TOKEN; either may hold one
// token alone (its operator is console.LoneOperator) or "name token"
// lines; the page names who signed in.
func TestConsoleOperatorSources(t *testing.T) {
	const tokA, tokB = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef"
	for _, tt := range []struct {
		name string
		file string
		env  string
		tok  string
		want string // the operator; empty: refused
	}{
		{"lone token in the environment", "", tokA, tokA, console.LoneOperator},
		{"named tokens in the environment", "", "alice " + tokA + "\nbob " + tokB, tokB, "bob"},
		{"lone token in the file", tokA + "\n", "", tokA, console.LoneOperator},
		{"the file over the environment", "alice " + tokA + "\n", "bob " + tokB, tokA, "alice"},
		{"the environment's token unused beside a file", "alice " + tokA + "\n", "bob " + tokB, tokB, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := startConsole(t, tt.file, 0o600, map[string]string{config.EnvConsoleToken: tt.env})
			if err != nil {
				t.Fatal(err)
			}
			jar, _ := cookiejar.New(nil)
			c := &http.Client{Jar: jar}
			resp, err := c.PostForm("http://"+a.ConsoleAddr+"/login", url.Values{"token": {tt.tok}, "back": {"/pending"}})
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case tt.want == "" && resp.StatusCode != http.StatusForbidden:
				t.Errorf("sign-in = %d; want 403", resp.StatusCode)
			case tt.want != "" && (resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `<span id="operator">`+tt.want+`</span>`)):
				t.Errorf("sign-in = %d; want the Pending page, signed in as %s:\n%s", resp.StatusCode, tt.want, body)
			}
		})
	}
}
