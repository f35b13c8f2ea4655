package spec

import "cmp"

// KindHMAC is the kind of a generic source that signs a hex HMAC-SHA256
// of the body in a configurable header; Source's Header, DeliveryHeader
// and EventHeader are its shorthands.
const KindHMAC = "hmac"

// Defaults of an hmac source's shorthands.
const (
	// DefaultHMACHeader is the header of its signature.
	DefaultHMACHeader = "X-Signature"
	// DefaultHMACDeliveryHeader is the header of its delivery id (else
	// the delivery id is the body's digest).
	DefaultHMACDeliveryHeader = "X-Delivery-Id"
)

// Source is one webhook sender, served at POST /hooks/<name> (or
// /hooks/<name>/<tenant> with per-tenant secrets).
//
// Secrets are never read from the configuration file: SecretEnv names an environment
// variable and SecretFile a file that holds the secret (a signing secret,
// a public key, a token or a basic-auth password). During a rotation,
// PreviousSecretEnv or PreviousSecretFile name the old one, which is
// accepted too.
//
// A Kind is a preset ([Kinds]): every scheme setting left unset takes
// the provider's value, so that "kind: github" is all a GitHub source
// needs. A source without a Kind spells its scheme out: Signature (or an
// Auth that checks credentials), Delivery and Event.
type Source struct {
	// Name identifies the source in its path, metrics and headers:
	// lower-case letters, digits and '-', unique. Required.
	Name string `yaml:"name"`
	// Kind is a preset: github, stripe, standard, alertmanager, sentry,
	// hmac, gitlab, slack, shopify, pagerduty, linear, jira, twilio or
	// grafana. Empty: no preset.
	Kind string `yaml:"kind"`
	// Subject is the literal subject its triggers are published to; the
	// stream's subjects must cover it. Required.
	Subject string `yaml:"subject"`
	// SecretEnv and SecretFile name where the secret is; set one, unless
	// Auth is AuthNone or the source has per-tenant secrets.
	SecretEnv  string `yaml:"secret_env"`
	SecretFile string `yaml:"secret_file"`
	// Optional lets the process start without the source's secret: until
	// it is set, the source answers 503 with Retry-After, and the start
	// and config check warn. The default, false, makes a source whose
	// secret is not set (or does not decode) an error at start and in
	// config check, as every other missing secret is.
	Optional bool `yaml:"optional"`
	// PreviousSecretEnv and PreviousSecretFile name a second secret,
	// accepted as well while a rotation is under way.
	PreviousSecretEnv  string `yaml:"previous_secret_env"`
	PreviousSecretFile string `yaml:"previous_secret_file"`
	// TenantSecretDir makes the source per-tenant: served at
	// /hooks/<name>/<tenant> for each file <tenant> in the directory,
	// which holds that tenant's secret (and <tenant>.previous, during a
	// rotation, the one before). Read at start; another tenant's path is
	// 404.
	TenantSecretDir string `yaml:"tenant_secret_dir"`
	// TenantSecretEnv makes the source per-tenant too, naming for each
	// tenant the environment variable that holds its secret.
	TenantSecretEnv map[string]string `yaml:"tenant_secret_env"`
	// Auth is how requests are authenticated: AuthSignature (the default
	// where the kind signs), AuthToken, AuthBearer, AuthBasic, or AuthNone
	// to accept unsigned requests. Alertmanager's default is bearer,
	// GitLab's token.
	Auth string `yaml:"auth"`
	// User is the basic-auth user with AuthBasic.
	User string `yaml:"user"`
	// TokenHeader is the header compared with the secret under AuthToken
	// (X-Gitlab-Token for gitlab).
	TokenHeader string `yaml:"token_header"`
	// Signature is the signature scheme; the kind's fills in what is
	// unset.
	Signature Signature `yaml:"signature"`
	// Delivery lists where the delivery id comes from, first found first:
	// "header:Name", "body:/pointer" or "digest" (the body's SHA-256). The
	// default is the kind's, or digest.
	Delivery []string `yaml:"delivery"`
	// Event lists where the event type (Oncegate-Event) comes from, as
	// Delivery does; none found, no Oncegate-Event.
	Event []string `yaml:"event"`
	// CopyHeaders are request headers copied onto the trigger as they
	// came (a key may use one only when the signature covers it).
	CopyHeaders []string `yaml:"copy_headers"`
	// PublicURL is the scheme, host and any path prefix before /hooks/ of
	// the URL the provider calls, for a signature over {url}
	// ("https://hooks.example.com").
	PublicURL string `yaml:"public_url"`
	// Handshake is the provider's endpoint check, answered 200 without a
	// trigger (GitHub's ping, Slack's url_verification).
	Handshake Handshake `yaml:"handshake"`
	// Form accepts application/x-www-form-urlencoded bodies (Slack's
	// interactivity and slash commands, Twilio): the trigger is the form
	// as a JSON object of strings, or the JSON in FormPayload when the
	// form has that field.
	Form        bool   `yaml:"form"`
	FormPayload string `yaml:"form_payload"`
	// Split is "alertmanager" to publish one trigger per alert of a
	// notification (alertmanager and grafana).
	Split string `yaml:"split"`
	// Header, DeliveryHeader and EventHeader are an hmac source's
	// signature header (default X-Signature), delivery id header (default
	// X-Delivery-Id, else the body's SHA-256) and event type header:
	// shorthands of signature.header, delivery and event.
	Header         string `yaml:"header"`
	DeliveryHeader string `yaml:"delivery_header"`
	EventHeader    string `yaml:"event_header"`
}

// Tenanted reports whether s has per-tenant secrets.
func (s *Source) Tenanted() bool { return s.TenantSecretDir != "" || len(s.TenantSecretEnv) > 0 }

// Resolved returns s with every scheme setting it leaves unset taken from
// its kind's preset, and Auth set to the authentication in force. It is
// what the ingress runs, and what validation checks.
func (s Source) Resolved() Source {
	p, _ := Lookup(s.Kind)
	if s.Kind == KindHMAC {
		p.Signature.Header = cmp.Or(s.Header, p.Signature.Header)
		p.Delivery = []string{"header:" + cmp.Or(s.DeliveryHeader, DefaultHMACDeliveryHeader), "digest"}
		if s.EventHeader != "" {
			p.Event = []string{"header:" + s.EventHeader}
		}
	}
	sig := &s.Signature
	ps := p.Signature
	sig.Header = cmp.Or(sig.Header, ps.Header)
	sig.Prefix = cmp.Or(sig.Prefix, ps.Prefix)
	sig.PrefixOptional = sig.PrefixOptional || ps.PrefixOptional
	sig.Separator = cmp.Or(sig.Separator, ps.Separator)
	sig.Algorithm = cmp.Or(sig.Algorithm, ps.Algorithm, HMACSHA256)
	sig.Encoding = cmp.Or(sig.Encoding, ps.Encoding, Hex)
	sig.Timestamp = cmp.Or(sig.Timestamp, ps.Timestamp)
	if sig.Signed == "" && s.Kind == "grafana" && sig.Timestamp != "" {
		// Grafana signs "timestamp:body" once a timestamp header is set.
		sig.Signed = "{timestamp}:{body}"
	}
	sig.Signed = cmp.Or(sig.Signed, ps.Signed, "{body}")
	if sig.Timestamp != "" {
		sig.TimestampUnit = cmp.Or(sig.TimestampUnit, ps.TimestampUnit, Seconds)
	}
	secretEnc := SecretText
	if sig.Algorithm == Ed25519 {
		secretEnc = SecretWhsec
	}
	sig.SecretEncoding = cmp.Or(sig.SecretEncoding, ps.SecretEncoding, secretEnc)
	if s.Auth == "" {
		s.Auth = p.Auth
		if s.Auth == "" && sig.Header != "" {
			s.Auth = AuthSignature
		}
	}
	s.TokenHeader = cmp.Or(s.TokenHeader, p.TokenHeader)
	if s.Delivery == nil {
		s.Delivery = p.Delivery
		if s.Delivery == nil && p.Split == "" && s.Split == "" {
			s.Delivery = []string{"digest"}
		}
	}
	if s.Event == nil {
		s.Event = p.Event
	}
	if s.Handshake == (Handshake{}) {
		s.Handshake = p.Handshake
	}
	s.Form = s.Form || p.Form
	s.FormPayload = cmp.Or(s.FormPayload, p.FormPayload)
	s.Split = cmp.Or(s.Split, p.Split)
	return s
}

// SignsTimestamp reports whether the resolved source r checks a signed
// timestamp against the tolerance.
func (r *Source) SignsTimestamp() bool {
	return r.Auth == AuthSignature && r.Signature.Timestamp != ""
}
