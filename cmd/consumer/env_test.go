package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/natstest"
)

// TestNATSURLEnv: NATS_URL, as the nats CLI reads it, makes "consumer run"
// join that server instead of starting an embedded one.
func TestNATSURLEnv(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv)
	c := startChild(t, []string{"NATS_URL=" + srv.ClientURL()}, "run", "-data", filepath.Join(t.TempDir(), "data"), "-metrics", "off")
	waitFor(t, 30*time.Second, "the pipelines' durable consumers on the NATS_URL server", func() bool {
		_, err := js.Consumer(context.Background(), "ONCEGATE", consumer.Durable("alerts"))
		return err == nil
	})
	c.stop(t)
}
