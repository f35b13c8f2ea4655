package natsrun_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/oncegate/oncegate/internal/natsrun"
)

// startEmbedded starts an embedded server on a random loopback port with
// its data below dataDir, shut down in t.Cleanup.
func startEmbedded(t *testing.T, cfg natsrun.Options, dataDir string) *natsrun.Embedded {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	_, logger := newLogRecorder()
	cfg.Logger = logger
	e, err := natsrun.StartEmbedded(dataDir, cfg)
	if err != nil {
		t.Fatalf("StartEmbedded(%+v, %q) error = %v", cfg, dataDir, err)
	}
	t.Cleanup(func() { shutdown(t, e) })
	return e
}

// shutdown shuts e down within waitTimeout.
func shutdown(t *testing.T, e *natsrun.Embedded) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown() error = %v", err)
	}
}

func hostPort(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("ClientURL %q: %v", rawURL, err)
	}
	return u.Host
}

func TestStartEmbeddedJetStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	rec, logger := newLogRecorder()
	dataDir := t.TempDir()

	e, err := natsrun.StartEmbedded(dataDir, natsrun.Options{Listen: "127.0.0.1:-1", Logger: logger})
	if err != nil {
		t.Fatalf("StartEmbedded error = %v", err)
	}
	addr := hostPort(t, e.ClientURL())
	if !strings.HasPrefix(e.ClientURL(), "nats://127.0.0.1:") || strings.HasSuffix(addr, ":-1") || strings.HasSuffix(addr, ":0") {
		t.Errorf("ClientURL() = %q; want nats://127.0.0.1:<picked port>", e.ClientURL())
	}
	if got, want := e.StoreDir(), dataDir+"/nats"; got != want {
		t.Errorf("StoreDir() = %q; want %q", got, want)
	}
	if !e.Server().JetStreamEnabled() {
		t.Fatalf("JetStream is not enabled")
	}
	if jc := e.Server().JetStreamConfig(); jc.SyncInterval != 100*time.Millisecond || jc.SyncAlways {
		t.Errorf("sync interval = %v, always = %v; want the config default 100ms", jc.SyncInterval, jc.SyncAlways)
	}
	// Server notices go to Info, the start-up banner to Debug.
	for _, want := range []struct{ text, level string }{{"Server is ready", "level=INFO"}, {"_ ___ _____", "level=DEBUG"}} {
		found := false
		for line := range strings.Lines(rec.String()) {
			if strings.Contains(line, want.text) {
				found = true
				if !strings.Contains(line, want.level) {
					t.Errorf("server log line %q; want %s", line, want.level)
				}
			}
		}
		if !found {
			t.Errorf("server log has no %q; log:\n%s", want.text, rec.String())
		}
	}

	nc, err := natsrun.Connect(ctx, e.ClientURL(), natsrun.Options{Logger: logger})
	if err != nil {
		t.Fatalf("Connect(%s) error = %v", e.ClientURL(), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatalf("CreateStream error = %v", err)
	}
	const n = 20
	for i := range n {
		ack, err := js.Publish(ctx, "t.x", fmt.Appendf(nil, "m%d", i), jetstream.WithMsgID(fmt.Sprint(i)))
		if err != nil || ack.Sequence != uint64(i+1) {
			t.Fatalf("Publish #%d = %+v, %v; want sequence %d", i, ack, err, i+1)
		}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < n {
		batch, err := cons.Fetch(n-got, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatalf("Fetch error = %v", err)
		}
		for m := range batch.Messages() {
			if want := fmt.Sprintf("m%d", got); string(m.Data()) != want {
				t.Errorf("message %d = %q; want %q", got, m.Data(), want)
			}
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatalf("DoubleAck error = %v", err)
			}
			got++
		}
		if err := batch.Error(); err != nil {
			t.Fatalf("Fetch batch error = %v", err)
		}
	}
	nc.Close()

	if err := e.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown() error = %v", err)
	}
	if err := e.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown() error = %v", err)
	}
	// The port is free again...
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on %s after Shutdown: %v", addr, err)
	}
	l.Close()
	// ...the server's goroutines are gone...
	goleak.VerifyNone(t)
	// ...and the store is unlocked and kept the stream.
	e2 := startEmbedded(t, natsrun.Options{}, dataDir)
	nc2, err := natsrun.Connect(ctx, e2.ClientURL(), natsrun.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, _ := jetstream.New(nc2)
	s, err := js2.Stream(ctx, "T")
	if err != nil {
		t.Fatalf("stream T after restart: %v", err)
	}
	if msgs := s.CachedInfo().State.Msgs; msgs != n {
		t.Errorf("stream T after restart has %d messages; want %d", msgs, n)
	}
}

func TestStartEmbeddedSyncInterval(t *testing.T) {
	tests := []struct {
		in         time.Duration
		wantEvery  time.Duration
		wantAlways bool
	}{
		{0, 100 * time.Millisecond, false},
		{time.Second, time.Second, false},
		{natsrun.SyncAlways, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in.String(), func(t *testing.T) {
			e := startEmbedded(t, natsrun.Options{SyncInterval: tt.in}, t.TempDir())
			jc := e.Server().JetStreamConfig()
			if jc.SyncAlways != tt.wantAlways || (!tt.wantAlways && jc.SyncInterval != tt.wantEvery) {
				t.Errorf("SyncInterval %v: server has interval %v, always %v; want %v, %v", tt.in, jc.SyncInterval, jc.SyncAlways, tt.wantEvery, tt.wantAlways)
			}
		})
	}
	_, err := natsrun.StartEmbedded(t.TempDir(), natsrun.Options{Listen: "127.0.0.1:0", SyncInterval: -5, Logger: discard})
	if err == nil || !strings.Contains(err.Error(), "sync interval") {
		t.Errorf("StartEmbedded(SyncInterval -5) error = %v; want a sync interval error", err)
	}
}

func TestStartEmbeddedStoreInUse(t *testing.T) {
	store := t.TempDir() + "/store"
	cfg := natsrun.Options{Listen: "127.0.0.1:0", StoreDir: store}
	e := startEmbedded(t, cfg, "ignored")

	cfg.Logger = discard
	e2, err := natsrun.StartEmbedded("ignored", cfg)
	if err == nil {
		shutdown(t, e2)
		t.Fatalf("second StartEmbedded on %s succeeded; want ErrStoreInUse", store)
	}
	if !errors.Is(err, natsrun.ErrStoreInUse) || !strings.Contains(err.Error(), store) {
		t.Fatalf("second StartEmbedded error = %v; want ErrStoreInUse naming %s", err, store)
	}
	t.Logf("second StartEmbedded: %v", err)

	shutdown(t, e)
	e3, err := natsrun.StartEmbedded("ignored", cfg)
	if err != nil {
		t.Fatalf("StartEmbedded after the first shut down: %v", err)
	}
	shutdown(t, e3)
}

func TestStartEmbeddedListen(t *testing.T) {
	tests := []struct {
		listen  string
		wantErr error // nil: any error; ErrNotLoopback: that
	}{
		{"0.0.0.0:4222", natsrun.ErrNotLoopback},
		{":4222", natsrun.ErrNotLoopback},
		{"[::]:0", natsrun.ErrNotLoopback},
		{"10.1.2.3:0", natsrun.ErrNotLoopback},
		{"192.168.1.10:4222", natsrun.ErrNotLoopback},
		{"example.com:4222", natsrun.ErrNotLoopback},
		{"127.0.0.1", nil},
		{"127.0.0.1:70000", nil},
		{"127.0.0.1:-2", nil},
		{"127.0.0.1:nats", nil},
	}
	for _, tt := range tests {
		t.Run(tt.listen, func(t *testing.T) {
			dir := t.TempDir()
			e, err := natsrun.StartEmbedded(dir, natsrun.Options{Listen: tt.listen})
			if err == nil {
				shutdown(t, e)
				t.Fatalf("StartEmbedded(Listen %q) succeeded; want an error", tt.listen)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("StartEmbedded(Listen %q) error = %v; want %v", tt.listen, err, tt.wantErr)
			}
			if errors.Is(tt.wantErr, natsrun.ErrNotLoopback) && !strings.Contains(err.Error(), "no authentication") {
				t.Errorf("StartEmbedded(Listen %q) error = %v; want it to say the server has no authentication", tt.listen, err)
			}
		})
	}
	t.Run("localhost", func(t *testing.T) {
		e := startEmbedded(t, natsrun.Options{Listen: "localhost:0"}, t.TempDir())
		if !strings.HasPrefix(e.ClientURL(), "nats://127.0.0.1:") {
			t.Errorf("ClientURL() = %q; want nats://127.0.0.1:<port>", e.ClientURL())
		}
	})
	t.Run("[::1]:0", func(t *testing.T) {
		l, err := net.Listen("tcp", "[::1]:0")
		if err != nil {
			t.Skipf("no IPv6 loopback: %v", err)
		}
		l.Close()
		e := startEmbedded(t, natsrun.Options{Listen: "[::1]:0"}, t.TempDir())
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		nc, err := natsrun.Connect(ctx, e.ClientURL(), natsrun.Options{Logger: discard})
		if err != nil {
			t.Fatalf("Connect(%s) error = %v", e.ClientURL(), err)
		}
		nc.Close()
	})
}

func TestStartEmbeddedPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()

	start := time.Now()
	e, err := natsrun.StartEmbedded(dir, natsrun.Options{Listen: l.Addr().String(), Logger: discard})
	if err == nil {
		shutdown(t, e)
		t.Fatalf("StartEmbedded on taken port %s succeeded", l.Addr())
	}
	var nre *natsrun.NotReadyError
	if !errors.As(err, &nre) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("StartEmbedded on taken port error = %v; want a *NotReadyError saying the address is in use", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("StartEmbedded on a taken port took %v; want it to fail at once", d)
	}
	// Nothing was left behind: the store lock is free.
	startEmbedded(t, natsrun.Options{}, dir)
}

func TestShutdownContext(t *testing.T) {
	_, logger := newLogRecorder()
	e, err := natsrun.StartEmbedded(t.TempDir(), natsrun.Options{Listen: "127.0.0.1:0", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown(cancelled ctx) error = %v; want nil or context.Canceled", err)
	}
	shutdown(t, e) // waits for the shutdown the first call began
}
