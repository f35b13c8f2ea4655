package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/oncegate/oncegate/internal/cond"
	"github.com/oncegate/oncegate/internal/secretfile"
	"github.com/oncegate/oncegate/internal/tmpl"
)

// PagerDutyURL is the pagerduty preset's default URL, the Events API v2.
const PagerDutyURL = "https://events.pagerduty.com/v2/enqueue"

// JiraIssuePath is what the jira preset adds to its URL, the site.
const JiraIssuePath = "/rest/api/3/issue"

// The defaults of an effect's retry schedule (Effect.Retry).
const (
	DefaultEffectBackoff    = 500 * time.Millisecond
	DefaultEffectMaxBackoff = 5 * time.Second
)

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

// DefaultAnswerAttempts is Step.AnswerAttempts's default.
const DefaultAnswerAttempts = 3

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

// IsSet reports whether the effect was given (a pipeline has Effect or
// Effects).
func (e *Effect) IsSet() bool { return e.Sink != "" || e.Preset != "" }

// NamedEffect is one of a pipeline's effects with its name: "" for the
// single Effect.
type NamedEffect struct {
	Name string
	*Effect
}

// AllEffects lists the pipeline's effects: its single Effect (named ""),
// or its Effects sorted by name.
func (p *Pipeline) AllEffects() []NamedEffect {
	if len(p.Effects) == 0 {
		return []NamedEffect{{"", &p.Effect}}
	}
	out := make([]NamedEffect, 0, len(p.Effects))
	for _, name := range slices.Sorted(mapKeys(p.Effects)) {
		e := p.Effects[name]
		out = append(out, NamedEffect{name, &e})
	}
	return out
}

// HasClass reports whether one of the pipeline's effects is of class.
func (p *Pipeline) HasClass(class string) bool {
	for _, e := range p.AllEffects() {
		if e.Class == class {
			return true
		}
	}
	return false
}

// effectDefaults fills in what the preset implies.
func (c *Config) effectDefaults(path string, e *Effect) {
	sink, class := "", ClassReplayable
	switch e.Preset {
	case PresetSlack, PresetJira:
		sink, class = SinkHTTP, ClassOneShot
	case PresetPagerDuty:
		sink = SinkHTTP
		if e.URL == "" && e.URLEnv == "" && e.URLFile == "" {
			setDefault(c, joinPath(path, "url"), &e.URL, PagerDutyURL)
		}
	}
	if sink != "" {
		setDefault(c, joinPath(path, "sink"), &e.Sink, sink)
	}
	setDefault(c, joinPath(path, "class"), &e.Class, class)
	setDefault(c, joinPath(path, "delay"), &e.Delay, 0)
	setDefault(c, joinPath(path, "retry.backoff"), &e.Retry.Backoff, DefaultEffectBackoff)
	setDefault(c, joinPath(path, "retry.max_backoff"), &e.Retry.MaxBackoff, max(DefaultEffectMaxBackoff, e.Retry.Backoff))
	if e.Digest.Window > 0 {
		setDefault(c, joinPath(path, "digest.group"), &e.Digest.Group, DefaultDigestGroup)
	}
	q, preset := PresetQuotas[e.Preset]
	if preset {
		setDefault(c, joinPath(path, "rate_limit.requests"), &e.RateLimit.Requests, q.Requests)
	} else {
		q.Per = time.Minute
	}
	if e.RateLimit.Requests > 0 {
		setDefault(c, joinPath(path, "rate_limit.per"), &e.RateLimit.Per, q.Per)
	}
	if e.ApprovalSubject != "" {
		setDefault(c, joinPath(path, "approval_timeout"), &e.ApprovalTimeout, DefaultApprovalTimeout)
	}
}

// pipelineEffectDefaults fills in the defaults of a pipeline's effects and
// step.
func (c *Config) pipelineEffectDefaults(at func(string) string, p *Pipeline) {
	c.effectDefaults(at("effect"), &p.Effect)
	for _, name := range slices.Sorted(mapKeys(p.Effects)) {
		e := p.Effects[name]
		c.effectDefaults(keyPath(at("effects"), name), &e)
		p.Effects[name] = e
	}
	if p.Step != nil {
		setDefault(c, at("step.answer_attempts"), &p.Step.AnswerAttempts, DefaultAnswerAttempts)
	}
}

// secretHeader reports whether a static header's name says its value is a
// secret.
func secretHeader(name string) bool {
	n := strings.ToLower(name)
	if n == "authorization" || n == "cookie" || n == "proxy-authorization" {
		return true
	}
	for _, s := range []string{"token", "key", "secret", "password", "signature"} {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	return false
}

// condition compiles a CEL condition for Validate, reporting it at path;
// answer says whether it may read the answer. A condition whose worst case
// grows faster than the trigger (cond.Condition.Check) is refused.
func (v *validator) condition(path, expr string, answer bool, why string) {
	if expr == "" {
		return
	}
	c, err := cond.Compile(expr)
	if err != nil {
		v.add(path, invalid("%v", err))
		return
	}
	if c.UsesAnswer() && !answer {
		v.add(path, invalid("%q reads the answer, which %s", expr, why))
	}
	if err := c.Check(); err != nil {
		v.add(path, invalid("%v", err))
	}
}

// template parses a template for Validate.
func (v *validator) template(path, text string) {
	if text == "" {
		return
	}
	if _, err := tmpl.Parse(path, text); err != nil {
		var te *tmpl.Error
		if errors.As(err, &te) {
			err = te.Err
		}
		v.add(path, invalid("%v", err))
	}
}

// effects checks a pipeline's effects, routes, filter and step conditions.
func (v *validator) effects(at func(string) string, p *Pipeline, subjectOK bool) {
	single := p.Effect.IsSet()
	switch {
	case single && len(p.Effects) > 0:
		v.add(at("effects"), invalid("set effect or effects, not both"))
	case !single && len(p.Effects) == 0:
		v.add(at("effect.sink"), missing("want one of %s (or a preset, or named effects)", strings.Join([]string{SinkJetStream, SinkHTTP, SinkFile}, ", ")))
	case single:
		v.effect(at("effect"), &p.Effect, p, subjectOK, true)
	}
	for _, name := range slices.Sorted(mapKeys(p.Effects)) {
		path := keyPath(at("effects"), name)
		if err := checkName(name); err != nil {
			v.add(path, err)
		}
		e := p.Effects[name]
		v.effect(path, &e, p, subjectOK, false)
	}
	if p.Mode == ModeGateWindow && (len(p.Effects) > 0 || len(p.Routes) > 0) {
		v.add(at("effects"), invalid("mode gate-window publishes one effect per trigger: no effects or routes"))
	}
	v.condition(at("when"), p.When, false, "is not there before the model step: when filters triggers before they are claimed")
	if p.Step != nil {
		v.condition(at("step.skip_when"), p.Step.SkipWhen, false, "does not exist before the step runs")
	}
	if len(p.Routes) > 0 && len(p.Effects) == 0 {
		v.add(at("routes"), invalid("routes choose among named effects: define them under effects"))
	}
	names := map[string]int{}
	for i, r := range p.Routes {
		rat := func(f string) string { return joinPath(indexPath(at("routes"), i), f) }
		if err := checkName(r.Name); err != nil {
			v.add(rat("name"), err)
		} else if j, dup := names[r.Name]; dup {
			v.add(rat("name"), invalid("route %q is defined twice (also routes[%d])", r.Name, j))
		} else {
			names[r.Name] = i
		}
		v.condition(rat("when"), r.When, p.Step != nil, "a pipeline without a step does not have")
		if len(r.Effects) == 0 {
			v.add(rat("effects"), missing("a route performs at least one effect"))
		}
		for j, name := range r.Effects {
			if _, ok := p.Effects[name]; !ok && len(p.Effects) > 0 {
				v.add(indexPath(rat("effects"), j), invalid("%q is not one of the pipeline's effects (%s)", name, strings.Join(slices.Sorted(mapKeys(p.Effects)), ", ")))
			}
		}
	}
}

// effect checks one effect at path; single says it is the pipeline's
// single effect.
func (v *validator) effect(path string, e *Effect, p *Pipeline, subjectOK, single bool) {
	at := func(f string) string { return joinPath(path, f) }
	only := func(field, val, sink string) {
		if val != "" {
			v.add(at(field), invalid("only used with sink %s", sink))
		}
	}
	if e.Preset != "" {
		if _, ok := presetFields[e.Preset]; !ok {
			v.add(at("preset"), invalid("%q is not one of %s, %s, %s, %s", e.Preset, PresetSlack, PresetPagerDuty, PresetJira, PresetWebhook))
		} else if e.Preset != PresetWebhook && e.Sink != SinkHTTP {
			v.add(at("sink"), invalid("preset %s sends with sink http, not %q", e.Preset, e.Sink))
		}
	}
	fields := e.Fields()
	for _, f := range slices.Sorted(mapKeys(fields)) {
		if fields[f] == "" {
			continue
		}
		if !slices.Contains(presetFields[e.Preset], f) {
			if e.Preset == "" {
				v.add(at(f), invalid("a preset field: set a preset that takes it"))
			} else {
				v.add(at(f), invalid("preset %s has no field %s", e.Preset, f))
			}
			continue
		}
		v.template(at(f), fields[f])
	}
	v.template(at("body"), e.Body)
	v.template(at("subject_suffix"), e.SubjectSuffix)
	pd, jira := e.Preset == PresetPagerDuty, e.Preset == PresetJira
	if !pd {
		only("routing_key_env", e.RoutingKeyEnv, "http and preset pagerduty")
		only("routing_key_file", e.RoutingKeyFile, "http and preset pagerduty")
	} else if (e.RoutingKeyEnv == "") == (e.RoutingKeyFile == "") {
		v.add(at("routing_key_env"), missing("preset pagerduty needs its integration key: set routing_key_env or routing_key_file"))
	}
	if !jira {
		for f, val := range map[string]string{"user_env": e.UserEnv, "user_file": e.UserFile, "token_env": e.TokenEnv, "token_file": e.TokenFile} {
			only(f, val, "http and preset jira")
		}
	} else {
		if (e.UserEnv == "") == (e.UserFile == "") {
			v.add(at("user_env"), missing("preset jira needs the account's email: set user_env or user_file"))
		}
		if (e.TokenEnv == "") == (e.TokenFile == "") {
			v.add(at("token_env"), missing("preset jira needs the account's API token: set token_env or token_file"))
		}
		if e.Project == "" && e.Body == "" {
			v.add(at("project"), missing("preset jira needs the project key"))
		}
	}
	for _, env := range []struct{ f, name string }{{"url_env", e.URLEnv}, {"routing_key_env", e.RoutingKeyEnv}, {"user_env", e.UserEnv}, {"token_env", e.TokenEnv}} {
		if env.name != "" {
			if err := checkEnvName(env.name); err != nil {
				v.add(at(env.f), err)
			}
		}
	}
	if v.oneOf(at("sink"), e.Sink, SinkJetStream, SinkHTTP, SinkFile) {
		if e.Sink != SinkJetStream {
			only("subject", e.Subject, SinkJetStream)
			only("subject_suffix", e.SubjectSuffix, SinkJetStream)
		}
		if e.Sink != SinkHTTP {
			only("url", e.URL, SinkHTTP)
			only("url_env", e.URLEnv, SinkHTTP)
			only("url_file", e.URLFile, SinkHTTP)
			only("method", e.Method, SinkHTTP)
			if len(e.HeadersEnv) > 0 {
				v.add(at("headers_env"), invalid("only used with sink http"))
			}
			if len(e.Headers) > 0 {
				v.add(at("headers"), invalid("only used with sink http"))
			}
		}
		if e.Sink != SinkFile {
			only("dir", e.Dir, SinkFile)
		}
		switch e.Sink {
		case SinkJetStream:
			if e.Subject == "" {
				v.add(at("subject"), missing("required for sink jetstream"))
			} else if err := checkSubject(e.Subject, true); err != nil {
				v.add(at("subject"), err)
			} else if subjectOK && subjectCovers(p.Subject, e.Subject) {
				v.add(at("subject"), invalid("%q is consumed by the pipeline itself (%q): every effect would trigger it again", e.Subject, p.Subject))
			}
		case SinkHTTP:
			n := 0
			for _, u := range []string{e.URL, e.URLEnv, e.URLFile} {
				if u != "" {
					n++
				}
			}
			switch {
			case n == 0:
				v.add(at("url"), missing("required for sink http: set url, url_env or url_file"))
			case n > 1:
				v.add(at("url"), invalid("set one of url, url_env and url_file"))
			case e.URL != "":
				if err := checkURL(e.URL, "http", "https"); err != nil {
					v.add(at("url"), err)
				}
			}
			if e.Method != "" && e.Method != "POST" && e.Method != "PUT" && e.Method != "PATCH" {
				v.add(at("method"), invalid("%q: want POST, PUT or PATCH", e.Method))
			}
			for _, h := range slices.Sorted(mapKeys(e.HeadersEnv)) {
				hp := keyPath(at("headers_env"), h)
				if !validHeaderName(h) {
					v.add(hp, invalid("%q is not an HTTP header name", h))
				} else if i := slices.IndexFunc(reservedHeaders, func(r string) bool { return strings.EqualFold(r, h) }); i >= 0 {
					v.add(hp, invalid("the sink sets %s itself", reservedHeaders[i]))
				}
				if err := checkEnvName(e.HeadersEnv[h]); err != nil {
					v.add(hp, err)
				}
			}
			for _, h := range slices.Sorted(mapKeys(e.Headers)) {
				hp := keyPath(at("headers"), h)
				switch {
				case !validHeaderName(h):
					v.add(hp, invalid("%q is not an HTTP header name", h))
				case secretHeader(h):
					v.add(hp, invalid("%s looks like a secret, and secrets are not read from the config file: name the environment variable that holds it under headers_env", h))
				case slices.ContainsFunc(reservedHeaders, func(r string) bool { return strings.EqualFold(r, h) && r != "Content-Type" }):
					v.add(hp, invalid("the sink sets %s itself", h))
				case strings.ContainsAny(e.Headers[h], "\r\n"):
					v.add(hp, invalid("a header value is one line"))
				}
				if _, both := e.HeadersEnv[h]; both {
					v.add(hp, invalid("also set by headers_env"))
				}
			}
		case SinkFile:
			if e.Dir == "" {
				v.add(at("dir"), missing("required for sink file"))
			}
		}
	}
	v.oneOf(at("class"), e.Class, ClassReplayable, ClassOneShot)
	switch {
	case e.Retry.Backoff < 0 || e.Retry.MaxBackoff < 0:
		v.add(at("retry"), invalid("backoff and max_backoff must be 0 or positive"))
	case e.Retry.MaxBackoff > 0 && e.Retry.Backoff > e.Retry.MaxBackoff:
		v.add(at("retry.backoff"), invalid("%s is over max_backoff %s", formatDuration(e.Retry.Backoff), formatDuration(e.Retry.MaxBackoff)))
	}
	switch {
	case e.Digest.Window < 0:
		v.add(at("digest.window"), invalid("must be 0 or positive, got %s", formatDuration(e.Digest.Window)))
	case e.Digest.Window > 0 && e.Preset != PresetSlack:
		v.add(at("digest"), invalid("a digest is for the slack preset's messages"))
	case e.Digest.Window > 0 && e.Class != ClassOneShot:
		v.add(at("digest"), invalid("a digest gathers one-shot messages; this effect is %s", e.Class))
	case e.Digest.Window == 0 && e.Digest.Group != "":
		v.add(at("digest.group"), invalid("a digest group needs digest.window"))
	}
	v.template(at("digest.group"), e.Digest.Group)
	switch {
	case e.RateLimit.Requests < 0:
		v.add(at("rate_limit.requests"), invalid("must be 0 (no limit) or positive, got %d", e.RateLimit.Requests))
	case e.RateLimit.Per < 0:
		v.add(at("rate_limit.per"), invalid("must be positive, got %s", formatDuration(e.RateLimit.Per)))
	case e.RateLimit.Requests > 0 && e.Sink != SinkHTTP:
		v.add(at("rate_limit"), invalid("a rate limit is for http effects; this one is %s", e.Sink))
	}
	if !single && (e.Delay != 0 || e.ApprovalSubject != "" || e.ApprovalTimeout != 0) {
		v.add(at("delay"), invalid("delay, approval_subject and approval_timeout are for a pipeline's single effect"))
		return
	}
	if e.Delay < 0 {
		v.add(at("delay"), invalid("must be 0 or positive, got %s", formatDuration(e.Delay)))
	} else if e.Delay > 0 && e.Class != ClassOneShot {
		v.add(at("delay"), invalid("a delay window is for one-shot effects; this one is %s", e.Class))
	}
	if e.ApprovalSubject != "" {
		if e.Class != ClassOneShot {
			v.add(at("approval_subject"), invalid("approval is for one-shot effects; this one is %s", e.Class))
		} else if err := checkSubject(e.ApprovalSubject, true); err != nil {
			v.add(at("approval_subject"), err)
		}
	}
	switch {
	case e.ApprovalTimeout < 0:
		v.add(at("approval_timeout"), invalid("must be positive, got %s", formatDuration(e.ApprovalTimeout)))
	case e.ApprovalTimeout > 0 && e.ApprovalSubject == "":
		v.add(at("approval_timeout"), invalid("an approval timeout needs approval_subject"))
	}
}

// schema checks a step's JSON Schema.
func (v *validator) schema(path string, s JSONValue) {
	if len(s) == 0 {
		return
	}
	if _, err := CompileSchema(s); err != nil {
		v.add(path, invalid("%v", err))
	}
}

// CompileSchema compiles a step's JSON Schema (draft 2020-12 unless it
// says otherwise with $schema). The schema must describe an object, as
// the providers' structured output requires.
func CompileSchema(s JSONValue) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(s)))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	if m, ok := doc.(map[string]any); !ok || m["type"] != "object" {
		return nil, errors.New(`the schema must describe an object ("type": "object")`)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("step.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("step.json")
}

// EffectSecrets are the secret values of one effect, read from the
// environment and files.
type EffectSecrets struct {
	// URL is the effect's URL: URL as written, or read from URLEnv or
	// URLFile.
	URL string
	// Headers are the HeadersEnv headers' values.
	Headers map[string]string
	// RoutingKey, User and Token are the presets' secrets.
	RoutingKey, User, Token string
}

// LookupFunc reads an environment variable, as os.LookupEnv.
type LookupFunc func(string) (string, bool)

// Secrets reads the effect's secrets with lookup (os.LookupEnv when nil)
// and secretfile.ReadFile (a file open to others is refused). path is the effect's path for the error, which is a
// *FieldError naming the field and the variable or file: the one error
// run, which refuses to start without them, and config check give.
func (e *Effect) Secrets(path string, lookup LookupFunc) (EffectSecrets, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var errs []error
	read := func(field, env, file string) string {
		switch {
		case env != "":
			v, ok := lookup(env)
			if !ok {
				errs = append(errs, &FieldError{Path: joinPath(path, field), Err: invalid("environment variable %s is not set", env)})
			}
			return v
		case file != "":
			b, err := secretfile.ReadFile(file)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					err = fs.ErrNotExist
				}
				errs = append(errs, &FieldError{Path: joinPath(path, strings.Replace(field, "_env", "_file", 1)), Err: invalid("%s: %v", file, err)})
			}
			return strings.TrimSpace(string(b))
		}
		return ""
	}
	s := EffectSecrets{URL: e.URL, Headers: map[string]string{}}
	if u := read("url_env", e.URLEnv, e.URLFile); u != "" {
		s.URL = u
		if err := checkURL(u, "http", "https"); err != nil {
			errs = append(errs, &FieldError{Path: joinPath(path, "url_env"), Err: err})
		}
	}
	for _, h := range slices.Sorted(mapKeys(e.HeadersEnv)) {
		env := e.HeadersEnv[h]
		v, ok := lookup(env)
		if !ok {
			errs = append(errs, &FieldError{Path: keyPath(joinPath(path, "headers_env"), h), Err: invalid("effect header %s: environment variable %s is not set", h, env)})
		}
		s.Headers[h] = v
	}
	s.RoutingKey = read("routing_key_env", e.RoutingKeyEnv, e.RoutingKeyFile)
	s.User = read("user_env", e.UserEnv, e.UserFile)
	s.Token = read("token_env", e.TokenEnv, e.TokenFile)
	return s, errors.Join(errs...)
}

// CheckSecrets reads the secrets of every effect as run does, and returns
// the errors run would refuse to start with.
func (c *Config) CheckSecrets(lookup LookupFunc) error {
	var errs []error
	for i := range c.Pipelines {
		p := &c.Pipelines[i]
		for _, e := range p.AllEffects() {
			path := joinPath(indexPath("pipelines", i), "effect")
			if e.Name != "" {
				path = keyPath(joinPath(indexPath("pipelines", i), "effects"), e.Name)
			}
			if _, err := e.Secrets(c.displayPath(path), lookup); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// schemaJSON returns s compacted, for keys.
func schemaJSON(s JSONValue) string {
	var v any
	if json.Unmarshal(s, &v) != nil {
		return string(s)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
