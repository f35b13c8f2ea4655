// Package natstest runs an embedded NATS server with JetStream for tests.
//
//	func TestSomething(t *testing.T) {
//		s := natstest.RunServer(t)
//		nc, js := natstest.Connect(t, s)
//		...
//	}
//
// The server listens on a random loopback port rather than using an
// in-process connection: in-process pipes stall under load (the race
// detector, a busy CI machine), a socket does not. Everything the fixture
// starts is stopped by t.Cleanup.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// readyTimeout bounds the wait for a server to accept connections: long
// enough for a machine that runs many test binaries at once (a server of a
// three-node cluster once took over 10s to start on a loaded 2-core VM).
const readyTimeout = 30 * time.Second

// RunServer starts a NATS server with JetStream on a random port of
// 127.0.0.1, keeping its store in a fresh t.TempDir. Each opt, applied in
// order, may change the options first (a JetStream domain, SyncAlways, a
// fixed port to restart on). The server is shut down, and waited for, in
// t.Cleanup; shutting it down earlier is fine.
func RunServer(t testing.TB, opts ...func(*server.Options)) *server.Server {
	t.Helper()
	o := &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	}
	for _, opt := range opts {
		opt(o)
	}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("natstest: creating server: %v", err)
	}
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(readyTimeout) {
		t.Fatalf("natstest: server not ready for connections after %v", readyTimeout)
	}
	return s
}

// Connect connects to s and returns the connection and a JetStream on it.
// Each opt is applied after the fixture's own options (a name, a reconnect
// policy). The connection is closed in t.Cleanup.
func Connect(t testing.TB, s *server.Server, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), append([]nats.Option{nats.Name(t.Name())}, opts...)...)
	if err != nil {
		t.Fatalf("natstest: connecting to %s: %v", s.ClientURL(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}
