package natsrun_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/natsrun"
	"github.com/oncegate/oncegate/internal/natstest"
)

// A throwaway nkey user, generated for these tests only.
const (
	testNKeySeed = "SUAFMF7SLJFEEEPJFLVMIUEPEDK5DNRDCN2T76P3IDYSNINIQQS7UEUCJA"
	testNKeyPub  = "UAUPQZV72VAGIRWSX4WN6SIVNQHAC25GLQMYBD2J6CZFSW57Z4N6PLRK"
)

// env returns a Getenv that looks names up in m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// connect connects to url with cfg and getenv, and closes the connection
// in t.Cleanup.
func connect(t *testing.T, cfg natsrun.Options, url string, getenv func(string) string) (*nats.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cfg.Name, cfg.Getenv, cfg.Logger = t.Name(), getenv, discard
	nc, err := natsrun.Connect(ctx, url, cfg)
	if err == nil {
		t.Cleanup(nc.Close)
	}
	return nc, err
}

func TestConnectAuth(t *testing.T) {
	const (
		password = "pw-s3cret-1"
		token    = "tok-s3cret-2"
	)
	userServer := natstest.RunServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "alice", Password: password}}
	})
	tokenServer := natstest.RunServer(t, func(o *server.Options) { o.Authorization = token })
	nkeyServer := natstest.RunServer(t, func(o *server.Options) {
		o.Nkeys = []*server.NkeyUser{{Nkey: testNKeyPub}}
	})

	tests := []struct {
		name string
		srv  *server.Server
		cfg  natsrun.Options
		env  map[string]string
	}{
		{"password file", userServer, natsrun.Options{User: "alice", PasswordFile: writeFile(t, "pw", password+"\n")}, nil},
		{"password env", userServer, natsrun.Options{User: "alice"}, map[string]string{natsrun.EnvPassword: password}},
		{"token env", tokenServer, natsrun.Options{}, map[string]string{natsrun.EnvToken: token}},
		{"token file", tokenServer, natsrun.Options{TokenFile: writeFile(t, "tok", token)}, nil},
		{"nkey seed file", nkeyServer, natsrun.Options{NKeySeedFile: writeFile(t, "seed.nk", testNKeySeed+"\n")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, logger := newLogRecorder()
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			o := tt.cfg
			o.Name, o.Logger, o.Getenv = "auth-test", logger, env(tt.env)
			nc, err := natsrun.Connect(ctx, tt.srv.ClientURL(), o)
			if err != nil {
				t.Fatalf("Connect(%+v) error = %v", tt.cfg, err)
			}
			if err := nc.FlushTimeout(waitTimeout); err != nil {
				t.Errorf("Flush error = %v", err)
			}
			nc.Close()
			rec.waitFor(t, "nats connection closed")
			assertNoSecrets(t, "log", rec.String(), password, token, testNKeySeed)
		})
	}
}

func TestConnectWrongSecrets(t *testing.T) {
	const (
		rightPassword = "right-pw-s3cret"
		wrongPassword = "wrong-pw-s3cret"
		rightToken    = "right-tok-s3cret"
		wrongToken    = "wrong-tok-s3cret"
		urlPassword   = "url-pw-s3cret"
	)
	secrets := []string{rightPassword, wrongPassword, rightToken, wrongToken, urlPassword}
	userServer := natstest.RunServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "alice", Password: rightPassword}}
	})
	tokenServer := natstest.RunServer(t, func(o *server.Options) { o.Authorization = rightToken })
	hp := func(s *server.Server) string { return s.Addr().String() }

	tests := []struct {
		name    string
		url     string
		cfg     natsrun.Options
		env     map[string]string
		wantMsg string
	}{
		{"wrong password file", userServer.ClientURL(), natsrun.Options{User: "alice", PasswordFile: writeFile(t, "pw", wrongPassword)},
			map[string]string{natsrun.EnvToken: wrongToken}, "uthorization"},
		{"wrong password env", userServer.ClientURL(), natsrun.Options{User: "alice"},
			map[string]string{natsrun.EnvPassword: wrongPassword, natsrun.EnvToken: wrongToken}, "uthorization"},
		{"wrong token env", tokenServer.ClientURL(), natsrun.Options{},
			map[string]string{natsrun.EnvPassword: wrongPassword, natsrun.EnvToken: wrongToken}, "uthorization"},
		{"wrong password in URL", "nats://alice:" + urlPassword + "@" + hp(userServer), natsrun.Options{}, nil, "alice:xxxxx@"},
		{"wrong token in URL", "nats://" + urlPassword + "@" + hp(tokenServer), natsrun.Options{}, nil, "nats://xxxxx@"},
		{"unparseable URL", "nats://alice:" + urlPassword + "%zz@" + hp(userServer), natsrun.Options{}, nil, "alice:xxxxx@"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, logger := newLogRecorder()
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			o := tt.cfg
			o.Logger, o.Getenv = logger, env(tt.env)
			nc, err := natsrun.Connect(ctx, tt.url, o)
			if err == nil {
				nc.Close()
				t.Fatalf("Connect(%s, %+v) succeeded; want an error", natsrun.Redact(tt.url), tt.cfg)
			}
			t.Logf("error: %v", err)
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error = %v; want it to contain %q", err, tt.wantMsg)
			}
			assertNoSecrets(t, "error", err.Error(), secrets...)
			assertNoSecrets(t, "log", rec.String(), secrets...)
		})
	}
}

func TestConnectFileErrors(t *testing.T) {
	dir := t.TempDir()
	missing := dir + "/missing"
	garbage := "SUGARBAGE-s3cret-seed"
	tests := []struct {
		name     string
		cfg      natsrun.Options
		wantPath string
		wantIs   error
	}{
		{"missing password file", natsrun.Options{User: "alice", PasswordFile: missing}, missing, fs.ErrNotExist},
		{"empty password file", natsrun.Options{User: "alice", PasswordFile: writeFile(t, "pw", " \n")}, "pw", nil},
		{"missing token file", natsrun.Options{TokenFile: missing}, missing, fs.ErrNotExist},
		{"missing creds file", natsrun.Options{CredsFile: missing}, missing, fs.ErrNotExist},
		{"missing nkey seed file", natsrun.Options{NKeySeedFile: missing}, missing, fs.ErrNotExist},
		{"bad nkey seed file", natsrun.Options{NKeySeedFile: writeFile(t, "seed.nk", garbage)}, "seed.nk", nil},
		{"missing CA file", natsrun.Options{TLS: natsrun.TLS{CAFile: missing}}, missing, fs.ErrNotExist},
		{"CA file without PEM", natsrun.Options{TLS: natsrun.TLS{CAFile: writeFile(t, "ca.pem", garbage)}}, "ca.pem", nil},
		{"missing key file", natsrun.Options{TLS: natsrun.TLS{CertFile: writeFile(t, "c.pem", "x"), KeyFile: missing}}, missing, fs.ErrNotExist},
		{"bad key pair", natsrun.Options{TLS: natsrun.TLS{CertFile: writeFile(t, "c.pem", garbage), KeyFile: writeFile(t, "k.pem", garbage)}}, "k.pem", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := connect(t, tt.cfg, "nats://127.0.0.1:1", env(nil))
			var fe *natsrun.FileError
			if !errors.As(err, &fe) {
				t.Fatalf("Connect(%+v) error = %v; want a *FileError", tt.cfg, err)
			}
			t.Logf("error: %v", err)
			if !strings.Contains(err.Error(), tt.wantPath) {
				t.Errorf("error = %v; want it to name %s", err, tt.wantPath)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error = %v; want errors.Is %v", err, tt.wantIs)
			}
			assertNoSecrets(t, "error", err.Error(), garbage)
		})
	}

	t.Run("user without password", func(t *testing.T) {
		_, err := connect(t, natsrun.Options{User: "alice"}, "nats://127.0.0.1:1", env(nil))
		if err == nil || !strings.Contains(err.Error(), natsrun.EnvPassword) {
			t.Errorf("error = %v; want it to name %s", err, natsrun.EnvPassword)
		}
	})
	t.Run("no URL", func(t *testing.T) {
		if _, err := connect(t, natsrun.Options{}, " ", env(nil)); err == nil {
			t.Errorf("Connect(no URL) succeeded")
		}
	})
}

func TestConnectFailsFast(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		_, err = connect(t, natsrun.Options{}, "nats://"+addr, env(nil))
		if err == nil || !strings.Contains(err.Error(), addr) {
			t.Errorf("Connect(closed port) error = %v; want one naming %s", err, addr)
		}
	})
	t.Run("silent server", func(t *testing.T) {
		// A listener that accepts and never says INFO: the connect timeout
		// ends the wait.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				conns = append(conns, c)
			}
		}()
		start := time.Now()
		_, err = connect(t, natsrun.Options{ConnectTimeout: 300 * time.Millisecond}, "nats://"+l.Addr().String(), env(nil))
		if err == nil {
			t.Fatalf("Connect(silent server) succeeded")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Connect(silent server, 300ms timeout) took %v", d)
		}
		l.Close()
	})
	t.Run("cancelled", func(t *testing.T) {
		s := natstest.RunServer(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := natsrun.Connect(ctx, s.ClientURL(), natsrun.Options{Logger: discard})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Connect(cancelled ctx) error = %v; want context.Canceled", err)
		}
	})
}

func TestConnectReconnects(t *testing.T) {
	a := natstest.RunServer(t)
	port := a.Addr().(*net.TCPAddr).Port
	rec, logger := newLogRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	nc, err := natsrun.Connect(ctx, a.ClientURL(), natsrun.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("greet")
	if err != nil {
		t.Fatal(err)
	}

	a.Shutdown()
	a.WaitForShutdown()
	rec.waitFor(t, "nats disconnected")

	b := natstest.RunServer(t, func(o *server.Options) { o.Port = port })
	rec.waitFor(t, "nats reconnected")
	if got := nc.Stats().Reconnects; got < 1 {
		t.Errorf("Reconnects = %d; want at least 1", got)
	}
	if got := nc.ConnectedServerId(); got != b.ID() {
		t.Errorf("connected to server %s; want the new server %s", got, b.ID())
	}
	// The subscription was replayed on the new server.
	if err := nc.Publish("greet", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(waitTimeout)
	if err != nil || string(m.Data) != "hi" {
		t.Fatalf("NextMsg after reconnect = %v, %v; want hi", m, err)
	}
}

// slowWriter writes a record that holds slow to w after a pause.
type slowWriter struct {
	w    io.Writer
	slow string
}

func (s slowWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), s.slow) {
		time.Sleep(100 * time.Millisecond)
	}
	return s.w.Write(p)
}

// TestCloseWaitsForTheClosedHandler: nats.go runs the closed handler after
// nc.Close returns; natsrun.Close returns once it has run, so that what
// the connection logs is all written when the program goes on (a command
// that returns its output, a test that reads it).
func TestCloseWaitsForTheClosedHandler(t *testing.T) {
	s := natstest.RunServer(t)
	rec, _ := newLogRecorder()
	logger := slog.New(slog.NewTextHandler(slowWriter{rec, "nats connection closed"}, nil))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	nc, err := natsrun.Connect(ctx, s.ClientURL(), natsrun.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	natsrun.Close(nc)
	if !nc.IsClosed() {
		t.Fatal("the connection is not closed")
	}
	if got := rec.String(); !strings.Contains(got, "nats connection closed") {
		t.Fatalf("Close returned before the closed handler wrote its record; log:\n%s", got)
	}
	// Again, and on nil: nothing to wait for.
	natsrun.Close(nc)
	natsrun.Close(nil)
}
