package consumer

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/sink"
)

// Package sink knows sinks and their options, not the configuration (it
// does not import it): this file turns an effect's configuration into them.

// NewSink returns the sink an effect's configuration describes: the target
// a pipeline's effect goes to (for a one-shot effect, the sink its
// dispatcher sends with). Secrets — header values, a URL from url_env or
// url_file, a preset's routing key or credentials — are read as
// config.Effect.Secrets reads them; one that is not set is that error.
// path names the effect in errors ("pipelines[alerts].effects[slack]").
func NewSink(js jetstream.Publisher, path string, e *config.Effect) (sink.Sink, error) {
	switch e.Sink {
	case config.SinkJetStream:
		return sink.NewJetStream(js, sink.JetStreamOptions{Subject: e.Subject})
	case config.SinkHTTP:
		sec, err := e.Secrets(path, nil)
		if err != nil {
			return nil, &sink.Error{Sink: "http", Err: err}
		}
		h := map[string]string{}
		for k, v := range e.Headers {
			h[k] = v
		}
		for k, v := range sec.Headers {
			h[k] = v
		}
		opts := sink.HTTPOptions{
			URL: sec.URL, Method: e.Method, Header: h, OneShot: e.Class == config.ClassOneShot,
			SecretURL: e.URLEnv != "" || e.URLFile != "",
			Backoff:   e.Retry.Backoff, MaxBackoff: e.Retry.MaxBackoff,
			RateLimit: sink.RateLimit{Requests: e.RateLimit.Requests, Per: e.RateLimit.Per},
		}
		switch e.Preset {
		case config.PresetPagerDuty:
			opts.BodyFields = map[string]string{"routing_key": sec.RoutingKey}
			opts.Coalesce = sink.CoalescePagerDuty
		case config.PresetSlack:
			if e.Digest.Window > 0 {
				opts.Digest = &sink.Digest{Window: e.Digest.Window, Merge: sink.MergeSlack}
			}
		case config.PresetJira:
			h["Authorization"] = "Basic " + base64.StdEncoding.EncodeToString([]byte(sec.User+":"+sec.Token))
			if u, err := url.Parse(opts.URL); err == nil && strings.Trim(u.Path, "/") == "" {
				u.Path = config.JiraIssuePath
				opts.URL = u.String()
			}
		}
		return sink.NewHTTP(opts)
	case config.SinkFile:
		return sink.NewFile(sink.FileOptions{Dir: e.Dir})
	}
	return nil, fmt.Errorf("sink: unknown sink %q", e.Sink)
}

// effectTemplate returns the compiled templates of an effect, or nil if it
// has none (no preset, body or subject suffix): it sends the consumer's
// default body.
func effectTemplate(path string, e *config.Effect) (*sink.Template, error) {
	if e.Preset == "" && e.Body == "" && e.SubjectSuffix == "" {
		return nil, nil
	}
	return sink.NewTemplate(sink.TemplateOptions{
		Name: path, Preset: e.Preset, Body: e.Body, SubjectSuffix: e.SubjectSuffix,
		JSON: e.Sink == config.SinkHTTP && jsonContent(e.Headers),
		Fields: sink.PresetFields{
			Text: e.Text, Summary: e.Summary, Link: e.Link, EventAction: e.EventAction, DedupKey: e.DedupKey,
			Severity: e.Severity, Source: e.Source, Project: e.Project, IssueType: e.IssueType,
		},
	})
}

// jsonContent reports whether static headers leave the content type JSON.
func jsonContent(h map[string]string) bool {
	for k, v := range h {
		if strings.EqualFold(k, "Content-Type") {
			return strings.Contains(strings.ToLower(v), "json")
		}
	}
	return true
}

// retrySchedule is an effect's retry schedule (config.EffectRetry), with
// the defaults for an effect built in Go without them.
func retrySchedule(e *config.Effect) func(n int) time.Duration {
	r := e.Retry
	if r.Backoff <= 0 {
		r.Backoff = config.DefaultEffectBackoff
	}
	if r.MaxBackoff <= 0 {
		r.MaxBackoff = max(config.DefaultEffectMaxBackoff, r.Backoff)
	}
	return r.Delay
}
