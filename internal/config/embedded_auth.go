package config

// With the embedded server (no nats.url), the client authentication keys
// are what the server requires: nats.token_file (or ONCEGATE_NATS_TOKEN),
// nats.nkey_seed_file (the server admits the seed's public key) or
// nats.user with its password. The consumer connects with the same
// secret, and any other client must present it. Credentials files (JWT
// accounts) and client TLS need a NATS deployment.

// embeddedAuth checks the authentication keys against the embedded
// server: one way to authenticate, and none it cannot serve.
func (v *validator) embeddedAuth() {
	n := &v.c.NATS
	for _, f := range []struct{ path, val string }{
		{"nats.creds_file", n.CredsFile},
		{"nats.tls.ca_file", n.TLS.CAFile}, {"nats.tls.cert_file", n.TLS.CertFile}, {"nats.tls.key_file", n.TLS.KeyFile},
	} {
		if f.val != "" {
			v.add(f.path, invalid("only used with nats.url: the embedded server has no accounts and no TLS; "+
				"to require authentication of its clients, set nats.token_file (or ONCEGATE_NATS_TOKEN), nats.nkey_seed_file, or nats.user"))
		}
	}
	if n.NKeySeedFile != "" && n.User != "" {
		v.add("nats.user", invalid("the embedded server takes one way to authenticate: set nkey_seed_file or user, not both"))
	}
}
