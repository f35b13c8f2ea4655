package sink

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/template"

	"github.com/oncegate/oncegate/internal/tmpl"
)

// Presets name request shapes of the tools people work in, so that an
// effect names one instead of writing a body template. Each preset's body
// is built from fields (PresetFields), each a template with a default that
// any effect can override one by one; a Body template replaces the whole.
const (
	// PresetWebhook is Oncegate's own envelope, what an effect without a
	// body sends from a pipeline with a model step:
	// {"key","pipeline","step","model","answer","trigger"}.
	PresetWebhook = "webhook"
	// PresetSlack is a Slack incoming-webhook message: "text" (the
	// fallback and notification text) and blocks (a section with the text,
	// a context line with the link). Incoming webhooks honour no
	// idempotency key and return no message id: the effect is one-shot,
	// and a resolve note cannot be threaded under the firing's message.
	//
	// The text field's template prints every value it prints escaped for
	// Slack's mrkdwn (& < > as &amp; &lt; &gt;: tmpl.EscapeActions with
	// mrkdwn), and is cut to 3000 bytes (the section's limit) outside an
	// entity: a trigger or an answer cannot mention @channel or a user, or
	// add a link, while the markup the template's author wrote stays. The
	// link is a link only when it is an http or https URL (slackLink).
	PresetSlack = "slack"
	// PresetPagerDuty is a PagerDuty Events API v2 alert event:
	// event_action trigger or resolve (by the trigger's status), dedup_key
	// (the alert's identity, which a firing and its resolve share, so the
	// resolve closes the incident the firing opened), and for a trigger a
	// payload with summary (≤1024 bytes), source and severity (one of
	// critical, error, warning, info). The routing key is added when the
	// request is sent (HTTPOptions.BodyFields), never rendered or stored.
	PresetPagerDuty = "pagerduty"
	// PresetJira is a Jira Cloud REST v3 create-issue request: project
	// key, issue type, summary (≤255 bytes) and a description in Atlassian
	// Document Format. Jira honours no idempotency key: one-shot.
	PresetJira = "jira"
)

// Presets lists the presets.
var Presets = []string{PresetWebhook, PresetSlack, PresetPagerDuty, PresetJira}

// PagerDutyURL is the Events API v2 endpoint, the pagerduty preset's
// default URL.
const PagerDutyURL = "https://events.pagerduty.com/v2/enqueue"

// PresetFields are the parts of a preset's body, each a template over the
// data value of package tmpl. An empty field takes the preset's default;
// the defaults are listed by [PresetDefaults].
type PresetFields struct {
	Text        string // slack: the message; jira: the description
	Summary     string // pagerduty: payload.summary; jira: summary
	Link        string // slack, pagerduty: a link back (a runbook, the alert's source)
	EventAction string // pagerduty: trigger, acknowledge or resolve
	DedupKey    string // pagerduty: the alert's identity
	Severity    string // pagerduty: critical, error, warning or info
	Source      string // pagerduty: payload.source
	Project     string // jira: the project key
	IssueType   string // jira: the issue type's name
}

func (f PresetFields) byName() map[string]string {
	return map[string]string{
		"text": f.Text, "summary": f.Summary, "link": f.Link, "event_action": f.EventAction,
		"dedup_key": f.DedupKey, "severity": f.Severity, "source": f.Source,
		"project": f.Project, "issue_type": f.IssueType,
	}
}

// presets holds each preset's fields (with their defaults) and body. The
// body reads the rendered fields as .preset.Text, .preset.Summary and so
// on, each rendered when the body first reads it: a resolve's PagerDuty
// body has no summary, so a summary template that reads the answer (which
// a resolve does not have) is not run for it.
var presets = map[string]struct {
	fields map[string]string
	body   string
	mrkdwn []string // the fields whose values are escaped for Slack, and cut to slackTextBytes
}{
	PresetWebhook: {
		body: `{"key":{{quote .key}},"pipeline":{{quote .pipeline}},"step":{{quote .step}},"model":{{quote .model}},"answer":{{quote .answer_text}},"trigger":{{toJSON .trigger}}}`,
	},
	PresetSlack: {
		fields: map[string]string{
			"text": `{{if eq .status "resolved"}}Resolved: {{end}}{{if .answer_text}}{{.answer_text}}{{else}}{{.pipeline}} {{.identity}}{{end}}`,
			"link": ``,
		},
		body: `{"text":{{quote .preset.Text}},"blocks":[{"type":"section","text":{"type":"mrkdwn","text":{{quote .preset.Text}}}}` +
			`{{if .preset.Link}},{"type":"context","elements":[{"type":"mrkdwn","text":{{quote (slackLink .preset.Link "details")}}}]}{{end}}]}`,
		mrkdwn: []string{"text"},
	},
	PresetPagerDuty: {
		fields: map[string]string{
			"event_action": `{{if eq .status "resolved"}}resolve{{else}}trigger{{end}}`,
			"dedup_key":    `{{.identity}}`,
			"summary":      `{{if .answer_text}}{{.answer_text}}{{else}}{{.pipeline}} {{.identity}}{{end}}`,
			"severity":     `{{severity (get .trigger "alert" "labels" "severity")}}`,
			"source":       `oncegate/{{.pipeline}}`,
			"link":         ``,
		},
		body: `{"event_action":{{quote .preset.EventAction}},"dedup_key":{{quote (truncate 255 .preset.DedupKey)}},"client":"Oncegate"` +
			`{{if ne .preset.EventAction "resolve"}},"payload":{"summary":{{quote (truncate 1024 .preset.Summary)}},"source":{{quote .preset.Source}},"severity":{{quote (severity .preset.Severity)}},"custom_details":{"key":{{quote .key}},"answer":{{quote .answer_text}}}}` +
			`{{if .preset.Link}},"links":[{"href":{{quote .preset.Link}},"text":"details"}]{{end}}{{end}}}`,
	},
	PresetJira: {
		fields: map[string]string{
			"project":    ``,
			"issue_type": `Task`,
			"summary":    `{{.pipeline}}: {{.identity}}`,
			"text":       `{{if .answer_text}}{{.answer_text}}{{else}}{{toJSON .trigger}}{{end}}`,
		},
		body: `{"fields":{"project":{"key":{{quote .preset.Project}}},"issuetype":{"name":{{quote .preset.IssueType}}},"summary":{{quote (truncate 255 .preset.Summary)}},"description":{{adf .preset.Text}},"labels":["oncegate"]}}`,
	},
}

// slackTextBytes bounds a mrkdwn field: a Slack section's text is at most
// 3000 characters.
const slackTextBytes = 3000

// PresetDefaults returns the default field templates of a preset, by field
// name (text, summary, link, event_action, dedup_key, severity, source,
// project, issue_type); nil for an unknown preset.
func PresetDefaults(preset string) map[string]string {
	p, ok := presets[preset]
	if !ok {
		return nil
	}
	return maps.Clone(p.fields)
}

// PresetUses reports whether preset has the field (a field another preset
// has is an error when set).
func PresetUses(preset, field string) bool {
	_, ok := presets[preset].fields[field]
	return ok
}

// TemplateOptions are the templates of an effect.
type TemplateOptions struct {
	// Name names the effect in errors, as the configuration does:
	// "pipelines[alerts].effects[slack]".
	Name string
	// Preset is one of Presets, or empty for none.
	Preset string
	// Body is the body template; it replaces the preset's. Empty with no
	// preset means the effect carries no template (the consumer sends its
	// default body).
	Body string
	// Fields override the preset's fields.
	Fields PresetFields
	// SubjectSuffix is a template for a JetStream effect: the rendered
	// text, one or more subject tokens, is appended to the subject after a
	// dot. Empty means none.
	SubjectSuffix string
	// JSON says the body must render to JSON. The default, for a preset
	// or an HTTP effect whose Content-Type is JSON, is set by the caller.
	JSON bool
}

// Template is an effect's compiled templates. It is safe for concurrent
// use.
type Template struct {
	name   string
	body   *template.Template
	fields map[string]*template.Template
	mrkdwn map[string]bool // fields escaped for Slack
	suffix *template.Template
	out    tmpl.Output
}

// NewTemplate compiles the templates of o; an error names the template and
// wraps [tmpl.ErrTemplate], or says the preset or a field is unknown.
func NewTemplate(o TemplateOptions) (*Template, error) {
	t := &Template{name: o.Name, fields: map[string]*template.Template{}, mrkdwn: map[string]bool{}}
	if o.JSON || o.Preset != "" {
		t.out = tmpl.JSON
	}
	body := o.Body
	if o.Preset != "" {
		p, ok := presets[o.Preset]
		if !ok {
			return nil, fmt.Errorf("sink: %s: unknown preset %q (want one of %s)", o.Name, o.Preset, strings.Join(Presets, ", "))
		}
		given := o.Fields.byName()
		for _, f := range slices.Sorted(maps.Keys(given)) {
			text, def := given[f], p.fields[f]
			if _, ok := p.fields[f]; !ok {
				if text != "" {
					return nil, fmt.Errorf("sink: %s: preset %s has no field %s", o.Name, o.Preset, f)
				}
				continue
			}
			if text == "" {
				text = def
			}
			ft, err := tmpl.Parse(o.Name+"."+f, text)
			if err != nil {
				return nil, err
			}
			if slices.Contains(p.mrkdwn, f) {
				tmpl.EscapeActions(ft, "mrkdwn")
				t.mrkdwn[f] = true
			}
			t.fields[f] = ft
		}
		if body == "" {
			body = p.body
		}
	} else if o.Fields != (PresetFields{}) {
		return nil, fmt.Errorf("sink: %s: preset fields without a preset", o.Name)
	}
	if body != "" {
		b, err := tmpl.Parse(o.Name+".body", body)
		if err != nil {
			return nil, err
		}
		t.body = b
	}
	if o.SubjectSuffix != "" {
		s, err := tmpl.Parse(o.Name+".subject_suffix", o.SubjectSuffix)
		if err != nil {
			return nil, err
		}
		t.suffix = s
	}
	return t, nil
}

// HasBody reports whether the effect renders its body (else the consumer
// sends its default body).
func (t *Template) HasBody() bool { return t.body != nil }

// Render renders the effect's body (nil without a body template) and
// subject suffix for data, the value [tmpl.Input.Data] returns; it does not
// change data. The error, an [*tmpl.Error], names the template; nothing
// is returned with it.
func (t *Template) Render(data map[string]any) (body []byte, suffix string, err error) {
	d := data
	if len(t.fields) > 0 {
		d = maps.Clone(data)
		d["preset"] = &fieldValues{t: t, data: data, done: map[string]string{}}
	}
	if t.body != nil {
		if body, err = tmpl.Execute(t.body, "", d, t.out); err != nil {
			return nil, "", err
		}
	}
	if t.suffix != nil {
		b, err := tmpl.Execute(t.suffix, "", d, tmpl.Text)
		if err != nil {
			return nil, "", err
		}
		suffix = strings.TrimSpace(string(b))
		if err := checkSubject(suffix); err != nil {
			return nil, "", &tmpl.Error{Name: t.name + ".subject_suffix", Err: fmt.Errorf("%q is not subject tokens: %w", suffix, err)}
		}
	}
	return body, suffix, nil
}

// fieldValues renders a preset's fields for one Render, each when the body
// first reads it; a field of another preset reads as "".
type fieldValues struct {
	t    *Template
	data map[string]any
	done map[string]string
}

func (f *fieldValues) get(name string) (string, error) {
	if v, ok := f.done[name]; ok {
		return v, nil
	}
	ft, ok := f.t.fields[name]
	if !ok {
		return "", nil
	}
	b, err := tmpl.Execute(ft, "", f.data, tmpl.Text)
	if err != nil {
		return "", err
	}
	v := string(b)
	if f.t.mrkdwn[name] {
		v = tmpl.TruncateMrkdwn(slackTextBytes, v)
	}
	f.done[name] = v
	return v, nil
}

// The fields, as the preset bodies read them.
func (f *fieldValues) Text() (string, error)        { return f.get("text") }
func (f *fieldValues) Summary() (string, error)     { return f.get("summary") }
func (f *fieldValues) Link() (string, error)        { return f.get("link") }
func (f *fieldValues) EventAction() (string, error) { return f.get("event_action") }
func (f *fieldValues) DedupKey() (string, error)    { return f.get("dedup_key") }
func (f *fieldValues) Severity() (string, error)    { return f.get("severity") }
func (f *fieldValues) Source() (string, error)      { return f.get("source") }
func (f *fieldValues) Project() (string, error)     { return f.get("project") }
func (f *fieldValues) IssueType() (string, error)   { return f.get("issue_type") }
