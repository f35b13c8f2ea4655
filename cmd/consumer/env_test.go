package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/natstest"
)

// TestNATSURLEnv: NATS_URL, as the nats CLI reads it, makes "consumer run"
// join that server instead of starting an embedded one.
func TestNATSURLEnv(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv)
	c := startChild(t, append([]string{"NATS_URL=" + srv.ClientURL()}, standinEnv...), "run", "-data", filepath.Join(t.TempDir(), "data"), "-metrics", "off")
	waitFor(t, 30*time.Second, "the pipelines' durable consumers on the NATS_URL server", func() bool {
		_, err := js.Consumer(context.Background(), "ONCEGATE", consumer.Durable("alerts"))
		return err == nil
	})
	c.stop(t)
}

// TestLogFormatJSON: with -log-format json every line the process writes,
// on standard output and standard error, is a JSON object.
func TestLogFormatJSON(t *testing.T) {
	c := startChild(t, standinEnv, "run", "-data", filepath.Join(t.TempDir(), "data"), "-listen", "127.0.0.1:0", "-metrics", "off", "-log-format", "json")
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

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestNATSDownAtStart: a deployment out of reach at start is retried with
// backoff while /readyz says not ready (and /healthz that the process
// lives); once the server is up, the consumer joins it and is ready. It
// once exited with "no servers available".
func TestNATSDownAtStart(t *testing.T) {
	natsPort, opsPort := freePort(t), freePort(t)
	c := startChild(t, standinEnv, "run", "-data", filepath.Join(t.TempDir(), "data"),
		"-nats-url", fmt.Sprintf("nats://127.0.0.1:%d", natsPort), "-metrics", fmt.Sprintf("127.0.0.1:%d", opsPort))
	get := func(path string) int {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", opsPort, path))
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitFor(t, 30*time.Second, "/readyz to answer not ready while NATS is down", func() bool {
		return get("/readyz") == http.StatusServiceUnavailable && get("/healthz") == http.StatusOK
	})
	if !strings.Contains(c.stderr.String(), "NATS is out of reach; retrying") {
		waitFor(t, 10*time.Second, "the retry logged", func() bool { return strings.Contains(c.stderr.String(), "NATS is out of reach; retrying") })
	}
	srv := natstest.RunServer(t, func(o *server.Options) { o.Port = natsPort })
	_, js := natstest.Connect(t, srv)
	waitFor(t, 30*time.Second, "the consumer ready on the server that came up", func() bool { return get("/readyz") == http.StatusOK })
	if _, err := js.Consumer(context.Background(), "ONCEGATE", consumer.Durable("alerts")); err != nil {
		t.Errorf("durable consumer on the server: %v", err)
	}
	c.stop(t)
}
