package app_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/natstest"
)

// retryLog is a slog handler that closes seen on the first record whose
// message starts with prefix.
type retryLog struct {
	prefix string
	seen   chan struct{}
}

func (h *retryLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *retryLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *retryLog) WithGroup(string) slog.Handler            { return h }
func (h *retryLog) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		select {
		case <-h.seen:
		default:
			close(h.seen)
		}
	}
	return nil
}

// TestStartWaitsForJetStream starts Oncegate, with a KV ledger, against a
// NATS server that does not have JetStream yet (as a server just started
// may not: its cluster electing a meta leader, or an operator's account
// whose JetStream is enabled as its first client connects): Start says so
// in the log and retries, and starts once JetStream is there. (CI's run of
// deploy/helm's TestPodStarts/values-kv.yaml once saw the consumer exit on
// "jetstream not enabled for account" instead.)
func TestStartWaitsForJetStream(t *testing.T) {
	srv := natstest.RunServer(t, func(o *server.Options) { o.JetStream = false })
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.NATS.URL = srv.ClientURL()
	cfg.Ledger.Store = config.StoreKV
	cfg.LLM.Standin = true // the alerts pipeline's triage, offline
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := &retryLog{prefix: "the ledger's bucket cannot be opened yet", seen: make(chan struct{})}
	type started struct {
		a   *app.App
		err error
	}
	done := make(chan started, 1)
	go func() {
		a, err := app.Start(ctx, cfg, app.Options{NoOps: true, Logger: slog.New(h)})
		done <- started{a, err}
	}()
	select {
	case <-h.seen:
	case r := <-done:
		if r.a != nil {
			r.a.Close()
		}
		t.Fatalf("Start returned (%v) without waiting for JetStream", r.err)
	case <-ctx.Done():
		t.Fatal("Start neither retried nor returned")
	}
	if err := srv.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Start after JetStream came: %v", r.err)
		}
		r.a.Close()
	case <-ctx.Done():
		t.Fatal("Start did not return after JetStream came")
	}
}
