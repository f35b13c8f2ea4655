package natsrun_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/natsrun"
	"github.com/oncegate/oncegate/internal/secretfile"
)

// TestSecretFilesModeRule: every secret file natsrun reads (a password,
// token, credentials or nkey seed file, a TLS client key) is held to
// package secretfile's rule, for a connection and for the embedded
// server alike: one every user may read is refused before anything
// connects or starts, with a *FileError that wraps secretfile.ErrMode and
// names the file and its fix, never its content.
func TestSecretFilesModeRule(t *testing.T) {
	const secret = "s3cret-token-0123456789"
	open := func(name, content string) string {
		p := writeFile(t, name, content)
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	check := func(t *testing.T, err error, path string) {
		t.Helper()
		var fe *natsrun.FileError
		if !errors.As(err, &fe) || !errors.Is(err, secretfile.ErrMode) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("error = %v; want a *FileError wrapping secretfile.ErrMode naming %s and chmod 600", err, path)
		}
		if err != nil {
			assertNoSecrets(t, "error", err.Error(), secret)
		}
	}
	for _, tt := range []struct {
		name string
		cfg  func() (natsrun.Options, string)
	}{
		{"password file", func() (natsrun.Options, string) {
			p := open("pw", secret)
			return natsrun.Options{User: "alice", PasswordFile: p}, p
		}},
		{"token file", func() (natsrun.Options, string) { p := open("token", secret); return natsrun.Options{TokenFile: p}, p }},
		{"creds file", func() (natsrun.Options, string) {
			p := open("x.creds", secret)
			return natsrun.Options{CredsFile: p}, p
		}},
		{"nkey seed file", func() (natsrun.Options, string) {
			p := open("x.nk", secret)
			return natsrun.Options{NKeySeedFile: p}, p
		}},
		{"TLS key file", func() (natsrun.Options, string) {
			p := open("key.pem", secret)
			return natsrun.Options{TLS: natsrun.TLS{CertFile: writeFile(t, "cert.pem", "x"), KeyFile: p}}, p
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, path := tt.cfg()
			_, err := connect(t, cfg, "nats://127.0.0.1:1", env(nil))
			check(t, err, path)
		})
		if tt.name == "creds file" || tt.name == "TLS key file" {
			continue // the embedded server takes neither
		}
		t.Run(tt.name+", embedded", func(t *testing.T) {
			cfg, path := tt.cfg()
			cfg.Listen, cfg.Logger, cfg.Getenv = "127.0.0.1:0", discard, env(nil)
			e, err := natsrun.StartEmbeddedAuth(t.TempDir(), cfg)
			if err == nil {
				shutdown(t, e)
			}
			check(t, err, path)
		})
	}
}
