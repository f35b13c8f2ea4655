package tmpl_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/oncegate/oncegate/internal/tmpl"
)

func data(t *testing.T) map[string]any {
	t.Helper()
	trig, err := tmpl.DecodeJSON([]byte(`{"alert":{"labels":{"alertname":"Disk\"Full","severity":"critical"},"value":0.93},"tags":["a","b"],"note":"héllo wörld"}`))
	if err != nil {
		t.Fatal(err)
	}
	return tmpl.Input{Trigger: trig, Key: "k1", Identity: "i1", Status: "firing", Pipeline: "alerts",
		Answer: &tmpl.Answer{Text: `{"severity":"high"}`, Fields: map[string]any{"severity": "high"}}}.Data()
}

func TestExecute(t *testing.T) {
	for _, tt := range []struct {
		name, text string
		out        tmpl.Output
		want       string
		wantErr    string
	}{
		{"field", `{{.trigger.alert.labels.alertname}}`, tmpl.Text, `Disk"Full`, ""},
		{"quote", `{"a":{{quote .trigger.alert.labels.alertname}}}`, tmpl.JSON, `{"a":"Disk\"Full"}`, ""},
		{"toJSON", `{{toJSON .trigger.tags}}`, tmpl.JSON, `["a","b"]`, ""},
		{"number", `{{.trigger.alert.value}}`, tmpl.Text, `0.93`, ""},
		{"answer fields", `{{.answer.severity}} {{.status}} {{.identity}}`, tmpl.Text, `high firing i1`, ""},
		{"join", `{{join "," .trigger.tags}}`, tmpl.Text, `a,b`, ""},
		{"default missing", `{{get .trigger "alert" "labels" "team" | default "none"}}`, tmpl.Text, `none`, ""},
		{"default present", `{{get .trigger "alert" "labels" "severity" | default "none"}}`, tmpl.Text, `critical`, ""},
		{"truncate rune", `{{truncate 8 .trigger.note}}`, tmpl.Text, "héll…", ""},
		{"missing key", `{{.trigger.alert.labels.team}}`, tmpl.Text, "", `map has no entry for key "team"`},
		{"typo top", `{{.triger}}`, tmpl.Text, "", `map has no entry for key "triger"`},
		{"not JSON", `{"a":{{.trigger.alert.labels.alertname}}}`, tmpl.JSON, "", "the output is not JSON"},
		{"adf", `{{adf "one\ntwo\n\nthree"}}`, tmpl.JSON, `{"type":"doc","version":1,"content":[{"type":"paragraph","content":[{"type":"text","text":"one"},{"type":"hardBreak"},{"type":"text","text":"two"}]},{"type":"paragraph","content":[{"type":"text","text":"three"}]}]}`, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tp, err := tmpl.Parse("body", tt.text)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.text, err)
			}
			got, err := tmpl.Execute(tp, "", data(t), tt.out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, tmpl.ErrTemplate) || got != nil {
					t.Fatalf("Execute(%q) = %q, %v; want no output and an error with %q", tt.text, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("Execute(%q) = %q, %v; want %q", tt.text, got, err, tt.want)
			}
		})
	}
}

func TestParseError(t *testing.T) {
	_, err := tmpl.Parse("effects[slack].body", `{{.trigger`)
	var te *tmpl.Error
	if !errors.As(err, &te) || te.Name != "effects[slack].body" {
		t.Fatalf("Parse = %v; want a *tmpl.Error naming the template", err)
	}
}

func TestTruncate(t *testing.T) {
	s := strings.Repeat("é", 700) // 1400 bytes
	tp, _ := tmpl.Parse("t", `{{truncate 1024 .}}`)
	got, err := tmpl.Execute(tp, "", s, tmpl.Text)
	if err != nil || len(got) > 1024 || !utf8.Valid(got) || !strings.HasSuffix(string(got), "…") {
		t.Fatalf("truncate 1024 of 1400 bytes = %d bytes (valid %v), %v; want ≤1024 valid bytes ending in …", len(got), utf8.Valid(got), err)
	}
	var v any
	tq, _ := tmpl.Parse("t", `{{quote (truncate 1024 .)}}`)
	out, _ := tmpl.Execute(tq, "", s, tmpl.JSON)
	if json.Unmarshal(out, &v) != nil {
		t.Fatalf("quote(truncate) = %q; not JSON", out)
	}
}

func FuzzSnippet(f *testing.F) {
	f.Add([]byte("invalid_payload"), 20)
	f.Add([]byte("\xff\xfe\n\tabc"), 3)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 0 || n > 4096 {
			return
		}
		s := tmpl.Snippet(b, n)
		if len(s) > n || !utf8.ValidString(s) || strings.ContainsAny(s, "\n\r\t") {
			t.Fatalf("Snippet(%q, %d) = %q", b, n, s)
		}
	})
}

// TestMrkdwn: mrkdwn escapes &, < and > and nothing else; slackLink makes
// a link of an http or https URL only, that cannot end early; and
// TruncateMrkdwn never leaves half an entity.
func TestMrkdwn(t *testing.T) {
	for _, tt := range []struct{ text, want string }{
		{`{{mrkdwn "<!channel> & <@U1|x> *b* _i_ :ok:"}}`, `&lt;!channel&gt; &amp; &lt;@U1|x&gt; *b* _i_ :ok:`},
		{`{{slackLink "https://a.example/p?q=1&r=<2>|x y" "see >"}}`, `<https://a.example/p?q=1&amp;r=%3C2%3E%7Cx%20y|see &gt;>`},
		{`{{slackLink "HTTPS://a.example" "x"}}`, `<HTTPS://a.example|x>`},
		{`{{slackLink "mailto:a@b.example" "x"}}`, `x: mailto:a@b.example`},
		{`{{slackLink "https:///nohost" "x"}}`, `x: https:///nohost`},
		{`{{slackLink "<!here>" "x"}}`, `x: &lt;!here&gt;`},
	} {
		tp, err := tmpl.Parse("t", tt.text)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := tmpl.Execute(tp, "", nil, tmpl.Text); err != nil || string(got) != tt.want {
			t.Errorf("%s = %q, %v; want %q", tt.text, got, err, tt.want)
		}
	}
	for _, tt := range []struct {
		n       int
		s, want string
	}{
		{10, "abc", "abc"},
		{10, "&lt;&lt;&lt;", "&lt;…"},
		{9, "&lt;&lt;&lt;", "&lt;…"},
		{11, "&lt;&lt;&lt;", "&lt;&lt;…"},
		{8, "ab&amp;cdef", "ab…"},
		{9, "abc&amp;d", "abc&amp;d"},
		{8, "héllo&amp;", "héll…"},
		{10, "héllo&amp;", "héllo…"},
	} {
		if got := tmpl.TruncateMrkdwn(tt.n, tt.s); got != tt.want || len(got) > tt.n {
			t.Errorf("TruncateMrkdwn(%d, %q) = %q; want %q", tt.n, tt.s, got, tt.want)
		}
	}
}

// TestEscapeActions: every action that prints, in every branch and
// associated template, prints through the escaper; text, declarations
// and actions already escaped are left alone.
func TestEscapeActions(t *testing.T) {
	tp, err := tmpl.Parse("t", `<!here> {{.a}} {{$x := .a}}{{$x}} {{if .a}}{{.a}}{{else}}-{{end}} `+
		`{{range .l}}{{.}}{{end}} {{with .a}}{{.}}{{end}} {{template "u" .}} {{.a | mrkdwn}}{{define "u"}}<{{.a}}>{{end}}`)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.EscapeActions(tp, "mrkdwn")
	got, err := tmpl.Execute(tp, "", map[string]any{"a": "<&>", "l": []string{"<", ">"}}, tmpl.Text)
	const want = `<!here> &lt;&amp;&gt; &lt;&amp;&gt; &lt;&amp;&gt; &lt;&gt; &lt;&amp;&gt; <&lt;&amp;&gt;> &lt;&amp;&gt;`
	if err != nil || string(got) != want {
		t.Errorf("escaped = %q, %v; want %q", got, err, want)
	}
}
