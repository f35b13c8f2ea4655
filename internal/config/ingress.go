package config

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/ingress/spec"
)

// Ingress source kinds: the presets of the providers Oncegate knows
// (spec.Kinds lists them all). A kind fills in the scheme settings a
// source leaves unset; a source without a kind spells its scheme out.
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
	KindHMAC = spec.KindHMAC
)

// Ingress authentication settings (see spec.Auths).
const (
	// AuthSignature verifies the source's signature scheme; it is what a
	// source whose kind signs gets when Auth is empty.
	AuthSignature = spec.AuthSignature
	// AuthToken compares a header (token_header) with the secret.
	AuthToken = spec.AuthToken
	// AuthNone accepts unsigned requests; it must be written explicitly.
	AuthNone = spec.AuthNone
	// AuthBearer and AuthBasic check an Authorization header with a
	// bearer token, or with a user and password.
	AuthBearer = spec.AuthBearer
	AuthBasic  = spec.AuthBasic
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
	DefaultHMACHeader            = spec.DefaultHMACHeader
	DefaultHMACDeliveryHeader    = spec.DefaultHMACDeliveryHeader
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
	// may be from the ingress's clock, either way. A timestamp is thus
	// accepted for twice the tolerance, which must not exceed the trigger
	// stream's duplicate window (stream.duplicates), or a request replayed
	// late in its tolerance would be stored as a second trigger. The
	// default is 5m or half of stream.duplicates, whichever is shorter
	// (2m30s with the default window).
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

// Source is one webhook sender of the ingress: the scheme package's
// spec.Source, which the ingress runs as it is. Its Resolved is what the
// ingress runs, and what validation checks.
type Source = spec.Source

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
	tol := DefaultIngressTolerance
	if d := c.Stream.Duplicates; d > 0 {
		tol = min(tol, d/2) // see validator.tolerance
	}
	setDefault(c, "ingress.tolerance", &in.Tolerance, tol)
	setDefault(c, "ingress.publish_timeout", &in.PublishTimeout, DefaultIngressPublishTimeout)
	setDefault(c, "ingress.retry_after", &in.RetryAfter, DefaultIngressRetryAfter)
	setDefault(c, "ingress.read_header_timeout", &in.ReadHeaderTimeout, DefaultIngressReadHeader)
	setDefault(c, "ingress.read_timeout", &in.ReadTimeout, DefaultIngressReadTimeout)
	setDefault(c, "ingress.idle_timeout", &in.IdleTimeout, DefaultIngressIdleTimeout)
	setDefault(c, "ingress.max_in_flight", &in.MaxInFlight, DefaultIngressMaxInFlight)
	for i := range in.Sources {
		s := &in.Sources[i]
		at := func(field string) string { return joinPath(indexPath("ingress.sources", i), field) }
		if p, ok := spec.Lookup(s.Kind); ok && p.Auth != AuthSignature {
			setDefault(c, at("auth"), &s.Auth, p.Auth)
		}
		if s.Kind == KindHMAC {
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
		v.ingressSubject(at("subject"), s.Subject)
		v.source(at, s)
	}
}

// source validates one source's scheme, credentials and ids, as the
// ingress will run them (spec.Source.Validate), with the configuration's
// rules for the environment variables and the URL it names.
func (v *validator) source(at func(string) string, s *Source) {
	checks := spec.Checks{
		EnvName: checkEnvName,
		URL:     func(u string) error { return checkURL(u, "https", "http") },
	}
	for _, fe := range s.Validate(checks) {
		err := fe.Err
		switch {
		case errors.Is(err, ErrInvalid), errors.Is(err, ErrMissing):
			// One of checks': the configuration's own.
		case errors.Is(err, spec.ErrMissing):
			err = missing("%v", err)
		default:
			err = invalid("%v", err)
		}
		v.add(at(fe.Field), err)
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
		r := s.Resolved()
		auth := "unsigned requests accepted (auth: none)"
		switch {
		case r.Auth == AuthNone:
		case s.SecretEnv != "":
			auth = "secret from $" + s.SecretEnv
		case s.SecretFile != "":
			auth = "secret from file " + s.SecretFile
		case s.TenantSecretDir != "":
			auth = "a secret per tenant, from the files in " + s.TenantSecretDir
		case len(s.TenantSecretEnv) > 0:
			auth = "a secret per tenant, from $" + strings.Join(slices.Sorted(maps.Values(s.TenantSecretEnv)), ", $")
		}
		switch r.Auth {
		case AuthBearer, AuthBasic:
			auth = r.Auth + " auth, " + auth
		case AuthToken:
			auth = r.TokenHeader + " token, " + auth
		}
		if s.PreviousSecretEnv != "" || s.PreviousSecretFile != "" {
			auth += ", and the previous one during a rotation"
		}
		path := "/hooks/" + s.Name
		if s.Tenanted() {
			path += "/<tenant>"
		}
		x.row("", fmt.Sprintf("%s: %s → %s", path, cmp.Or(s.Kind, "custom"), s.Subject), auth, schemeText(&r), idText(&r))
	}
}

// schemeText describes a resolved source's signature scheme.
func schemeText(r *Source) string {
	if r.Auth != AuthSignature {
		return "no signature"
	}
	sig := &r.Signature
	t := fmt.Sprintf("%s %s %s of %q", sig.Header, sig.Encoding, spec.AlgorithmName(sig.Algorithm), sig.Signed)
	if sig.Prefix != "" {
		t += " after " + strconv.Quote(sig.Prefix)
	}
	if sig.Timestamp != "" {
		if from, err := spec.ParseFrom(sig.Timestamp); err == nil {
			t += ", timestamp from " + from.Describe()
		}
	}
	return t
}

// idText says where a resolved source's delivery ids come from, and
// whether Nats-Msg-Id binds the body.
func idText(r *Source) string {
	if r.Split != "" {
		return "one trigger per alert, id from its fingerprint, startsAt and status"
	}
	var parts []spec.Part
	if r.Auth == AuthSignature {
		parts, _ = spec.ParseTemplate(r.Signature.Signed)
	}
	var froms []string
	bound := false
	for _, f := range r.Delivery {
		from, err := spec.ParseFrom(f)
		if err != nil {
			continue
		}
		froms = append(froms, from.Describe())
		bound = bound || !spec.Covered(parts, from, true)
	}
	for _, f := range r.Event {
		if from, err := spec.ParseFrom(f); err == nil && !spec.Covered(parts, from, false) {
			bound = true
		}
	}
	t := "delivery id from " + strings.Join(froms, ", else ")
	if bound {
		t += " (unsigned: Nats-Msg-Id binds the body)"
	}
	return t
}
