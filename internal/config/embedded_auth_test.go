package config

import (
	"testing"
)

// TestEmbeddedAuthKeys: with the embedded server, a token file, an nkey
// seed file or a user turn on its authentication and validate; what it
// cannot serve (credentials files, client TLS, two ways at once) is
// refused with the key and the reason.
func TestEmbeddedAuthKeys(t *testing.T) {
	for _, tt := range []struct {
		name   string
		mutate func(n *NATS)
	}{
		{"token file", func(n *NATS) { n.TokenFile = "/run/secrets/nats-token" }},
		{"nkey seed file", func(n *NATS) { n.NKeySeedFile = "/run/secrets/oncegate.nk" }},
		{"user and password file", func(n *NATS) { n.User, n.PasswordFile = "oncegate", "/run/secrets/pw" }},
		{"user, password from the environment", func(n *NATS) { n.User = "oncegate" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mutate(&c.NATS)
			if err := c.Validate(); err != nil {
				t.Errorf("Validate() = %v; want it valid with the embedded server", err)
			}
		})
	}
	for _, tt := range []struct {
		name   string
		mutate func(n *NATS)
		path   string
	}{
		{"credentials file", func(n *NATS) { n.CredsFile = "/x.creds" }, "nats.creds_file"},
		{"client certificate", func(n *NATS) { n.TLS.CertFile, n.TLS.KeyFile = "c.pem", "k.pem" }, "nats.tls.cert_file"},
		{"nkey and user", func(n *NATS) { n.NKeySeedFile, n.User = "/x.nk", "oncegate" }, "nats.user"},
		{"token and nkey", func(n *NATS) { n.TokenFile, n.NKeySeedFile = "/t", "/x.nk" }, "nats.token_file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mutate(&c.NATS)
			findError(t, c.Validate(), tt.path, ErrInvalid)
		})
	}
}
