package config

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Ingress source kinds: how a source's requests are verified, and where
// its delivery id and event type come from.
const (
	// KindGitHub verifies X-Hub-Signature-256; the delivery id is
	// X-GitHub-Delivery, the event type X-GitHub-Event. A ping is
	// answered without a trigger.
	KindGitHub = "github"
	// KindStripe verifies Stripe-Signature (t=, one or more v1=) within
	// the tolerance; the delivery id is the event's id, the event type
	// its type.
	KindStripe = "stripe"
	// KindStandard verifies Standard Webhooks webhook-id,
	// webhook-timestamp and webhook-signature, with a whsec_ secret; the
	// delivery id is webhook-id, the event type the payload's type.
	KindStandard = "standard"
	// KindAlertmanager checks Alertmanager's bearer token or basic auth
	// (it does not sign) and splits a notification into one trigger per
	// alert, whose delivery id comes from the alert's fingerprint,
	// startsAt and status.
	KindAlertmanager = "alertmanager"
	// KindSentry verifies Sentry-Hook-Signature; the delivery id is
	// Request-ID, the event type Sentry-Hook-Resource.
	KindSentry = "sentry"
	// KindHMAC verifies a hex HMAC-SHA256 of the body in a configurable
	// header.
	KindHMAC = "hmac"
)

// Ingress authentication settings.
const (
	// AuthNone accepts unsigned requests; it must be written explicitly.
	AuthNone = "none"
	// AuthBearer and AuthBasic are Alertmanager's: an Authorization
	// header with a bearer token, or with a user and password.
	AuthBearer = "bearer"
	AuthBasic  = "basic"
)

// Defaults of the ingress.
const (
	DefaultIngressMaxBody        = ByteSize(1 << 20)
	DefaultIngressTolerance      = 5 * time.Minute
	DefaultIngressPublishTimeout = 5 * time.Second
	DefaultIngressRetryAfter     = 5 * time.Second
	DefaultIngressReadHeader     = 5 * time.Second
	DefaultIngressReadTimeout    = 30 * time.Second
	DefaultIngressIdleTimeout    = 2 * time.Minute
	DefaultIngressMaxInFlight    = 256
	DefaultHMACHeader            = "X-Signature"
	DefaultHMACDeliveryHeader    = "X-Delivery-Id"
)

// Ingress configures the HTTP server that receives webhooks, verifies
// them and publishes them as triggers. It is off unless Listen is set
// (or the run command's -ingress flag gives an address).
type Ingress struct {
	// Listen is the address the ingress serves on, such as
	// "127.0.0.1:8080"; without a host (":8080") it is on loopback, and
	// every interface must be asked for ("0.0.0.0:8080"). Empty (the
	// default) turns the ingress off.
	Listen string `yaml:"listen"`
	// MaxBodyBytes bounds a request body; a larger one is answered 413
	// before it is read whole. The default is 1MiB.
	MaxBodyBytes ByteSize `yaml:"max_body_bytes"`
	// Tolerance is how far a signed timestamp (Stripe, Standard Webhooks)
	// may be from the ingress's clock, either way. The default is 5m.
	Tolerance time.Duration `yaml:"tolerance"`
	// PublishTimeout bounds the wait for JetStream's PubAck; past it the
	// request is answered 503 with Retry-After. The default is 5s.
	PublishTimeout time.Duration `yaml:"publish_timeout"`
	// RetryAfter is the Retry-After of a 503. The default is 5s.
	RetryAfter time.Duration `yaml:"retry_after"`
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout are the HTTP
	// server's. The defaults are 5s, 30s and 2m.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	ReadTimeout       time.Duration `yaml:"read_timeout"`
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
	// MaxInFlight bounds the requests of one source being worked on at
	// once; more are answered 503 with Retry-After. The default is 256.
	MaxInFlight int `yaml:"max_in_flight"`
	// Sources are the webhook senders, each served at POST /hooks/<name>.
	Sources []Source `yaml:"sources"`
}

// Source is one webhook sender.
//
// Secrets are never read from the file: SecretEnv names an environment
// variable and SecretFile a file that holds the secret (a signing
// secret, a bearer token or a basic-auth password). During a rotation,
// PreviousSecretEnv or PreviousSecretFile name the old one, which is
// accepted too.
type Source struct {
	// Name identifies the source in its path, metrics and headers:
	// lower-case letters, digits and '-', unique. Required.
	Name string `yaml:"name"`
	// Kind is KindGitHub, KindStripe, KindStandard, KindAlertmanager,
	// KindSentry or KindHMAC. Required.
	Kind string `yaml:"kind"`
	// Subject is the literal subject its triggers are published to; the
	// stream's subjects must cover it. Required.
	Subject string `yaml:"subject"`
	// SecretEnv and SecretFile name where the secret is; set one, unless
	// Auth is AuthNone.
	SecretEnv  string `yaml:"secret_env"`
	SecretFile string `yaml:"secret_file"`
	// PreviousSecretEnv and PreviousSecretFile name a second secret,
	// accepted as well while a rotation is under way.
	PreviousSecretEnv  string `yaml:"previous_secret_env"`
	PreviousSecretFile string `yaml:"previous_secret_file"`
	// Auth is AuthNone to accept unsigned requests; for an alertmanager
	// source it is AuthBearer (the default) or AuthBasic. Empty otherwise.
	Auth string `yaml:"auth"`
	// User is the basic-auth user of an alertmanager source with
	// AuthBasic.
	User string `yaml:"user"`
	// Header is the signature header of an hmac source. The default is
	// "X-Signature".
	Header string `yaml:"header"`
	// DeliveryHeader is the header carrying an hmac source's delivery id.
	// The default is "X-Delivery-Id"; a request without it is keyed by the
	// SHA-256 of its body.
	DeliveryHeader string `yaml:"delivery_header"`
	// EventHeader, optional, is the header carrying an hmac source's
	// event type.
	EventHeader string `yaml:"event_header"`
}

// IngressOn reports whether the ingress is to be served.
func (c *Config) IngressOn() bool { return c.Ingress.Listen != "" }

// ingressYAML is the built-in configuration's ingress section: sources
// only; it stays off until a listen address is given.
const ingressYAML = `
ingress:
  sources:
    - name: github
      kind: github
      secret_env: GITHUB_WEBHOOK_SECRET
      subject: triggers.webhooks
    - name: alertmanager
      kind: alertmanager
      secret_env: ALERTMANAGER_WEBHOOK_TOKEN
      subject: triggers.alerts
`

// ingressDefaults fills in the ingress fields left unset.
func (c *Config) ingressDefaults() {
	in := &c.Ingress
	setDefault(c, "ingress.max_body_bytes", &in.MaxBodyBytes, DefaultIngressMaxBody)
	setDefault(c, "ingress.tolerance", &in.Tolerance, DefaultIngressTolerance)
	setDefault(c, "ingress.publish_timeout", &in.PublishTimeout, DefaultIngressPublishTimeout)
	setDefault(c, "ingress.retry_after", &in.RetryAfter, DefaultIngressRetryAfter)
	setDefault(c, "ingress.read_header_timeout", &in.ReadHeaderTimeout, DefaultIngressReadHeader)
	setDefault(c, "ingress.read_timeout", &in.ReadTimeout, DefaultIngressReadTimeout)
	setDefault(c, "ingress.idle_timeout", &in.IdleTimeout, DefaultIngressIdleTimeout)
	setDefault(c, "ingress.max_in_flight", &in.MaxInFlight, DefaultIngressMaxInFlight)
	for i := range in.Sources {
		s := &in.Sources[i]
		at := func(field string) string { return joinPath(indexPath("ingress.sources", i), field) }
		switch s.Kind {
		case KindAlertmanager:
			setDefault(c, at("auth"), &s.Auth, AuthBearer)
		case KindHMAC:
			setDefault(c, at("header"), &s.Header, DefaultHMACHeader)
			setDefault(c, at("delivery_header"), &s.DeliveryHeader, DefaultHMACDeliveryHeader)
		}
	}
}

// ingress validates the ingress section. The sources are checked even
// when the ingress is off, so that turning it on with -ingress cannot
// start a bad configuration.
func (v *validator) ingress() {
	in := &v.c.Ingress
	if in.Listen != "" {
		if err := checkListen(in.Listen, false); err != nil {
			v.add("ingress.listen", err)
		}
		if len(in.Sources) == 0 {
			v.add("ingress.sources", missing("the ingress needs at least one source"))
		}
	}
	if in.MaxBodyBytes <= 0 {
		v.add("ingress.max_body_bytes", invalid("must be positive, got %s", in.MaxBodyBytes))
	}
	v.positive("ingress.tolerance", in.Tolerance)
	v.positive("ingress.publish_timeout", in.PublishTimeout)
	v.positive("ingress.retry_after", in.RetryAfter)
	v.positive("ingress.read_header_timeout", in.ReadHeaderTimeout)
	v.positive("ingress.read_timeout", in.ReadTimeout)
	v.positive("ingress.idle_timeout", in.IdleTimeout)
	if in.MaxInFlight <= 0 {
		v.add("ingress.max_in_flight", invalid("must be positive, got %d", in.MaxInFlight))
	}
	first := map[string]int{}
	for i := range in.Sources {
		s := &in.Sources[i]
		at := func(field string) string { return joinPath(indexPath("ingress.sources", i), field) }
		if s.Name == "" {
			v.add(at("name"), missing("a source needs a name"))
		} else if err := checkName(s.Name); err != nil {
			v.add(at("name"), err)
		} else if j, dup := first[s.Name]; dup {
			v.add(at("name"), invalid("source %q is defined twice (also ingress.sources[%d])", s.Name, j))
		} else {
			first[s.Name] = i
		}
		v.oneOf(at("kind"), s.Kind, KindGitHub, KindStripe, KindStandard, KindAlertmanager, KindSentry, KindHMAC)
		v.ingressSubject(at("subject"), s.Subject)
		auths := []string{"", AuthNone}
		if s.Kind == KindAlertmanager {
			auths = []string{AuthBearer, AuthBasic, AuthNone}
		}
		if !slices.Contains(auths, s.Auth) {
			v.add(at("auth"), invalid("%q is not one of %s for a %s source", s.Auth, strings.Join(slices.DeleteFunc(auths, func(a string) bool { return a == "" }), ", "), s.Kind))
		}
		for _, e := range []struct{ path, name string }{{at("secret_env"), s.SecretEnv}, {at("previous_secret_env"), s.PreviousSecretEnv}} {
			if e.name != "" {
				if err := checkEnvName(e.name); err != nil {
					v.add(e.path, err)
				}
			}
		}
		if s.SecretEnv != "" && s.SecretFile != "" {
			v.add(at("secret_file"), invalid("set secret_env or secret_file, not both"))
		}
		if s.PreviousSecretEnv != "" && s.PreviousSecretFile != "" {
			v.add(at("previous_secret_file"), invalid("set previous_secret_env or previous_secret_file, not both"))
		}
		hasSecret := s.SecretEnv != "" || s.SecretFile != ""
		switch {
		case s.Auth == AuthNone && (hasSecret || s.PreviousSecretEnv != "" || s.PreviousSecretFile != ""):
			v.add(at("auth"), invalid("auth: none accepts unsigned requests; remove the secret, or the auth: none"))
		case s.Auth != AuthNone && !hasSecret:
			v.add(at("secret_env"), missing("a source needs secret_env or secret_file; to accept unsigned requests, write auth: none"))
		}
		if s.User != "" && s.Auth != AuthBasic {
			v.add(at("user"), invalid("user is for an alertmanager source with auth: basic"))
		}
		if s.Auth == AuthBasic && s.User == "" {
			v.add(at("user"), missing("auth: basic needs a user"))
		}
		if s.Kind != KindHMAC {
			for _, h := range []struct{ path, val string }{{at("header"), s.Header}, {at("delivery_header"), s.DeliveryHeader}, {at("event_header"), s.EventHeader}} {
				if h.val != "" {
					v.add(h.path, invalid("only an hmac source takes it; a %s source's headers are the provider's", s.Kind))
				}
			}
			continue
		}
		for _, h := range []struct{ path, val string }{{at("header"), s.Header}, {at("delivery_header"), s.DeliveryHeader}, {at("event_header"), s.EventHeader}} {
			if h.val != "" && !validHeaderName(h.val) {
				v.add(h.path, invalid("%q is not an HTTP header name", h.val))
			}
		}
	}
}

// ingressSubject checks a source's subject: literal, covered by the
// stream, consumed by some pipeline.
func (v *validator) ingressSubject(path, subj string) {
	if subj == "" {
		v.add(path, missing("a subject to publish to is required"))
		return
	}
	if err := checkSubject(subj, true); err != nil {
		v.add(path, err)
		return
	}
	if v.c.Ingress.Listen == "" {
		// The ingress is off (the built-in sources are there for -ingress):
		// a stream that does not capture their subjects is not a problem
		// until it serves.
		return
	}
	covered := false
	for _, s := range v.c.Stream.Subjects {
		if subjectCovers(s, subj) {
			covered = true
		}
	}
	if !covered {
		v.add(path, invalid("%q is not captured by the stream's subjects %s: the PubAck, which the ingress waits for, would never come", subj, quoteSubjects(v.c.Stream.Subjects)))
	}
}

func init() {
	refused[reflect.TypeFor[Source]()] = map[string]string{
		"secret":          "secrets are not read from the config file: name the environment variable that holds it with secret_env, or a file with secret_file",
		"token":           "secrets are not read from the config file: name the environment variable that holds it with secret_env, or a file with secret_file",
		"password":        "secrets are not read from the config file: name the environment variable that holds it with secret_env, or a file with secret_file",
		"previous_secret": "secrets are not read from the config file: use previous_secret_env or previous_secret_file",
	}
}

// ingress explains the ingress section: where it listens (or that it is
// off) and each source, naming where its secret comes from, never the
// secret.
func (x *explainer) ingress() {
	in := &x.c.Ingress
	state := "off (set ingress.listen, or run -ingress ADDR)"
	if in.Listen != "" {
		state = "http://" + in.Listen + "/hooks/<source>"
	}
	x.row("webhook ingress", x.d("ingress.listen", in.Listen, state),
		"body limit "+x.d("ingress.max_body_bytes", in.MaxBodyBytes, in.MaxBodyBytes.String()),
		"timestamp tolerance "+x.d("ingress.tolerance", in.Tolerance, formatDuration(in.Tolerance)),
		"PubAck wait "+x.d("ingress.publish_timeout", in.PublishTimeout, formatDuration(in.PublishTimeout)),
		"in flight per source "+x.d("ingress.max_in_flight", in.MaxInFlight, strconv.Itoa(in.MaxInFlight)))
	for _, s := range in.Sources {
		auth := "unsigned requests accepted (auth: none)"
		switch {
		case s.Auth == AuthNone:
		case s.SecretEnv != "":
			auth = "secret from $" + s.SecretEnv
		case s.SecretFile != "":
			auth = "secret from file " + s.SecretFile
		}
		if s.Kind == KindAlertmanager && s.Auth != AuthNone {
			auth = s.Auth + " auth, " + auth
		}
		if s.PreviousSecretEnv != "" || s.PreviousSecretFile != "" {
			auth += ", and the previous one during a rotation"
		}
		x.row("", fmt.Sprintf("/hooks/%s: %s → %s", s.Name, s.Kind, s.Subject), auth)
	}
}
