package spec

import "slices"

// Preset is a provider's scheme: what a source of that kind gets for each
// setting it leaves unset.
type Preset struct {
	// Doc is the provider's page on how it signs, where the scheme is
	// taken from.
	Doc string
	// Signature is the provider's signature scheme; a zero Header means it
	// does not sign.
	Signature Signature
	// Auth is the default authentication: AuthSignature for a provider
	// that signs.
	Auth string
	// TokenHeader is the header of AuthToken.
	TokenHeader string
	// Delivery and Event are where the delivery id and the event type come
	// from, first found first.
	Delivery, Event []string
	// Handshake is the provider's endpoint check, answered without a
	// trigger.
	Handshake Handshake
	// Form accepts application/x-www-form-urlencoded bodies; FormPayload
	// is the field that carries a JSON payload, when there is one.
	Form        bool
	FormPayload string
	// Split is SplitAlertmanager for notifications of several alerts.
	Split string
	// SignEvent is the event type `webhook sign` sends when given none.
	SignEvent string
}

// presets are the providers Oncegate knows, by kind.
var presets = map[string]Preset{
	"github": {
		Doc:       "https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries",
		Signature: Signature{Header: "X-Hub-Signature-256", Prefix: "sha256="},
		Auth:      AuthSignature,
		Delivery:  []string{"header:X-GitHub-Delivery"},
		Event:     []string{"header:X-GitHub-Event"},
		Handshake: Handshake{Event: "ping"},
		SignEvent: "push",
	},
	"stripe": {
		Doc: "https://docs.stripe.com/webhooks#verify-manually",
		Signature: Signature{Header: "Stripe-Signature", Prefix: "v1=", Separator: ",",
			Signed: "{timestamp}.{body}", Timestamp: "signature:t="},
		Auth:     AuthSignature,
		Delivery: []string{"body:/id"},
		Event:    []string{"body:/type"},
	},
	"standard": {
		Doc: "https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md",
		Signature: Signature{Encoding: Base64, Header: "Webhook-Signature", Prefix: "v1,", Separator: " ",
			Signed: "{id}.{timestamp}.{body}", Timestamp: "header:Webhook-Timestamp", SecretEncoding: SecretWhsec},
		Auth:     AuthSignature,
		Delivery: []string{"header:Webhook-Id"},
		Event:    []string{"body:/type"},
	},
	"sentry": {
		Doc:       "https://docs.sentry.io/organization/integrations/integration-platform/webhooks/",
		Signature: Signature{Header: "Sentry-Hook-Signature"},
		Auth:      AuthSignature,
		Delivery:  []string{"header:Request-Id"},
		Event:     []string{"header:Sentry-Hook-Resource"},
		SignEvent: "issue",
	},
	"alertmanager": {
		Doc:   "https://prometheus.io/docs/alerting/latest/configuration/#webhook_config",
		Auth:  AuthBearer,
		Split: SplitAlertmanager,
	},
	KindHMAC: {
		Signature: Signature{Header: DefaultHMACHeader, Prefix: "sha256=", PrefixOptional: true},
		Auth:      AuthSignature,
		Delivery:  []string{"header:" + DefaultHMACDeliveryHeader, "digest"},
	},
	"gitlab": {
		Doc:         "https://docs.gitlab.com/user/project/integrations/webhooks/#validate-payloads-by-using-a-secret-token",
		Auth:        AuthToken,
		TokenHeader: "X-Gitlab-Token",
		Delivery:    []string{"header:Idempotency-Key", "header:X-Gitlab-Event-UUID"},
		Event:       []string{"body:/object_kind", "body:/event_name"},
	},
	"slack": {
		Doc: "https://api.slack.com/authentication/verifying-requests-from-slack",
		Signature: Signature{Header: "X-Slack-Signature", Prefix: "v0=",
			Signed: "v0:{timestamp}:{body}", Timestamp: "header:X-Slack-Request-Timestamp"},
		Auth: AuthSignature,
		// Events API: event_id; interactivity and slash commands: trigger_id.
		Delivery:    []string{"body:/event_id", "body:/trigger_id"},
		Event:       []string{"body:/event/type", "body:/type", "body:/command"},
		Handshake:   Handshake{Event: "url_verification", Echo: "/challenge"},
		Form:        true,
		FormPayload: "payload",
	},
	"shopify": {
		Doc:       "https://shopify.dev/docs/apps/build/webhooks/subscribe/https",
		Signature: Signature{Encoding: Base64, Header: "X-Shopify-Hmac-SHA256"},
		Auth:      AuthSignature,
		Delivery:  []string{"header:X-Shopify-Webhook-Id"},
		Event:     []string{"header:X-Shopify-Topic"},
		SignEvent: "orders/create",
	},
	"pagerduty": {
		Doc:       "https://developer.pagerduty.com/docs/webhooks/webhook-signatures/",
		Signature: Signature{Header: "X-PagerDuty-Signature", Prefix: "v1=", Separator: ","},
		Auth:      AuthSignature,
		Delivery:  []string{"body:/event/id"},
		Event:     []string{"body:/event/event_type"},
	},
	"linear": {
		Doc: "https://linear.app/developers/webhooks",
		Signature: Signature{Header: "Linear-Signature",
			Timestamp: "body:/webhookTimestamp", TimestampUnit: Milliseconds},
		Auth:     AuthSignature,
		Delivery: []string{"header:Linear-Delivery"},
		Event:    []string{"body:/type"},
	},
	"jira": {
		Doc:       "https://developer.atlassian.com/cloud/jira/platform/webhooks/#secure-admin-webhooks",
		Signature: Signature{Header: "X-Hub-Signature", Prefix: "sha256="},
		Auth:      AuthSignature,
		Delivery:  []string{"header:X-Atlassian-Webhook-Identifier"},
		Event:     []string{"body:/webhookEvent"},
	},
	"twilio": {
		Doc: "https://www.twilio.com/docs/usage/webhooks/webhooks-security",
		Signature: Signature{Algorithm: HMACSHA1, Encoding: Base64, Header: "X-Twilio-Signature",
			Signed: "{url}{form}"},
		Auth:     AuthSignature,
		Delivery: []string{"header:I-Twilio-Idempotency-Token", "digest"},
		Event:    []string{"body:/MessageStatus", "body:/CallStatus", "body:/SmsStatus"},
		Form:     true,
	},
	"grafana": {
		Doc:       "https://grafana.com/docs/grafana/latest/alerting/configure-notifications/manage-contact-points/integrations/webhook-notifier/",
		Signature: Signature{Header: "X-Grafana-Alerting-Signature"},
		Auth:      AuthSignature,
		Split:     SplitAlertmanager,
	},
}

// Lookup returns the preset of a kind.
func Lookup(kind string) (Preset, bool) {
	p, ok := presets[kind]
	return p, ok
}

// Kinds lists the presets' kinds, sorted.
func Kinds() []string {
	ks := make([]string, 0, len(presets))
	for k := range presets {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
