package sink_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/internal/tmpl"
)

// fuzzFields read the hostile values into every field a preset renders
// (the presets' defaults read the answer, the identity, the pipeline and
// the status, which hold them too).
var fuzzFields = []sink.PresetFields{
	{},
	{
		Text:        `{{.trigger.alert.labels.alertname}} on {{.trigger.alert.labels.instance}}: {{.answer.summary}} {{.answer_text}}`,
		Summary:     `{{.trigger.alert.annotations.summary}} {{.answer.summary}}`,
		Link:        `{{.trigger.alert.generatorURL}}`,
		EventAction: `{{if eq .status "resolved"}}resolve{{else}}trigger{{end}}`,
		DedupKey:    `{{.identity}}{{.trigger.alert.labels.alertname}}`,
		Severity:    `{{.answer.severity}}`,
		Source:      `{{.trigger.alert.labels.instance}}`,
		Project:     `{{.trigger.alert.labels.alertname}}`,
		IssueType:   `{{.answer.summary}}`,
	},
}

// entity is an escaped character of Slack's mrkdwn.
var entity = regexp.MustCompile(`&(amp|lt|gt);`)

// slackLinkRE is a link the slack preset makes: an http(s) URL with no
// character that could end it or open another.
var slackLinkRE = regexp.MustCompile(`^<(?i:https?)://[^<>|\s]+\|details>$`)

// FuzzRender: whatever the trigger and the model's answer hold (quotes,
// backslashes, control characters, invalid UTF-8, <!channel>, | and >,
// strings of up to 8 KiB, past every preset's limits), every preset renders a body that is JSON, with the
// defaults and with fields that read the hostile values; and a Slack
// message's text has no <, > or & from the data but as &lt; &gt; &amp;,
// and its link is either a link that cannot end early or escaped text:
// no mention, no link injected.
func FuzzRender(f *testing.F) {
	f.Add("<!channel> & <@U024BE7LH>", "https://evil.example/|<!here>", "\"quoted\\\" \x00\x1f\n", uint16(1), uint8(0))
	f.Add("\xff\xfe invalid", "javascript:alert(1)>", "&amp;&lt;", uint16(3000), uint8(1))
	f.Add("<https://evil.example|click>", "https://ok.example/a b>c", "résolu ✓", uint16(40), uint8(2))
	f.Add("&", "", "resolved", uint16(0), uint8(3))
	f.Fuzz(func(t *testing.T, a, b, c string, repeat uint16, which uint8) {
		if len(a) > 0 {
			a = strings.Repeat(a, min(int(repeat)%4000+1, (8<<10)/len(a)+1))
		}
		status := []string{"firing", "resolved", c}[int(which)%3]
		trig := map[string]any{"status": status, "alert": map[string]any{
			"labels":       map[string]any{"alertname": a, "instance": b, "severity": c},
			"annotations":  map[string]any{"summary": c + a},
			"generatorURL": b,
		}}
		in := tmpl.Input{Trigger: trig, Key: c, Identity: b, Status: status, Pipeline: c, Step: b,
			Answer: &tmpl.Answer{Text: a, Fields: map[string]any{"severity": c, "summary": b + a}, Model: c}}
		for _, preset := range sink.Presets {
			for i, fields := range fuzzFields {
				if preset == sink.PresetWebhook && i > 0 {
					continue
				}
				for name, v := range map[string]string{"text": fields.Text, "summary": fields.Summary, "link": fields.Link,
					"event_action": fields.EventAction, "dedup_key": fields.DedupKey, "severity": fields.Severity,
					"source": fields.Source, "project": fields.Project, "issue_type": fields.IssueType} {
					if v != "" && !sink.PresetUses(preset, name) {
						fields = clearField(fields, name)
					}
				}
				tp, err := sink.NewTemplate(sink.TemplateOptions{Name: "e", Preset: preset, Fields: fields})
				if err != nil {
					t.Fatalf("NewTemplate(%s, %d): %v", preset, i, err)
				}
				body, _, err := tp.Render(in.Data())
				if err != nil || !json.Valid(body) {
					t.Fatalf("Render(%s, fields %d) = %q, %v; want JSON", preset, i, body, err)
				}
				if preset == sink.PresetSlack {
					checkSlack(t, body)
				}
			}
		}
	})
}

func checkSlack(t *testing.T, body []byte) {
	t.Helper()
	var m slackMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("slack body %q: %v", body, err)
	}
	for _, text := range []string{m.Text, m.Blocks[0].Text.Text} {
		if rest := entity.ReplaceAllString(text, ""); strings.ContainsAny(rest, "<>&") {
			t.Fatalf("slack text %q has a raw < > or &", text)
		}
	}
	link := m.context()
	if slackLinkRE.MatchString(link) {
		link = strings.TrimSuffix(link[1:], "|details>")
	}
	if rest := entity.ReplaceAllString(link, ""); strings.ContainsAny(rest, "<>&") {
		t.Fatalf("slack context %q is neither a safe link nor escaped text", m.context())
	}
}

// clearField returns f without the field name.
func clearField(f sink.PresetFields, name string) sink.PresetFields {
	switch name {
	case "text":
		f.Text = ""
	case "summary":
		f.Summary = ""
	case "link":
		f.Link = ""
	case "event_action":
		f.EventAction = ""
	case "dedup_key":
		f.DedupKey = ""
	case "severity":
		f.Severity = ""
	case "source":
		f.Source = ""
	case "project":
		f.Project = ""
	case "issue_type":
		f.IssueType = ""
	}
	return f
}
