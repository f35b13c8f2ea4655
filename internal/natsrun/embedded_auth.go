package natsrun

import (
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/oncegate/oncegate/internal/secretfile"
)

// serverAuth is the authentication the embedded server requires of every
// client. A nil *serverAuth requires none.
type serverAuth struct {
	kind           string // "token", "nkey" or "user"
	token          string
	nkey           string // a user's public nkey
	user, password string
}

// apply sets a's authentication on the server's options.
func (a *serverAuth) apply(o *server.Options) {
	if a == nil {
		return
	}
	switch a.kind {
	case "token":
		o.Authorization = a.token
	case "nkey":
		o.Nkeys = []*server.NkeyUser{{Nkey: a.nkey}}
	case "user":
		o.Username, o.Password = a.user, a.password
	}
}

// String names the authentication, without its secret.
func (a *serverAuth) String() string {
	if a == nil {
		return "none"
	}
	return a.kind
}

// StartEmbeddedAuth is StartEmbedded for a server that requires of every
// client the authentication the client side of o configures, so that the
// consumer connecting with Connect(o) gets in and a local process without
// the secret does not:
//
//   - o.NKeySeedFile: the server admits the seed's public key (the seed
//     stays in the file; a client signs the server's nonce with it);
//   - o.User, with the password from o.PasswordFile or EnvPassword;
//   - a token from o.TokenFile or, when none of the above is configured,
//     EnvToken.
//
// With none of them set the server requires nothing, as StartEmbedded.
// A credentials file (JWT accounts) is an error: the embedded server has
// no operator. o.Getenv looks up EnvPassword and EnvToken; nil means
// os.Getenv, as Connect uses. A missing, unreadable, empty or malformed
// file is a *FileError naming the file; no error holds a secret.
func StartEmbeddedAuth(dataDir string, o Options) (*Embedded, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	auth, err := embeddedAuth(o, getenv)
	if err != nil {
		return nil, err
	}
	return startEmbedded(dataDir, o, auth)
}

// embeddedAuth returns the server side of n's client authentication, nil
// for none. It reads secrets the way authOptions does, so that the two
// agree.
func embeddedAuth(n Options, getenv func(string) string) (*serverAuth, error) {
	switch {
	case n.CredsFile != "":
		return nil, errors.New("natsrun: the embedded server cannot use nats.creds_file (JWT accounts need a NATS deployment): set nats.url, or use nats.token_file or nats.nkey_seed_file")
	case n.NKeySeedFile != "":
		b, err := secretfile.ReadFile(n.NKeySeedFile)
		if err != nil {
			return nil, &FileError{What: "nkey seed file", Path: n.NKeySeedFile, Err: err}
		}
		kp, err := nkeys.ParseDecoratedUserNKey(b)
		clear(b)
		if err != nil {
			return nil, &FileError{What: "nkey seed file", Path: n.NKeySeedFile, Err: errors.New("not a valid nkey user seed")}
		}
		defer kp.Wipe()
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, &FileError{What: "nkey seed file", Path: n.NKeySeedFile, Err: errors.New("not a valid nkey user seed")}
		}
		return &serverAuth{kind: "nkey", nkey: pub}, nil
	case n.User != "":
		pass := getenv(EnvPassword)
		if n.PasswordFile != "" {
			p, err := readSecret("password file", n.PasswordFile)
			if err != nil {
				return nil, err
			}
			pass = p
		}
		if pass == "" {
			return nil, fmt.Errorf("natsrun: nats user %q has no password: set nats.password_file or %s", n.User, EnvPassword)
		}
		return &serverAuth{kind: "user", user: n.User, password: pass}, nil
	case n.TokenFile != "":
		t, err := readSecret("token file", n.TokenFile)
		if err != nil {
			return nil, err
		}
		return &serverAuth{kind: "token", token: t}, nil
	}
	if t := getenv(EnvToken); t != "" {
		return &serverAuth{kind: "token", token: t}, nil
	}
	return nil, nil
}

// Auth names how the server authenticates its clients: "none", "token",
// "nkey" or "user".
func (e *Embedded) Auth() string { return e.auth }
