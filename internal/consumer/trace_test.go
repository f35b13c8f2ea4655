package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/standin"
)

// TestTracePerTrigger: each trigger is one trace, which continues the
// traceparent it came with, with a span for each step of the gate; the
// effect carries the trace on; a duplicate's trace says it was one.
func TestTracePerTrigger(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	f := start(t, nil, standin.Options{}, func(o *consumer.Options) { o.Tracer = tp })

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	m := nats.NewMsg("triggers.alerts")
	m.Header.Set("traceparent", parent)
	m.Data = alert("traced", 1, 0)
	if _, err := f.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the effect", func() bool { return f.stats("alerts").Effects == 1 }, f)
	f.publish("triggers.alerts", alert("traced", 1, 1)) // a duplicate, with no trace of its own
	waitFor(t, 10*time.Second, "the duplicate", func() bool {
		s := f.stats("alerts")
		return s.DuplicatesWindow+s.DuplicatesLedger == 1
	}, f)
	waitFor(t, 5*time.Second, "a root span for each delivery", func() bool {
		return int64(len(roots(exp.GetSpans()))) == f.stats("alerts").Deliveries
	}, f)

	spans := exp.GetSpans()
	var traced, dup tracetest.SpanStub
	for _, r := range roots(spans) {
		if r.SpanContext.TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736" {
			traced = r
		} else {
			dup = r
		}
	}
	if !traced.SpanContext.IsValid() {
		t.Fatalf("no root span continues the trigger's traceparent; roots: %v", names(roots(spans)))
	}
	if got := traced.Parent.SpanID().String(); got != "00f067aa0ba902b7" {
		t.Errorf("root span's parent = %s, want the traceparent's span 00f067aa0ba902b7", got)
	}
	if traced.Name != "oncegate.trigger alerts" || traced.SpanKind != trace.SpanKindConsumer {
		t.Errorf("root span %q kind %v", traced.Name, traced.SpanKind)
	}
	children := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		if s.Parent.SpanID() == traced.SpanContext.SpanID() {
			children[s.Name] = s
		}
	}
	for _, name := range []string{"oncegate.key", "oncegate.window", "oncegate.ledger.claim", "chat " + f.cfg.LLM.Model, "oncegate.effect", "oncegate.ledger.commit", "oncegate.settle"} {
		if _, ok := children[name]; !ok {
			t.Errorf("no %q span under the trigger's; have %v", name, keys(children))
		}
	}
	model := children["chat "+f.cfg.LLM.Model]
	for _, k := range []string{"gen_ai.operation.name", "gen_ai.request.model", "gen_ai.response.model", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "oncegate.llm.cache"} {
		if _, ok := attr(model.Attributes, k); !ok {
			t.Errorf("model span has no %s: %v", k, model.Attributes)
		}
	}
	if v, _ := attr(model.Attributes, "gen_ai.usage.output_tokens"); v.AsInt64() <= 0 {
		t.Errorf("model span's output tokens = %v", v.String())
	}
	if v, _ := attr(children["oncegate.ledger.claim"].Attributes, "oncegate.claim.status"); v.AsString() != "new" {
		t.Errorf("claim span's status = %q, want new", v.String())
	}

	// The effect message carries the trace, as a child of the effect span.
	effects := f.streamMsgs("ONCEGATE_EFFECTS", "effects.alerts")
	if len(effects) != 1 {
		t.Fatalf("%d effects, want 1", len(effects))
	}
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + children["oncegate.effect"].SpanContext.SpanID().String() + "-01"
	if got := effects[0].Headers().Get("traceparent"); got != want {
		t.Errorf("effect's traceparent = %q, want %q", got, want)
	}

	// The duplicate is its own trace, which ends at the window or the ledger.
	if dup.SpanContext.TraceID() == traced.SpanContext.TraceID() || dup.Parent.IsValid() {
		t.Errorf("the duplicate's root span is not a new trace: %v parent %v", dup.SpanContext.TraceID(), dup.Parent)
	}
	if v, _ := attr(dup.Attributes, "oncegate.verdict"); v.AsString() != "ack" {
		t.Errorf("duplicate's verdict = %q", v.String())
	}
	for _, s := range spans {
		if s.Parent.SpanID() == dup.SpanContext.SpanID() && (s.Name == "oncegate.effect" || s.Name == "chat "+f.cfg.LLM.Model) {
			t.Errorf("the duplicate's trace has a %q span", s.Name)
		}
	}
}

func roots(spans tracetest.SpanStubs) []tracetest.SpanStub {
	var r []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == "oncegate.trigger alerts" {
			r = append(r, s)
		}
	}
	return r
}

func names(ss []tracetest.SpanStub) []string {
	var n []string
	for _, s := range ss {
		n = append(n, s.Name)
	}
	return n
}

func keys(m map[string]tracetest.SpanStub) []string {
	var k []string
	for name := range m {
		k = append(k, name)
	}
	return k
}

func attr(kvs []attribute.KeyValue, k string) (attribute.Value, bool) {
	for _, kv := range kvs {
		if string(kv.Key) == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}
