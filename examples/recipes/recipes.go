// Package recipes holds Oncegate's recipes — configurations that take a
// provider's webhooks through a pipeline to the tool people work in — so
// that the demo and the tests run the files users copy:
//
//   - alertmanager.yaml: Alertmanager → triage → PagerDuty for critical
//     alerts, Slack for the rest; resolves resolve, without a model call.
//   - github.yaml: GitHub issues and pull requests → a summary → Slack.
//   - stripe.yaml: Stripe disputes → a Jira ticket.
package recipes

import "embed"

// FS holds the recipes' configurations and sample triggers.
//
//go:embed *.yaml *.json
var FS embed.FS
