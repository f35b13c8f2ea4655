package consumer

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/oncegate/oncegate/internal/cond"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/internal/tmpl"
	"github.com/oncegate/oncegate/pkg/canon"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Preview writes to w what pipeline p would do with one sample trigger —
// its key, the filter's and the route's decisions, the rendered prompt,
// and the rendered request of each effect — without calling anything:
// no model, no ledger, no sink. answer, if not nil, stands for the
// model's answer (JSON for a step with a schema); without it, conditions
// and templates that read the answer are reported as needing one. Secrets
// are never printed: a URL from url_env or url_file, headers_env values,
// routing keys and credentials are named by where they come from.
//
// It returns an error for a trigger the pipeline would dead-letter (the
// reason and why), after writing what it could.
func Preview(w io.Writer, p *config.Pipeline, payload []byte, headers map[string]string, answer []byte) error {
	fail := func(reason string, err error) error {
		fmt.Fprintf(w, "  => dead letter, reason %s: %v\n", reason, err)
		return fmt.Errorf("the trigger would be dead-lettered (%s): %w", reason, err)
	}
	keyer, err := dedupe.NewKeyer(KeySpec(p))
	if err != nil {
		return err
	}
	var in dedupe.Intent
	if len(p.Key.Headers) > 0 {
		in, err = keyer.HeaderIntent("", func(k string) string { return headers[http.CanonicalHeaderKey(k)] + headers[k] }, payload)
	} else {
		in, err = keyer.Intent(payload)
	}
	if err != nil {
		return fail(string(classify(err)), err)
	}
	doc, err := tmpl.DecodeJSON(payload)
	if err != nil {
		return fail("invalid_json", err)
	}
	ti := tmpl.Input{Trigger: doc, Headers: headers, Key: in.Key.String(), Identity: in.Key.String(), Pipeline: p.Name}
	if p.Step != nil {
		ti.Step = p.Step.Name
	}
	if p.Key.Status != "" {
		if ptr, err := canon.ParsePointer(p.Key.Status); err == nil {
			c, _ := canon.New(KeySpec(p).Limits)
			if cd, err := c.Append(nil, payload); err == nil {
				if raw, ok, _ := canon.Lookup(cd, ptr); ok {
					ti.Status = strings.Trim(string(raw), `"`)
					ti.Key = StatusKey(in.Key, ti.Status).String()
				}
			}
		}
	}
	fmt.Fprintf(w, "pipeline %s\n  key       %s", p.Name, ti.Key)
	if ti.Status != "" {
		fmt.Fprintf(w, " (identity %s, status %s)", ti.Identity, ti.Status)
	}
	fmt.Fprintln(w)
	eval := func(what, expr string, vars cond.Vars) (bool, error) {
		c, err := cond.Compile(expr)
		if err != nil {
			return false, err
		}
		if c.UsesAnswer() && ti.Answer == nil && p.Step != nil {
			return false, fmt.Errorf("%s reads the answer: give one with -answer FILE", what)
		}
		return c.Eval(vars)
	}
	if p.When != "" {
		ok, err := eval("when", p.When, cond.NewVars(ti))
		if err != nil {
			return fail("condition", err)
		}
		fmt.Fprintf(w, "  filter    when %s: %v\n", p.When, ok)
		if !ok {
			fmt.Fprintln(w, "  => filtered: acked, never claimed, paid for or sent")
			return nil
		}
	}
	skip := false
	if p.Step != nil {
		if p.Step.SkipWhen != "" {
			if skip, err = eval("skip_when", p.Step.SkipWhen, cond.NewVars(ti)); err != nil {
				return fail("condition", err)
			}
		}
		if skip {
			fmt.Fprintf(w, "  step      %s skipped (skip_when %s): no model call\n", p.Step.Name, p.Step.SkipWhen)
		} else {
			t, err := StepTemplates(p.Step)
			if err != nil {
				return err
			}
			for _, name := range []string{"system", "prompt"} {
				out, err := tmpl.Execute(t, name, doc, tmpl.Text)
				if err != nil {
					return fail("template", err)
				}
				if s := strings.TrimSpace(string(out)); s != "" {
					fmt.Fprintf(w, "  %-9s %s\n", name, indent(s, "            "))
				}
			}
			if len(p.Step.Schema) > 0 {
				fmt.Fprintf(w, "  schema    response_format json_schema %s\n", p.Step.Schema)
			}
			if answer != nil {
				a := &tmpl.Answer{Text: string(answer), Model: p.Step.Model}
				if len(p.Step.Schema) > 0 {
					sch, err := config.CompileSchema(p.Step.Schema)
					if err != nil {
						return err
					}
					s := &step{schema: sch}
					if a.Fields, err = s.check(string(answer)); err != nil {
						return fail("bad_answer", err)
					}
				}
				ti.Answer = a
				fmt.Fprintf(w, "  answer    %s\n", indent(strings.TrimSpace(string(answer)), "            "))
			} else {
				fmt.Fprintln(w, "  answer    (not asked for; -answer FILE stands for one)")
			}
		}
	}
	if skip {
		ti.Answer = nil
	}
	targets := p.AllEffects()
	only := func(r config.Route) []config.NamedEffect {
		return slices.DeleteFunc(slices.Clone(targets), func(e config.NamedEffect) bool { return !slices.Contains(r.Effects, e.Name) })
	}
	if len(p.Routes) > 0 && ti.Status == ResolvedStatus && p.Mode != config.ModeGateWindow {
		// A resolve takes its firing's recorded route (lifecycle.go),
		// which only the ledger knows: each route it may be is shown.
		fmt.Fprintln(w, "  route     a resolve goes where its firing went: its firing's recorded route, read at run time (none recorded: nothing sent)")
		for _, r := range p.Routes {
			fmt.Fprintf(w, "  if its firing took %s → %s\n", r.Name, strings.Join(r.Effects, " + "))
			if err := renderEffects(w, p, ti, payload, r.Name, only(r), fail); err != nil {
				return err
			}
		}
		return nil
	}
	route := ""
	if len(p.Routes) > 0 {
		vars := cond.NewVars(ti)
		chosen := -1
		for i, r := range p.Routes {
			ok := true
			if r.When != "" {
				if ok, err = eval("route "+r.Name, r.When, vars); err != nil {
					return fail("condition", err)
				}
			}
			if ok {
				chosen = i
				break
			}
		}
		if chosen < 0 {
			fmt.Fprintln(w, "  route     none holds: committed with nothing sent, counted as filtered (rule routes)")
			return nil
		}
		r := p.Routes[chosen]
		route = r.Name
		fmt.Fprintf(w, "  route     %s → %s\n", r.Name, strings.Join(r.Effects, " + "))
		targets = only(r)
	}
	return renderEffects(w, p, ti, payload, route, targets, fail)
}

// renderEffects writes the rendered request of each of targets, the
// effects of route.
func renderEffects(w io.Writer, p *config.Pipeline, ti tmpl.Input, payload []byte, route string, targets []config.NamedEffect, fail func(string, error) error) error {
	ik, _ := dedupe.ParseKey(ti.Key)
	for _, e := range targets {
		path := fmt.Sprintf("pipelines[%s].effect", p.Name)
		key := ti.Key
		if e.Name != "" {
			path = fmt.Sprintf("pipelines[%s].effects[%s]", p.Name, e.Name)
			key = EffectKey(ik, e.Name).String()
		}
		ti.Route, ti.Effect = route, e.Name
		tp, err := effectTemplate(path, e.Effect)
		if err != nil {
			return err
		}
		var body []byte
		suffix := ""
		if tp != nil {
			if body, suffix, err = tp.Render(ti.Data()); err != nil {
				return fail("template", err)
			}
		}
		if body == nil {
			body = payload
			if p.Step != nil {
				body = []byte("(Oncegate's envelope: key, pipeline, step, model, answer, trigger)")
			}
		}
		label := "effect"
		if e.Name != "" {
			label = "effect " + e.Name
		}
		fmt.Fprintf(w, "  %s (%s)\n", label, e.Class)
		switch e.Sink {
		case config.SinkJetStream:
			subj := e.Subject
			if suffix != "" {
				subj += "." + suffix
			}
			fmt.Fprintf(w, "    PUBLISH %s\n    Nats-Msg-Id: %s\n", subj, key)
		case config.SinkFile:
			fmt.Fprintf(w, "    WRITE %s/%s.json\n", e.Dir, key)
		case config.SinkHTTP:
			method := e.Method
			if method == "" {
				method = http.MethodPost
			}
			target := redactedURL(e.URL)
			switch {
			case e.URLEnv != "":
				target = "REDACTED (the URL in $" + e.URLEnv + ")"
			case e.URLFile != "":
				target = "REDACTED (the URL in file " + e.URLFile + ")"
			case e.Preset == config.PresetJira:
				target = strings.TrimSuffix(target, "/") + config.JiraIssuePath
			}
			fmt.Fprintf(w, "    %s %s\n", method, target)
			hs := map[string]string{"Idempotency-Key": key, "User-Agent": sink.DefaultUserAgent(), "Content-Type": "application/json",
				sink.PipelineHeader: p.Name}
			if p.Step != nil {
				hs[sink.StepHeader] = p.Step.Name
			}
			for k, v := range e.Headers {
				hs[k] = v
			}
			for k, env := range e.HeadersEnv {
				hs[k] = "REDACTED (from $" + env + ")"
			}
			if e.Preset == config.PresetJira {
				hs["Authorization"] = "Basic REDACTED (from " + orFile(e.UserEnv, e.UserFile) + " and " + orFile(e.TokenEnv, e.TokenFile) + ")"
			}
			for _, k := range slices.Sorted(func(yield func(string) bool) {
				for k := range hs {
					if !yield(k) {
						return
					}
				}
			}) {
				fmt.Fprintf(w, "    %s: %s\n", k, hs[k])
			}
			if e.Preset == config.PresetPagerDuty {
				fmt.Fprintf(w, "    (routing_key added to the body when sent, from %s)\n", orFile(e.RoutingKeyEnv, e.RoutingKeyFile))
			}
		}
		fmt.Fprintf(w, "\n    %s\n", indent(string(body), "    "))
	}
	return nil
}

func orFile(env, file string) string {
	if env != "" {
		return "$" + env
	}
	return "file " + file
}

func indent(s, prefix string) string { return strings.ReplaceAll(s, "\n", "\n"+prefix) }

// redactedURL is u without user information or query values.
func redactedURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "REDACTED"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "REDACTED"
	}
	return u.String()
}
