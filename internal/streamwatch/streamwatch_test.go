package streamwatch_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/oncegate/oncegate/internal/logbuf"
	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/internal/ops"
	"github.com/oncegate/oncegate/internal/streamwatch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a trigger stream on t.> with two pipelines' durable
// consumers: a on t.a, b on t.b.*.
type fixture struct {
	js      jetstream.JetStream
	st      jetstream.Stream
	metrics *ops.Metrics
	logs    *logbuf.Buffer
}

var pipelines = []streamwatch.Pipeline{
	{Name: "a", Durable: "oncegate-a", Subject: "t.a"},
	{Name: "b", Durable: "oncegate-b", Subject: "t.b.*"},
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, MaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pipelines {
		if _, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{
			Durable: p.Durable, FilterSubject: p.Subject, AckPolicy: jetstream.AckExplicitPolicy,
		}); err != nil {
			t.Fatal(err)
		}
	}
	m := ops.NewMetrics(ops.MetricsOptions{})
	for _, p := range pipelines {
		m.AddPipeline(p.Name)
	}
	return &fixture{js: js, st: st, metrics: m, logs: &logbuf.Buffer{}}
}

func (f *fixture) watcher(t *testing.T, o streamwatch.Options) *streamwatch.Watcher {
	t.Helper()
	o.JetStream, o.Stream, o.Metrics = f.js, "T", f.metrics
	if o.Pipelines == nil {
		o.Pipelines = pipelines
	}
	o.Logger = slog.New(slog.NewTextHandler(f.logs, nil))
	w, err := streamwatch.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (f *fixture) publish(t *testing.T, subject string, n int) {
	t.Helper()
	for range n {
		if _, err := f.js.Publish(context.Background(), subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
}

func poll(t *testing.T, w *streamwatch.Watcher) {
	t.Helper()
	if err := w.Poll(context.Background()); err != nil {
		t.Fatalf("Poll() = %v", err)
	}
}

// value returns the metric's value with the label, or -1 when there is no
// such series.
func (f *fixture) value(t *testing.T, name, label, value string) float64 {
	t.Helper()
	fams, err := f.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return metricValue(m)
				}
			}
		}
	}
	return -1
}

func metricValue(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}

func TestBacklog(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.publish(t, "t.a", 3)
	f.publish(t, "t.b.x", 2)
	first, err := f.st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	second, err := f.st.GetMsg(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	now := first.Time.Add(90 * time.Second)
	w := f.watcher(t, streamwatch.Options{Now: func() time.Time { return now }})
	poll(t, w)

	check := func(pipeline string, pending, ackPending float64, oldest time.Duration) {
		t.Helper()
		for _, c := range []struct {
			name string
			want float64
		}{
			{"oncegate_backlog_pending", pending},
			{"oncegate_backlog_ack_pending", ackPending},
			{"oncegate_backlog_oldest_age_seconds", oldest.Seconds()},
			{"oncegate_backlog_max_age_seconds", 3600},
		} {
			if got := f.value(t, c.name, "pipeline", pipeline); got != c.want {
				t.Errorf("%s{pipeline=%q} = %v; want %v", c.name, pipeline, got, c.want)
			}
		}
	}
	check("a", 3, 0, 90*time.Second)

	// One trigger delivered and not acked: it is still the oldest.
	c, err := f.st.Consumer(ctx, "oncegate-a")
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msg jetstream.Msg
	for m := range batch.Messages() {
		msg = m
	}
	if msg == nil {
		t.Fatal("fetched nothing")
	}
	poll(t, w)
	check("a", 2, 1, 90*time.Second)

	// Acked: the oldest is the next one.
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	poll(t, w)
	check("a", 2, 0, now.Sub(second.Time))

	// Every trigger acked: no backlog, age 0.
	batch, err = c.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, w)
	check("a", 0, 0, 0)
	if got := f.value(t, "oncegate_backlog_pending", "pipeline", "b"); got != 2 {
		t.Errorf("oncegate_backlog_pending{pipeline=\"b\"} = %v; want 2", got)
	}
}

func TestUnrouted(t *testing.T) {
	f := newFixture(t)
	f.publish(t, "t.a", 2)
	f.publish(t, "t.zzz", 4)
	f.publish(t, "t.b.x", 1)
	f.publish(t, "t.other", 1)
	f.publish(t, "t.b.x.y", 1) // t.b.* does not match two tokens
	w := f.watcher(t, streamwatch.Options{})
	poll(t, w)
	want := map[string]float64{"t.zzz": 4, "t.other": 1, "t.b.x.y": 1, "t.a": -1, "t.b.x": -1}
	check := func() {
		t.Helper()
		for s, n := range want {
			if got := f.value(t, "oncegate_unrouted_total", "subject", s); got != n {
				t.Errorf("oncegate_unrouted_total{subject=%q} = %v; want %v", s, got, n)
			}
		}
	}
	check()

	// Counted once: another poll adds nothing, new triggers add
	// themselves, interleaved with routed ones.
	poll(t, w)
	check()
	f.publish(t, "t.a", 3)
	f.publish(t, "t.zzz", 2)
	f.publish(t, "t.a", 1)
	poll(t, w)
	want["t.zzz"] = 6
	check()

	// One warning per subject, however many polls.
	logs := f.logs.String()
	for _, s := range []string{"t.zzz", "t.other", "t.b.x.y"} {
		if n := strings.Count(logs, "subject="+s+" "); n != 1 {
			t.Errorf("%d warnings for subject %s; want 1\n%s", n, s, logs)
		}
	}
	if strings.Contains(logs, "subject=t.a ") {
		t.Errorf("a warning for t.a, which pipeline a reads:\n%s", logs)
	}

	// The walks' consumers do not stay behind.
	names := f.st.ConsumerNames(context.Background())
	n := 0
	for range names.Name() {
		n++
	}
	if n != len(pipelines) {
		t.Errorf("%d consumers on the stream after the polls; want the %d durables", n, len(pipelines))
	}
}

func TestUnroutedLabelsBounded(t *testing.T) {
	f := newFixture(t)
	for _, s := range []string{"t.u1", "t.u2", "t.u3", "t.u4"} {
		f.publish(t, s, 1)
	}
	w := f.watcher(t, streamwatch.Options{MaxLabels: 2, MaxSubjects: 3})
	poll(t, w)
	for s, n := range map[string]float64{"t.u1": 1, "t.u2": 1, "other": 1, "t.u3": -1, "t.u4": -1} {
		if got := f.value(t, "oncegate_unrouted_total", "subject", s); got != n {
			t.Errorf("oncegate_unrouted_total{subject=%q} = %v; want %v", s, got, n)
		}
	}
	logs := f.logs.String()
	for _, want := range []string{"counted as \\\"other\\\"", "the rest are not counted"} {
		if strings.Count(logs, want) != 1 {
			t.Errorf("logs: want one %q\n%s", want, logs)
		}
	}
}

func TestCoveredStreamNotScanned(t *testing.T) {
	f := newFixture(t)
	f.publish(t, "t.zzz", 1)
	w := f.watcher(t, streamwatch.Options{Pipelines: []streamwatch.Pipeline{{Name: "a", Durable: "oncegate-a", Subject: "t.>"}}})
	if err := w.Poll(context.Background()); err != nil {
		t.Fatalf("Poll() = %v", err)
	}
	if got := f.value(t, "oncegate_unrouted_total", "subject", "t.zzz"); got != -1 {
		t.Errorf("oncegate_unrouted_total{subject=\"t.zzz\"} = %v with a pipeline on t.>; want no series", got)
	}
}

func TestRunStops(t *testing.T) {
	f := newFixture(t)
	f.publish(t, "t.zzz", 1)
	w := f.watcher(t, streamwatch.Options{Interval: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for f.value(t, "oncegate_unrouted_total", "subject", "t.zzz") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("Run did not count the unrouted trigger")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v; want nil", err)
	}
}
