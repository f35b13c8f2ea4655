package config

import (
	"reflect"
)

const defaultName = "built-in default"

// defaultYAML is the demo configuration, less what the defaults fill in.
// examples/oncegate.yaml spells the same configuration out in full.
const defaultYAML = `
pipelines:
  - name: alerts
    subject: triggers.alerts
    key:
      fields: [/alert/fingerprint]
      version: /alert/occurrence
      status: /status
    step:
      name: triage
      skip_when: status == "resolved"
      system: You are an experienced site reliability engineer. Be brief and concrete.
      prompt: |
        Triage this alert for the on-call engineer.

        Alert:    {{get . "alert" "labels" "alertname" | default "unnamed"}} on {{get . "alert" "labels" "instance" | default "an unknown instance"}} (severity {{get . "alert" "labels" "severity" | default "unset"}})
        Status:   {{get . "status" | default "firing"}} since {{get . "alert" "startsAt" | default "an unknown time"}}, occurrence {{get . "alert" "occurrence" | default 1}}
        Summary:  {{get . "alert" "annotations" "summary" | default "none"}}
        Runbook:  {{get . "alert" "annotations" "runbook" | default "none"}}

        Answer with the likely cause, the first thing to check, and whether to page now (yes or no).
    effect:
      sink: jetstream
      subject: effects.alerts
  - name: webhooks
    subject: triggers.webhooks
    key:
      volatile: [/delivery_id, /sent_at, /received_at]
    effect:
      sink: jetstream
      subject: effects.webhooks
`

// Default returns the configuration the consumer runs with when it is given
// no file: an embedded NATS server, the stand-in model, stream ONCEGATE on
// triggers.>, and two pipelines.
//
// "alerts" triages each new occurrence of an alert (keyed by the alert's
// fingerprint and occurrence) with the model and publishes the triage to
// effects.alerts. "webhooks" is a gate: each distinct webhook payload,
// whatever its delivery id and timestamps, is published to
// effects.webhooks once.
func Default() *Config {
	c, err := parseDefault(nil)
	if err != nil {
		panic("config: the default configuration is invalid: " + err.Error())
	}
	return c
}

// parseDefault returns the default configuration with environ applied.
// Problems name no line: the document is not one the user can see.
func parseDefault(environ []string) (*Config, error) {
	c, issues := decode([]byte(defaultYAML+ingressYAML), defaultName)
	if issues != nil {
		panic("config: the default configuration does not decode: " + c.fieldErrors(issues).Error())
	}
	clear(c.meta.lines)
	return c.finish(environ)
}

// setDefault puts val at *dst, the field at path, unless the file or the
// environment set it or Go code changed it. A value it put there before is
// recomputed, so that derived defaults follow the values they derive from.
func setDefault[T any](c *Config, path string, dst *T, val T) {
	m := c.meta
	if m.present(path) {
		return
	}
	if !reflect.ValueOf(dst).Elem().IsZero() {
		if m == nil {
			return
		}
		if old, ok := m.defaulted[path]; !ok || !reflect.DeepEqual(old, *dst) {
			return
		}
	}
	*dst = val
	if m != nil {
		m.defaulted[path] = clone(val)
	}
}

// applyDefaults fills in every field the file and the environment left
// unset, section by section (an order some defaults depend on: the
// embedded store below data_dir, a step's model from llm.model, the
// tolerance from stream.duplicates). It may run more than once.
func (c *Config) applyDefaults() {
	setDefault(c, "data_dir", &c.DataDir, DefaultDataDir)
	c.natsDefaults()
	c.ledgerDefaults()
	c.llmDefaults()
	setDefault(c, "metrics.listen", &c.Metrics.Listen, DefaultMetricsListen)
	setDefault(c, "log.format", &c.Log.Format, LogText)
	setDefault(c, "log.level", &c.Log.Level, "info")
	c.streamDefaults()
	for i := range c.Pipelines {
		c.pipelineDefaults(i)
	}
	c.ingressDefaults()
	c.tracingDefaults()
	c.proxyDefaults()
	c.spendDefaults()
	c.recoveryDefaults()
}
