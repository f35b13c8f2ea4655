package config

import (
	"fmt"
	"net/url"
)

// Tracing configures OpenTelemetry tracing. It is off unless OTLPEndpoint
// is set.
//
// With tracing on, each trigger is one trace (or continues the trace of a
// W3C traceparent header on the trigger), with a span for each step of the
// gate it went through — key, window, ledger claim, model call, effect,
// ledger commit, settle — and its effect carries the trace context on
// (traceparent on an effect message or an HTTP effect). The exporter also
// honours the OpenTelemetry SDK's OTEL_EXPORTER_OTLP_* variables for what
// this section does not say (headers, timeouts, certificates).
type Tracing struct {
	// OTLPEndpoint is the URL of an OTLP/HTTP collector's trace endpoint
	// base, e.g. "http://localhost:4318" (spans are sent to
	// /v1/traces below it unless the URL has a path). Empty (the default)
	// turns tracing off.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// SampleRatio is the share of new traces kept, from 0 to 1; a trigger
	// that continues a trace follows its parent's decision. The default is
	// 1: every trace.
	SampleRatio float64 `yaml:"sample_ratio"`
	// ServiceName is the service.name of the spans. The default is
	// "oncegate".
	ServiceName string `yaml:"service_name"`
}

// Defaults of tracing.
const (
	DefaultTraceSampleRatio = 1.0
	DefaultTraceServiceName = "oncegate"
)

// On reports whether tracing is configured.
func (t Tracing) On() bool { return t.OTLPEndpoint != "" }

func (c *Config) tracingDefaults() {
	setDefault(c, "tracing.sample_ratio", &c.Tracing.SampleRatio, DefaultTraceSampleRatio)
	setDefault(c, "tracing.service_name", &c.Tracing.ServiceName, DefaultTraceServiceName)
}

func (v *validator) tracing() {
	t := &v.c.Tracing
	if t.OTLPEndpoint != "" {
		u, err := url.Parse(t.OTLPEndpoint)
		switch {
		case err != nil:
			v.add("tracing.otlp_endpoint", invalid("%v", err))
		case u.Scheme != "http" && u.Scheme != "https":
			v.add("tracing.otlp_endpoint", invalid("%q must be an http:// or https:// URL (OTLP over HTTP)", t.OTLPEndpoint))
		case u.Host == "":
			v.add("tracing.otlp_endpoint", invalid("%q has no host", t.OTLPEndpoint))
		case u.User != nil:
			v.add("tracing.otlp_endpoint", invalid("must not carry a user or password (set OTEL_EXPORTER_OTLP_HEADERS instead)"))
		}
	}
	if t.SampleRatio < 0 || t.SampleRatio > 1 || t.SampleRatio != t.SampleRatio {
		v.add("tracing.sample_ratio", invalid("must be from 0 to 1, got %v", t.SampleRatio))
	}
	if t.ServiceName == "" {
		v.add("tracing.service_name", missing("a service name"))
	}
}

// tracing explains the tracing section.
func (x *explainer) tracing() {
	c := x.c
	if t := c.Tracing; t.On() {
		x.row("tracing", "OTLP/HTTP to "+t.OTLPEndpoint, "sample ratio "+x.d("tracing.sample_ratio", t.SampleRatio, fmt.Sprint(t.SampleRatio)),
			"service "+x.d("tracing.service_name", t.ServiceName, t.ServiceName))
	} else {
		x.row("tracing", "off (set tracing.otlp_endpoint to trace each trigger)")
	}
}
