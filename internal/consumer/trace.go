package consumer

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing: with Options.Tracer set, each trigger is a trace, or continues
// the one its W3C traceparent header names. Its root span covers the
// trigger's way through the gate, with a child span per step:
//
//	oncegate.trigger <pipeline>
//	├── oncegate.key
//	├── oncegate.window
//	├── oncegate.ledger.claim
//	├── chat <model>            (the GenAI semantic conventions' attributes)
//	├── oncegate.effect         (its traceparent goes out with the effect)
//	├── oncegate.ledger.commit
//	└── oncegate.settle
//
// Without a Tracer none of it runs: every helper below is a nil check.

// tracerName is the instrumentation scope of Oncegate's spans.
const tracerName = "github.com/oncegate/oncegate/internal/consumer"

// propagator reads and writes the W3C trace context and baggage.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// noSpan stands for a span when tracing is off.
var noSpan trace.Span = noop.Span{}

// Span attributes of Oncegate's own.
const (
	attrPipeline    = attribute.Key("oncegate.pipeline")
	attrKey         = attribute.Key("oncegate.key")
	attrDuplicate   = attribute.Key("oncegate.duplicate")
	attrClaim       = attribute.Key("oncegate.claim.status")
	attrAttempts    = attribute.Key("oncegate.claim.attempts")
	attrVerdict     = attribute.Key("oncegate.verdict")
	attrReason      = attribute.Key("oncegate.reason")
	attrSink        = attribute.Key("oncegate.effect.sink")
	attrOutcome     = attribute.Key("oncegate.effect.outcome")
	attrCache       = attribute.Key("oncegate.llm.cache")
	attrDeliveries  = attribute.Key("messaging.nats.delivery_count")
	attrStreamSeq   = attribute.Key("messaging.nats.stream_sequence")
	attrMsgSystem   = attribute.Key("messaging.system")
	attrMsgDest     = attribute.Key("messaging.destination.name")
	attrMsgOp       = attribute.Key("messaging.operation.type")
	attrGenOp       = attribute.Key("gen_ai.operation.name")
	attrGenProvider = attribute.Key("gen_ai.provider.name")
	attrGenReqModel = attribute.Key("gen_ai.request.model")
	attrGenResModel = attribute.Key("gen_ai.response.model")
	attrGenIn       = attribute.Key("gen_ai.usage.input_tokens")
	attrGenOut      = attribute.Key("gen_ai.usage.output_tokens")
)

// headerCarrier reads and writes a NATS message's headers for the
// propagator.
type headerCarrier nats.Header

func (h headerCarrier) Get(k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	for name, v := range h { // NATS headers keep their case; W3C's are lower case
		if strings.EqualFold(name, k) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

func (h headerCarrier) Set(k, v string) { h[k] = []string{v} }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// traceBegin starts t's root span, continuing the trace of its headers.
func (g *gate) traceBegin(ctx context.Context, t *Trigger) {
	tr := g.c.tracer
	if tr == nil {
		return
	}
	parent := propagator.Extract(ctx, headerCarrier(t.msg.Headers()))
	attrs := []attribute.KeyValue{
		attrPipeline.String(g.pipeline),
		attrMsgSystem.String("nats"),
		attrMsgDest.String(t.msg.Subject()),
		attrMsgOp.String("process"),
	}
	if meta := t.metadata(); meta != nil {
		attrs = append(attrs, attrStreamSeq.Int64(int64(meta.Sequence.Stream)), attrDeliveries.Int64(int64(meta.NumDelivered)))
	}
	t.tctx, t.span = tr.Start(parent, "oncegate.trigger "+g.pipeline,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

// traceEnd ends t's root span with its verdict.
func (t *Trigger) traceEnd() {
	if t.span == nil {
		return
	}
	t.span.SetAttributes(attrVerdict.String(t.v.kind.String()))
	if t.keyed {
		t.span.SetAttributes(attrKey.String(t.intent.String()))
	}
	switch t.v.kind {
	case settleDead:
		t.span.SetAttributes(attrReason.String(string(t.v.reason)))
		t.span.SetStatus(codes.Error, errOr(t.v.err).Error())
	case settleNak:
		if t.v.err != nil {
			t.span.SetStatus(codes.Error, t.v.err.Error())
		}
	}
	t.span.End()
}

// child starts a span under t's root span, or returns noSpan when tracing
// is off.
func (t *Trigger) child(g *gate, name string, kind trace.SpanKind) trace.Span {
	if t.span == nil {
		return noSpan
	}
	_, sp := g.c.tracer.Start(t.tctx, name, trace.WithSpanKind(kind))
	return sp
}

// endSpan ends sp, recording err on it.
func endSpan(sp trace.Span, err error) {
	if err != nil && sp.IsRecording() {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// injectTrace adds the trace context of sp to h, for an effect to carry on.
func injectTrace(sp trace.Span, h map[string]string) map[string]string {
	if !sp.SpanContext().IsValid() {
		return h
	}
	if h == nil {
		h = make(map[string]string, 2)
	}
	propagator.Inject(trace.ContextWithSpan(context.Background(), sp), propagation.MapCarrier(h))
	return h
}

// spans starts a child span named name for each of ts, or returns nil when
// tracing is off.
func (g *gate) spans(ts []*Trigger, name string, kind trace.SpanKind) []trace.Span {
	if g.c.tracer == nil {
		return nil
	}
	sps := make([]trace.Span, len(ts))
	for i, t := range ts {
		sps[i] = t.child(g, name, kind)
	}
	return sps
}

// traceWindow records the window's answer on t as a span.
func (g *gate) traceWindow(t *Trigger, seen bool) {
	if t.span == nil {
		return
	}
	sp := t.child(g, "oncegate.window", trace.SpanKindInternal)
	sp.SetAttributes(attrDuplicate.Bool(seen))
	sp.End()
}

// traceModel records a model call on sp, with the GenAI semantic
// conventions' attributes, and ends it.
func traceModel(sp trace.Span, model string, a answer, err error) {
	if sp.IsRecording() {
		sp.SetAttributes(attrGenOp.String("chat"), attrGenProvider.String("openai"), attrGenReqModel.String(model))
		if err == nil {
			sp.SetAttributes(attrGenResModel.String(a.Model), attrCache.String(a.Cache),
				attrGenIn.Int(a.InputTokens), attrGenOut.Int(a.OutputTokens))
		}
	}
	endSpan(sp, err)
}
