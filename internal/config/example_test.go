package config_test

import (
	"fmt"
	"os"

	"github.com/oncegate/oncegate/internal/config"
)

// Unknown keys are errors, with their line and the key that was meant.
func ExampleParse_unknownKey() {
	_, err := config.Parse([]byte(`
ledger:
  retension: 200h
pipelines:
  - name: alerts
    subject: triggers.alerts
    effect: {sink: jetstream, subject: effects.alerts}
`), "oncegate.yaml")
	fmt.Println(err)
	// Output: oncegate.yaml:3: ledger.retension: unknown key "retension" (did you mean "retention"?)
}

// Validate reports every problem at once, each with its path and line.
func ExampleParse_validation() {
	_, err := config.Parse([]byte(`
ledger:
  retention: 1h
pipelines:
  - name: alerts
    subject: triggers.alerts
    effect:
      sink: http
    ack_wait: 10m
    max_deliver: 10
stream:
  retention: workqueue
`), "oncegate.yaml")
	fmt.Println(err)
	// Output:
	// oncegate.yaml:7: pipelines[alerts].effect.url: required for sink http: set url, url_env or url_file
	// oncegate.yaml:3: ledger.retention: 1h does not exceed the redelivery horizon 1h40m of pipeline "alerts" (10 deliveries × ack_wait 10m): a late redelivery would find no record and run its effect again; raise the retention, or lower max_deliver, ack_wait or backoff
}

// Environment variables override the file, by path.
func ExampleConfig_LoadEnv() {
	c := config.Default()
	err := c.LoadEnv([]string{
		"ONCEGATE_NATS_URL=nats://nats.internal:4222",
		"ONCEGATE_PIPELINES_ALERTS_MAX_DELIVER=3",
		"ONCEGATE_NATS_PASSWORD=not-a-field-but-allowed",
	})
	if err == nil {
		err = c.Validate()
	}
	fmt.Println(c.NATS.URL, c.Pipelines[0].MaxDeliver, err)
	fmt.Println(config.EnvName("pipelines[alerts].step.model"))
	// Output:
	// nats://nats.internal:4222 3 <nil>
	// ONCEGATE_PIPELINES_ALERTS_STEP_MODEL
}

func ExampleConfig_Explain() {
	c := config.Default()
	c.Explain(os.Stdout)
}
