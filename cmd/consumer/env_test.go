package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
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

// TestLogFormatJSON: with -log-format json every line the process writes,
// on standard output and standard error, is a JSON object.
func TestLogFormatJSON(t *testing.T) {
	c := startChild(t, nil, "run", "-data", filepath.Join(t.TempDir(), "data"), "-listen", "127.0.0.1:0", "-metrics", "off", "-log-format", "json")
	waitFor(t, 30*time.Second, "the consumer consuming", func() bool { return strings.Contains(c.stderr.String(), `"msg":"consuming"`) })
	c.stop(t)
	for name, out := range map[string]string{"stdout": c.stdout.String(), "stderr": c.stderr.String()} {
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line == "" {
				continue
			}
			if !json.Valid([]byte(line)) {
				t.Errorf("%s line is not JSON: %q", name, line)
			}
		}
	}
	if !strings.Contains(c.stdout.String(), `"msg":"embedded NATS"`) {
		t.Errorf("stdout lacks the embedded server's address:\n%s", c.stdout.String())
	}
}
