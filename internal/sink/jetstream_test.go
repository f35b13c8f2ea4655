package sink_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/internal/sink"
)

// newJetStream starts a server with the stream EFFECTS on "effects.>",
// with a duplicate window, and returns a JetStream on it.
func newJetStream(t *testing.T) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	st, err := js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name:       "EFFECTS",
		Subjects:   []string{"effects.>"},
		Duplicates: time.Minute,
	})
	if err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	return js, st
}

func newJetStreamSink(t *testing.T, js jetstream.JetStream, opts sink.JetStreamOptions) *sink.JetStream {
	t.Helper()
	s, err := sink.NewJetStream(js, opts)
	if err != nil {
		t.Fatalf("NewJetStream(%+v): %v", opts, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestJetStreamDuplicate(t *testing.T) {
	js, st := newJetStream(t)
	s := newJetStreamSink(t, js, sink.JetStreamOptions{Subject: "effects.{pipeline}.{key}"})
	ctx := t.Context()
	e := sink.Effect{
		Key:      key1,
		Pipeline: "billing",
		Step:     "notify",
		Body:     []byte(`{"invoice":1042}`),
		Header:   map[string]string{"X-Trace": "t1", "Nats-Msg-Id": "forged", sink.StepHeader: "forged"},
	}

	type ack struct {
		Stream    string `json:"stream"`
		Seq       uint64 `json:"seq"`
		Duplicate bool   `json:"duplicate"`
	}
	var acks []ack
	for i, wantDup := range []bool{false, true} {
		res, err := s.Deliver(ctx, e)
		if err != nil {
			t.Fatalf("Deliver #%d: %v", i+1, err)
		}
		if res.Duplicate != wantDup || res.Status != 0 || res.Attempts != 1 {
			t.Errorf("Deliver #%d = %+v; want Duplicate %v, Status 0, Attempts 1", i+1, res, wantDup)
		}
		var a ack
		if err := json.Unmarshal(res.Body, &a); err != nil {
			t.Fatalf("Deliver #%d: Result.Body %q: %v", i+1, res.Body, err)
		}
		acks = append(acks, a)
	}
	if want := (ack{"EFFECTS", 1, false}); acks[0] != want {
		t.Errorf("first PubAck = %+v; want %+v", acks[0], want)
	}
	if want := (ack{"EFFECTS", 1, true}); acks[1] != want {
		t.Errorf("second PubAck = %+v; want %+v", acks[1], want)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("stream holds %d messages; want 1", info.State.Msgs)
	}

	m, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatalf("GetMsg(1): %v", err)
	}
	if want := "effects.billing." + key1; m.Subject != want {
		t.Errorf("subject = %q; want %q", m.Subject, want)
	}
	if string(m.Data) != string(e.Body) {
		t.Errorf("data = %q; want %q", m.Data, e.Body)
	}
	for name, want := range map[string]string{
		jetstream.MsgIDHeader: key1,
		sink.PipelineHeader:   "billing",
		sink.StepHeader:       "notify",
		"X-Trace":             "t1",
	} {
		if got := m.Header.Get(name); got != want {
			t.Errorf("header %s = %q; want %q", name, got, want)
		}
	}

	// Another key is another message.
	e.Key = key2
	if res, err := s.Deliver(ctx, e); err != nil || res.Duplicate {
		t.Fatalf("Deliver(key2) = %+v, %v; want a new message", res, err)
	}
}

func TestJetStreamErrors(t *testing.T) {
	js, _ := newJetStream(t)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: "SMALL", Subjects: []string{"small"}, MaxMsgSize: 8,
	}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()

	e := sink.Effect{Key: key1, Pipeline: "billing", Step: "notify", Body: []byte(`{}`)}
	for _, tt := range []struct {
		name    string
		subject string
		ctx     context.Context
		edit    func(*sink.Effect)
		want    string
		wantIs  error
	}{
		{name: "no stream", subject: "nowhere.{key}", want: "retryable", wantIs: jetstream.ErrNoStreamResponse},
		{name: "cancelled", subject: "effects.{key}", ctx: cancelled, want: "retryable", wantIs: context.Canceled},
		{name: "over the stream's MaxMsgSize", subject: "small", edit: func(e *sink.Effect) { e.Body = []byte(strings.Repeat("x", 64)) }, want: "permanent"},
		{name: "bad key", subject: "effects.x", edit: func(e *sink.Effect) { e.Key = strings.ToUpper(key1) }, want: "permanent"},
		{name: "pipeline not a token", subject: "effects.{pipeline}", edit: func(e *sink.Effect) { e.Pipeline = "a.b" }, want: "permanent"},
		{name: "empty step", subject: "effects.{step}", edit: func(e *sink.Effect) { e.Step = "" }, want: "permanent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newJetStreamSink(t, js, sink.JetStreamOptions{Subject: tt.subject, Timeout: 2 * time.Second})
			e := e
			if tt.edit != nil {
				tt.edit(&e)
			}
			ctx := tt.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			_, err := s.Deliver(ctx, e)
			checkClass(t, "Deliver", err, tt.want)
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("Deliver error %v does not wrap %v", err, tt.wantIs)
			}
		})
	}
}

func TestNewJetStreamOptions(t *testing.T) {
	js, _ := newJetStream(t)
	for _, tt := range []struct {
		name string
		js   jetstream.Publisher
		opts sink.JetStreamOptions
		want string
	}{
		{"fixed subject", js, sink.JetStreamOptions{Subject: "effects.out"}, "ok"},
		{"placeholders", js, sink.JetStreamOptions{Subject: "effects.{pipeline}.{step}.{key}", Timeout: time.Second}, "ok"},
		{"nil JetStream", nil, sink.JetStreamOptions{Subject: "effects.out"}, "permanent"},
		{"no subject", js, sink.JetStreamOptions{}, "permanent"},
		{"wildcard", js, sink.JetStreamOptions{Subject: "effects.*"}, "permanent"},
		{"full wildcard", js, sink.JetStreamOptions{Subject: "effects.>"}, "permanent"},
		{"empty token", js, sink.JetStreamOptions{Subject: "effects..out"}, "permanent"},
		{"unknown placeholder", js, sink.JetStreamOptions{Subject: "effects.{tenant}"}, "permanent"},
		{"white space", js, sink.JetStreamOptions{Subject: "effects out"}, "permanent"},
		{"negative timeout", js, sink.JetStreamOptions{Subject: "effects.out", Timeout: -time.Second}, "permanent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sink.NewJetStream(tt.js, tt.opts)
			checkClass(t, "NewJetStream", err, tt.want)
		})
	}
}
