package sink_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/internal/tmpl"
)

// slackMessage is what the slack preset renders: the text, the section's
// and the context's.
type slackMessage struct {
	Text   string
	Blocks []struct {
		Type     string
		Text     struct{ Type, Text string }
		Elements []struct{ Type, Text string }
	}
}

func (m slackMessage) context() string {
	for _, b := range m.Blocks {
		if b.Type == "context" && len(b.Elements) > 0 {
			return b.Elements[0].Text
		}
	}
	return ""
}

func renderSlack(t *testing.T, f sink.PresetFields, trigger string, answer *tmpl.Answer) slackMessage {
	t.Helper()
	trig, err := tmpl.DecodeJSON([]byte(trigger))
	if err != nil {
		t.Fatal(err)
	}
	body := render(t, sink.TemplateOptions{Name: "effects[slack]", Preset: sink.PresetSlack, Fields: f},
		tmpl.Input{Trigger: trig, Key: key1, Identity: "i1", Status: "firing", Pipeline: "alerts", Answer: answer}.Data())
	var m slackMessage
	if err := json.Unmarshal(body, &m); err != nil || len(m.Blocks) == 0 {
		t.Fatalf("slack body %s: %v; want a message with blocks", body, err)
	}
	if m.Blocks[0].Text.Text != m.Text {
		t.Fatalf("section text %q; want the text %q", m.Blocks[0].Text.Text, m.Text)
	}
	return m
}

// TestSlackEscapesData: what the trigger or the model's answer puts in a
// Slack message is escaped as Slack asks (& < > as &amp; &lt; &gt;): it
// cannot mention @channel or a user, nor add or rewrite a link, while the
// markup the operator wrote in the text template stays.
func TestSlackEscapesData(t *testing.T) {
	const hostile = `<!channel> disk & <@U024BE7LH> <https://evil.example|click>`
	const escaped = `&lt;!channel&gt; disk &amp; &lt;@U024BE7LH&gt; &lt;https://evil.example|click&gt;`
	for _, tt := range []struct {
		name    string
		fields  sink.PresetFields
		trigger string
		answer  *tmpl.Answer
		want    string
	}{
		{"the answer, in the default text", sink.PresetFields{}, `{}`, &tmpl.Answer{Text: hostile}, escaped},
		{"the trigger, in the operator's text", sink.PresetFields{Text: `<!here> *{{.trigger.alert.labels.alertname}}* on {{get .trigger "alert" "labels" "instance" | default "?"}}`},
			`{"alert":{"labels":{"alertname":"x* <!channel> &lt;","instance":"db>1"}}}`, nil,
			`<!here> *x* &lt;!channel&gt; &amp;lt;* on db&gt;1`},
		{"escaped once", sink.PresetFields{Text: `{{.trigger.a | mrkdwn}} {{mrkdwn .trigger.a}}`}, `{"a":"<&>"}`, nil, `&lt;&amp;&gt; &lt;&amp;&gt;`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if m := renderSlack(t, tt.fields, tt.trigger, tt.answer); m.Text != tt.want {
				t.Errorf("text %q; want %q", m.Text, tt.want)
			}
		})
	}
}

// TestSlackLinkCannotInject: the link field, read from the trigger, is
// a link only when it is an http or https URL, with & < > | and spaces
// encoded so that it cannot close the link, name its text, or add a
// mention; anything else is shown as text.
func TestSlackLinkCannotInject(t *testing.T) {
	for _, tt := range []struct{ link, want string }{
		{`https://prometheus.example/graph?g0.expr=up&g0.tab=1`, `<https://prometheus.example/graph?g0.expr=up&amp;g0.tab=1|details>`},
		{`https://evil.example/|<!channel>`, `<https://evil.example/%7C%3C!channel%3E|details>`},
		{`https://evil.example/>x <@U024BE7LH>`, `<https://evil.example/%3Ex%20%3C@U024BE7LH%3E|details>`},
		{`!channel`, `details: !channel`},
		{`javascript:alert(1)`, `details: javascript:alert(1)`},
		{`<!everyone>`, `details: &lt;!everyone&gt;`},
	} {
		link, _ := json.Marshal(tt.link)
		m := renderSlack(t, sink.PresetFields{Link: `{{.trigger.link}}`}, `{"link":`+string(link)+`}`, nil)
		if got := m.context(); got != tt.want {
			t.Errorf("link %q: context %q; want %q", tt.link, got, tt.want)
		}
	}
}

// TestSlackTextCutWhole: the escaped text is cut to Slack's 3000 and
// never in the middle of an entity (which would leave a bare &).
func TestSlackTextCutWhole(t *testing.T) {
	m := renderSlack(t, sink.PresetFields{}, `{}`, &tmpl.Answer{Text: strings.Repeat("<", 1000)})
	if len(m.Text) > 3000 || !strings.HasSuffix(m.Text, "&lt;…") || strings.Count(m.Text, "&") != strings.Count(m.Text, "&lt;") {
		t.Errorf("text of %d bytes ending %q; want at most 3000, whole entities, and …", len(m.Text), m.Text[max(len(m.Text)-12, 0):])
	}
}
