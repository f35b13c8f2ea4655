package natsrun_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/oncegate/oncegate/internal/natsrun"
)

// startEmbeddedAuth starts an embedded server requiring cfg's
// authentication, shut down in t.Cleanup.
func startEmbeddedAuth(t *testing.T, cfg natsrun.Options, getenv func(string) string) *natsrun.Embedded {
	t.Helper()
	cfg.Listen, cfg.Logger, cfg.Getenv = "127.0.0.1:0", discard, getenv
	e, err := natsrun.StartEmbeddedAuth(t.TempDir(), cfg)
	if err != nil {
		t.Fatalf("StartEmbeddedAuth(%+v) error = %v", cfg, err)
	}
	t.Cleanup(func() { shutdown(t, e) })
	return e
}

// TestEmbeddedAuth: with a token, an nkey or a user configured, the
// embedded server refuses a client without it (or with another one) and
// admits the consumer's own connection, which then uses JetStream.
func TestEmbeddedAuth(t *testing.T) {
	const (
		token    = "tok-embedded-s3cret"
		password = "pw-embedded-s3cret"
	)
	// Another nkey user, which the server must not admit.
	other, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	otherSeed, err := other.Seed()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		cfg      natsrun.Options
		env      map[string]string
		wantAuth string
		wrong    []nats.Option // a client with the wrong secret
	}{
		{"token from the environment", natsrun.Options{}, map[string]string{natsrun.EnvToken: token}, "token",
			[]nats.Option{nats.Token("not-the-token")}},
		{"token file", natsrun.Options{TokenFile: writeFile(t, "token", token+"\n")}, nil, "token",
			[]nats.Option{nats.Token("not-the-token")}},
		{"nkey seed file", natsrun.Options{NKeySeedFile: writeFile(t, "user.nk", testNKeySeed+"\n")}, nil, "nkey",
			[]nats.Option{nkeyOption(t, string(otherSeed))}},
		{"user and password", natsrun.Options{User: "oncegate", PasswordFile: writeFile(t, "pw", password)}, nil, "user",
			[]nats.Option{nats.UserInfo("oncegate", "wrong")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startEmbeddedAuth(t, tt.cfg, env(tt.env))
			if got := e.Auth(); got != tt.wantAuth {
				t.Errorf("Auth() = %q; want %q", got, tt.wantAuth)
			}
			// A local process without the secret, or with another, is refused.
			for _, opts := range [][]nats.Option{nil, tt.wrong} {
				nc, err := nats.Connect(e.ClientURL(), append(opts, nats.NoReconnect())...)
				if err == nil {
					nc.Close()
					t.Fatalf("a client with options %v connected; want it refused", opts)
				}
				if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
					t.Errorf("refused client: error = %v; want an authorization violation", err)
				}
			}
			// The consumer's connection, from the same configuration, gets in
			// and uses JetStream.
			nc, err := connect(t, tt.cfg, e.ClientURL(), env(tt.env))
			if err != nil {
				t.Fatalf("ConnectWith the configured secret: %v", err)
			}
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "AUTH", Subjects: []string{"auth.>"}}); err != nil {
				t.Fatalf("CreateStream: %v", err)
			}
			if _, err := js.Publish(ctx, "auth.one", []byte("x")); err != nil {
				t.Fatalf("Publish: %v", err)
			}
		})
	}
}

// TestEmbeddedNoAuth: with nothing configured the embedded server admits
// any local client, as StartEmbedded does.
func TestEmbeddedNoAuth(t *testing.T) {
	e := startEmbeddedAuth(t, natsrun.Options{}, env(nil))
	if e.Auth() != "none" {
		t.Errorf("Auth() = %q; want none", e.Auth())
	}
	nc, err := nats.Connect(e.ClientURL())
	if err != nil {
		t.Fatalf("connect without auth: %v", err)
	}
	nc.Close()
}

// TestEmbeddedAuthErrors: what the embedded server cannot serve, or a
// secret file it cannot read, is refused before it starts, naming the
// file and never the secret.
func TestEmbeddedAuthErrors(t *testing.T) {
	var fe *natsrun.FileError
	for _, tt := range []struct {
		name     string
		cfg      natsrun.Options
		env      map[string]string
		wantFile bool
		want     string
	}{
		{"credentials file", natsrun.Options{CredsFile: writeFile(t, "x.creds", "jwt")}, nil, false, "nats.creds_file"},
		{"missing token file", natsrun.Options{TokenFile: "/nonexistent/token"}, nil, true, "/nonexistent/token"},
		{"empty token file", natsrun.Options{TokenFile: writeFile(t, "token", "  \n")}, nil, true, "empty"},
		{"not a seed", natsrun.Options{NKeySeedFile: writeFile(t, "bad.nk", "SUNOTASEED")}, nil, true, "nkey"},
		{"user without password", natsrun.Options{User: "oncegate"}, nil, false, natsrun.EnvPassword},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Listen, cfg.Logger, cfg.Getenv = "127.0.0.1:0", discard, env(tt.env)
			e, err := natsrun.StartEmbeddedAuth(t.TempDir(), cfg)
			if err == nil {
				shutdown(t, e)
				t.Fatalf("StartEmbeddedAuth(%+v) succeeded; want an error", tt.cfg)
			}
			if errors.As(err, &fe) != tt.wantFile || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("StartEmbeddedAuth(%+v) error = %v (a *FileError: %v); want %v and it to mention %q", tt.cfg, err, errors.As(err, &fe), tt.wantFile, tt.want)
			}
			assertNoSecrets(t, "error", err.Error(), "SUNOTASEED")
		})
	}
}

// nkeyOption is a client option that signs with the nkey user seed.
func nkeyOption(t *testing.T, seed string) nats.Option {
	t.Helper()
	o, err := nats.NkeyOptionFromSeed(writeFile(t, "other.nk", seed+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	return o
}
