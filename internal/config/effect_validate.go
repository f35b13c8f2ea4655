package config

import (
	"errors"
	"slices"
	"strings"

	"github.com/oncegate/oncegate/internal/cond"
	"github.com/oncegate/oncegate/internal/tmpl"
)

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

// reservedHeaders are set by the http sink itself.
var reservedHeaders = []string{"Idempotency-Key", "Content-Type", "Content-Length", "Host"}
