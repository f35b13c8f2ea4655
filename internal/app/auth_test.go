package app_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/natsrun"
)

// TestEmbeddedServerToken: with ONCEGATE_NATS_TOKEN set, the embedded
// server refuses a local client without the token, and the consumer,
// connected with it, does its work: a trigger published with the token
// gets its effect.
func TestEmbeddedServerToken(t *testing.T) {
	const token = "app-embedded-s3cret"
	t.Setenv(natsrun.EnvToken, token)
	dir := t.TempDir()
	cfg := config.Default()
	cfg.DataDir = dir
	cfg.NATS.Embedded.Listen = "127.0.0.1:0"
	cfg.NATS.Embedded.StoreDir = filepath.Join(dir, "nats")
	cfg.LLM.Standin = true // the alerts pipeline's triage, offline
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := app.Start(ctx, cfg, app.Options{NoOps: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if got := a.Embedded.Auth(); got != "token" {
		t.Errorf("Embedded.Auth() = %q; want token", got)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	url := a.Embedded.ClientURL()
	for _, opts := range [][]nats.Option{nil, {nats.Token("guess")}} {
		if nc, err := nats.Connect(url, append(opts, nats.NoReconnect())...); err == nil {
			nc.Close()
			t.Fatalf("a client with %d options connected without the token", len(opts))
		} else if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Errorf("refused client: %v; want an authorization violation", err)
		}
	}

	nc, err := nats.Connect(url, nats.Token(token))
	if err != nil {
		t.Fatalf("connect with the token: %v", err)
	}
	defer nc.Close()
	effects, err := nc.SubscribeSync("effects.alerts")
	if err != nil {
		t.Fatal(err)
	}
	alert, err := os.ReadFile("../../examples/alert.json")
	if err != nil {
		t.Fatal(err)
	}
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish("triggers.alerts", alert); err != nil {
		t.Fatalf("publish the trigger: %v", err)
	}
	m, err := effects.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no effect on effects.alerts: %v", err)
	}
	if !strings.Contains(string(m.Data), "[stand-in model]") {
		t.Errorf("effect %q; want the stand-in model's triage", m.Data)
	}
}
