package app

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/version"
)

// tracerProvider builds the tracer provider of tracing.otlp_endpoint, or
// returns nil when tracing is off. It exports in batches over OTLP/HTTP;
// its shutdown, added to the closers, flushes what is left.
func (a *App) tracerProvider(cfg *config.Config, o Options) (trace.TracerProvider, error) {
	if o.Tracer != nil {
		return o.Tracer, nil
	}
	tc := cfg.Tracing
	if !tc.On() {
		return nil, nil
	}
	endpoint := tc.OTLPEndpoint
	if u, err := url.Parse(endpoint); err == nil && (u.Path == "" || u.Path == "/") {
		u.Path = "/v1/traces" // a collector's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is
		endpoint = u.String()
	}
	// The SDK reports export failures to a process-wide handler, by
	// default on standard error in its own format: send them to our log.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		a.log.Warn("tracing: span export failed", "err", err)
	}))
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("app: tracing exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(tc.ServiceName), semconv.ServiceVersion(version.Get().Version)))
	if err != nil {
		return nil, fmt.Errorf("app: tracing resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(tc.SampleRatio))),
	)
	a.closers = append(a.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("app: tracing shutdown: %w", err)
		}
		return nil
	})
	a.log.Info("tracing", "otlp_endpoint", endpoint, "sample_ratio", tc.SampleRatio)
	return tp, nil
}
