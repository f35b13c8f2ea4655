package config

import "time"

// Effect presets; see Effect.Preset.
const (
	PresetWebhook   = "webhook"
	PresetSlack     = "slack"
	PresetPagerDuty = "pagerduty"
	PresetJira      = "jira"
)

// PagerDutyURL is the pagerduty preset's default URL, the Events API v2.
const PagerDutyURL = "https://events.pagerduty.com/v2/enqueue"

// JiraIssuePath is what the jira preset adds to its URL, the site.
const JiraIssuePath = "/rest/api/3/issue"

// PresetQuotas are the receivers' quotas, the presets' default
// Effect.RateLimit: PagerDuty's Events API takes about 120 events a
// minute per routing key, a Slack incoming webhook about a message a
// second, in short bursts (here 20 in any 20s); each drops what comes past
// that with a 429.
var PresetQuotas = map[string]EffectRateLimit{
	PresetPagerDuty: {Requests: 120, Per: time.Minute},
	PresetSlack:     {Requests: 20, Per: 20 * time.Second},
}

// DefaultDigestGroup is Effect.Digest.Group's default: an Alertmanager
// notification's group, else the pipeline.
const DefaultDigestGroup = `{{get .trigger "groupKey" | default .pipeline}}`

// presetFields lists the fields each preset takes.
var presetFields = map[string][]string{
	PresetWebhook:   nil,
	PresetSlack:     {"text", "link"},
	PresetPagerDuty: {"event_action", "dedup_key", "summary", "severity", "source", "link"},
	PresetJira:      {"project", "issue_type", "summary", "text"},
}

// Fields returns the preset fields the effect sets, by YAML name.
func (e *Effect) Fields() map[string]string {
	return map[string]string{
		"text": e.Text, "summary": e.Summary, "link": e.Link, "event_action": e.EventAction,
		"dedup_key": e.DedupKey, "severity": e.Severity, "source": e.Source,
		"project": e.Project, "issue_type": e.IssueType,
	}
}
