package natsrun

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// readyTimeout bounds StartEmbedded's wait for the server to accept
// connections.
const readyTimeout = 10 * time.Second

// lockFile is the name of the lock file StartEmbedded holds in the store
// directory. The server keeps its own data in StoreDir/jetstream.
const lockFile = "oncegate.lock"

// embeddedName is the embedded server's name, as clients see it.
const embeddedName = "oncegate-embedded"

// Embedded is a running in-process NATS server with JetStream. Its methods
// are safe for concurrent use.
type Embedded struct {
	srv      *server.Server
	lock     *os.File
	storeDir string
	auth     string // how clients authenticate, for logs: "none", "token", ...

	once sync.Once
	done chan struct{} // closed when the server has shut down and the lock is released
}

// StartEmbedded starts a NATS server with JetStream in this process and
// returns once it accepts connections.
//
// The server listens on o.Listen (the default is DefaultListen,
// 127.0.0.1:4222), which must be a loopback
// address: 127.0.0.0/8, ::1 or localhost (taken as 127.0.0.1). Port 0 or
// -1 picks a free port; ClientURL tells which. A non-loopback address is
// ErrNotLoopback: the server has no authentication. It always listens on a
// socket, never in-process only, because an in-process-only connection
// stalls under async publish load.
//
// JetStream keeps its data in o.StoreDir, or dataDir/nats if that is
// empty, fsynced every o.SyncInterval (the default is
// DefaultSyncInterval) or after every write with SyncAlways.
// StartEmbedded holds a lock on the store directory until Shutdown
// completes; if another server (in any process) holds it, the error is
// ErrStoreInUse, naming the directory. nats-server itself does not lock
// its store.
//
// The server logs to o.Logger (slog.Default() if nil; give it a component
// attribute if you want one): notices at Info (its start-up banner at
// Debug), warnings at Warn, errors and fatal errors at Error, and debug
// records at Debug when logger has Debug enabled; tracing stays off. There
// is no HTTP monitoring port and the server does not handle signals.
//
// If the server cannot listen, fails to start, or does not accept
// connections within 10 seconds of starting, the error is a
// *NotReadyError and nothing is left running. Starting, which includes
// JetStream's recovery of the store, is not itself bounded: a large store
// takes as long as it takes.
//
// The server requires no authentication, whatever o's authentication
// fields say; StartEmbeddedAuth requires it.
func StartEmbedded(dataDir string, o Options) (*Embedded, error) {
	return startEmbedded(dataDir, o, nil)
}

// startEmbedded is StartEmbedded with auth, if not nil, setting the
// server's authentication.
func startEmbedded(dataDir string, o Options, auth *serverAuth) (*Embedded, error) {
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	listen := o.Listen
	if listen == "" {
		listen = DefaultListen
	}
	host, port, err := loopbackHostPort(listen)
	if err != nil {
		return nil, err
	}
	storeDir := o.StoreDir
	if storeDir == "" {
		storeDir = filepath.Join(dataDir, "nats")
	}
	so := &server.Options{
		ServerName: embeddedName,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		NoSigs:     true,
	}
	auth.apply(so)
	switch s := o.SyncInterval; {
	case s == SyncAlways:
		so.SyncAlways = true
	case s == 0:
		so.SyncInterval = DefaultSyncInterval
	case s > 0:
		so.SyncInterval = s
	default:
		return nil, fmt.Errorf("natsrun: embedded sync interval %s: want a positive duration or always", s)
	}

	if err := os.MkdirAll(storeDir, 0o700); err != nil {
		return nil, fmt.Errorf("natsrun: embedded store directory: %w", err)
	}
	lock, err := lockDir(storeDir)
	if err != nil {
		return nil, err
	}
	unlock := func() {
		if lock != nil {
			_ = lock.Close()
		}
	}

	srv, err := server.NewServer(so)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("natsrun: embedded server: %w", err)
	}
	sl := &serverLogger{log: logger}
	debug := logger.Enabled(context.Background(), slog.LevelDebug)
	srv.SetLoggerV2(sl, debug, false, false)

	// Start listens before it returns, so a port already taken has been
	// reported (through Fatalf) by then: fail at once rather than after
	// readyTimeout.
	srv.Start()
	reason := sl.fatalText()
	if reason == "" && !srv.ReadyForConnections(readyTimeout) {
		reason = sl.fatalText()
		if reason == "" {
			reason = fmt.Sprintf("not accepting connections after %v", readyTimeout)
		}
	}
	if reason != "" {
		srv.Shutdown()
		srv.WaitForShutdown()
		unlock()
		return nil, &NotReadyError{Listen: listen, Timeout: readyTimeout, Reason: reason}
	}
	return &Embedded{srv: srv, lock: lock, storeDir: storeDir, auth: auth.String(), done: make(chan struct{})}, nil
}

// loopbackHostPort splits a listen address into the server's Host and
// Port, refusing a host that is not loopback.
func loopbackHostPort(listen string) (string, int, error) {
	host, p, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("natsrun: embedded listen address %q: want host:port", listen)
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return "", 0, fmt.Errorf("%w: %q is not loopback; the embedded server has no authentication, so it listens on 127.0.0.1, ::1 or localhost only (to serve other hosts, run a NATS server and set nats.url)", ErrNotLoopback, listen)
	}
	port, err := strconv.Atoi(p)
	switch {
	case err != nil || port < -1 || port > 65535:
		return "", 0, fmt.Errorf("natsrun: embedded listen address %q: port %q is not a number from 0 to 65535 (0 or -1 picks a free port)", listen, p)
	case port == 0:
		port = server.RANDOM_PORT // for nats-server, 0 means 4222
	}
	return host, port, nil
}

// ClientURL returns the URL clients connect with, such as
// "nats://127.0.0.1:4222", with the port the server actually listens on.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// StoreDir returns the directory the server keeps its data in.
func (e *Embedded) StoreDir() string { return e.storeDir }

// Server returns the underlying server, for what this package does not
// cover (monitoring structures in tests, say).
func (e *Embedded) Server() *server.Server { return e.srv }

// Shutdown stops the server gracefully: it closes client connections,
// flushes and closes the JetStream store, waits for the server's
// goroutines, then releases the store lock. Drain clients first so that
// nothing is lost in flight.
//
// If ctx ends first, Shutdown returns ctx's error while the shutdown goes
// on in the background; the lock is released only when it completes.
// Calling Shutdown again waits for the same shutdown.
func (e *Embedded) Shutdown(ctx context.Context) error {
	e.once.Do(func() {
		go func() {
			e.srv.Shutdown()
			e.srv.WaitForShutdown()
			if e.lock != nil {
				_ = e.lock.Close()
			}
			close(e.done)
		}()
	})
	select {
	case <-e.done:
		return nil
	default:
	}
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("natsrun: embedded server shutdown: %w", context.Cause(ctx))
	}
}
