package natsrun

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/secretfile"
)

// Environment variables Connect reads secrets from when no file names
// them. Secrets are never read from the configuration file.
const (
	// EnvPassword holds the password of Options.User when
	// Options.PasswordFile is empty.
	EnvPassword = "ONCEGATE_NATS_PASSWORD"
	// EnvToken holds the authentication token when TokenFile is empty and
	// no other authentication (creds, nkey, user) is configured.
	EnvToken = "ONCEGATE_NATS_TOKEN"
)

// Reconnect backoff: the delay before the n-th pass over the server list
// is drawn from [d/2, d] with d = reconnectBase·2^(n-1), capped at
// reconnectMax.
const (
	reconnectBase = 250 * time.Millisecond
	reconnectMax  = 10 * time.Second
)

// Defaults of the Options fields that have one.
const (
	// DefaultConnectTimeout bounds the dial of each server.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultListen is the address the embedded server listens on.
	DefaultListen = "127.0.0.1:4222"
	// DefaultSyncInterval is how often the embedded server fsyncs
	// JetStream data.
	DefaultSyncInterval = 100 * time.Millisecond
)

// SyncAlways, as Options.SyncInterval, fsyncs every write.
const SyncAlways time.Duration = -1

// Options say how Connect authenticates to a server, and how
// StartEmbedded and StartEmbeddedAuth run the embedded one. The zero value
// means the defaults: no authentication, no TLS beyond what the URL's
// scheme asks for, and an embedded server on 127.0.0.1:4222.
//
// Secrets are never fields: a password or token is read from the file
// named here or from the environment variable EnvPassword or EnvToken.
type Options struct {
	// Name is the connection's name, as the server's monitoring shows it.
	// The default is "oncegate". The embedded server does not use it.
	Name string
	// Logger receives the connection's events (connected, disconnected,
	// reconnected, closed, async errors), each with the attribute
	// name=Name, or the embedded server's log. The default is
	// slog.Default().
	Logger *slog.Logger
	// Getenv looks up EnvPassword and EnvToken. The default is os.Getenv;
	// tests pass a map's lookup.
	Getenv func(string) string

	// CredsFile is a NATS credentials file (user JWT and nkey seed).
	CredsFile string
	// NKeySeedFile is a file holding an nkey user seed.
	NKeySeedFile string
	// User is the user name for user and password authentication; the
	// password comes from PasswordFile or, if that is empty, EnvPassword.
	User string
	// PasswordFile is a file holding User's password.
	PasswordFile string
	// TokenFile is a file holding an authentication token. Without it,
	// and with none of the above, the token comes from EnvToken.
	TokenFile string
	// TLS names the files of the client's TLS configuration; the zero
	// value means the URL's scheme decides.
	TLS TLS
	// ConnectTimeout bounds the dial of each server. The default is
	// DefaultConnectTimeout, 5s.
	ConnectTimeout time.Duration

	// Listen is the loopback address the embedded server listens on. The
	// default is DefaultListen, 127.0.0.1:4222.
	Listen string
	// StoreDir is where the embedded server keeps JetStream data. The
	// default is the nats directory under the data directory
	// StartEmbedded is given.
	StoreDir string
	// SyncInterval is how often the embedded server fsyncs JetStream
	// data, or SyncAlways to fsync every write. The default is
	// DefaultSyncInterval, 100ms.
	SyncInterval time.Duration
}

// TLS names the files of a TLS client configuration.
type TLS struct {
	// CAFile is a PEM file of the CAs that sign the server's certificate.
	CAFile string
	// CertFile and KeyFile are the client certificate and its key, for
	// mutual TLS; set both or neither.
	CertFile string
	KeyFile  string
}

// Connect connects to url (one server URL or several separated by
// commas; an embedded server's ClientURL, or the configured URL) with the
// authentication and TLS o asks for:
//
//   - o.CredsFile: a credentials file (user JWT and nkey seed), read again
//     on every reconnect;
//   - o.NKeySeedFile: an nkey seed file;
//   - o.User with the password from o.PasswordFile or, if that is empty,
//     the environment variable EnvPassword;
//   - a token from o.TokenFile or, when none of the above is configured,
//     the environment variable EnvToken.
//
// Password and token files are trimmed of surrounding white space. With
// o.TLS.CAFile, or o.TLS.CertFile and KeyFile, the connection must use
// TLS, verified against that CA (or the system's) and presenting that
// client certificate. A missing, unreadable, empty or malformed file is a
// *FileError naming the file.
//
// Connect fails fast: if no server accepts the connection within
// o.ConnectTimeout per server (the default is DefaultConnectTimeout), or
// ctx ends first, it returns an error rather than retrying in the
// background, so that a process started against the wrong address says so
// at once. ctx bounds only the connecting; once connected, the connection
// reconnects forever on its own after a lost connection, with capped
// exponential backoff and jitter (250ms doubling to 10s), buffering
// publishes meanwhile. nats.go still closes the connection if the server
// rejects the same credentials twice in a row; watch
// nc.StatusChanged(nats.CLOSED) to notice.
//
// Neither errors nor log records hold secrets: passwords, tokens, seeds,
// file contents and URL user information are left out or redacted (see
// Redact). A returned error may unwrap to a nats.go error whose own text
// is not scrubbed; print the error, not its cause.
func Connect(ctx context.Context, url string, o Options) (*nats.Conn, error) {
	if o.Name == "" {
		o.Name = "oncegate"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if strings.TrimSpace(url) == "" {
		return nil, errors.New("natsrun: connect: no server URL")
	}
	where := Redact(url)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("natsrun: connect to %s: %w", where, context.Cause(ctx))
	}
	timeout := o.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}

	auth, secrets, err := authOptions(o)
	if err != nil {
		return nil, err
	}
	sc := newScrubber(append(secrets, urlSecrets(url)...)...)
	log := o.Logger.With("name", o.Name)

	dialer := &ctxDialer{timeout: timeout, ctx: ctx}
	opts := append(auth,
		nats.Name(o.Name),
		nats.Timeout(timeout),
		nats.SetCustomDialer(dialer),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectDelay),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil { // Close, or a server-requested reconnect
				log.Debug("nats disconnected")
				return
			}
			log.Warn("nats disconnected", "err", sc.err(err))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", Redact(nc.ConnectedUrl()), "reconnects", nc.Stats().Reconnects)
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Debug("nats reconnect attempt failed", "err", sc.err(err))
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if err := nc.LastError(); err != nil {
				log.Error("nats connection closed", "err", sc.err(err))
				return
			}
			log.Info("nats connection closed")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Error("nats async error", "subject", sub.Subject, "err", sc.err(err))
				return
			}
			log.Error("nats async error", "err", sc.err(err))
		}),
		nats.LameDuckModeHandler(func(*nats.Conn) {
			log.Warn("nats server entering lame duck mode; reconnecting elsewhere soon")
		}),
	)
	if tc, err := tlsConfig(o.TLS); err != nil {
		return nil, err
	} else if tc != nil {
		opts = append(opts, nats.Secure(tc))
	}

	nc, err := nats.Connect(url, opts...)
	dialer.release()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("natsrun: connect to %s: %w", where, context.Cause(ctx))
		}
		return nil, fmt.Errorf("natsrun: connect to %s: %w", where, sc.err(err))
	}
	log.Info("nats connected", "url", Redact(nc.ConnectedUrl()), "server", nc.ConnectedServerName())
	return nc, nil
}

// reconnectDelay is the pause before the attempts-th pass over the server
// list: capped exponential backoff with jitter, so that many clients of
// one restarted server do not come back in step.
func reconnectDelay(attempts int) time.Duration {
	d := reconnectMax
	if n := attempts - 1; n >= 0 && n < 16 && reconnectBase<<n < reconnectMax {
		d = reconnectBase << n
	}
	return d/2 + rand.N(d/2+1)
}

// authOptions returns the nats options of o's authentication and the
// secrets they carry.
func authOptions(o Options) ([]nats.Option, []string, error) {
	var (
		opts    []nats.Option
		secrets []string
	)
	if o.CredsFile != "" {
		if err := checkReadable("credentials file", o.CredsFile); err != nil {
			return nil, nil, err
		}
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.NKeySeedFile != "" {
		if err := checkReadable("nkey seed file", o.NKeySeedFile); err != nil {
			return nil, nil, err
		}
		opt, err := nats.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, nil, &FileError{What: "nkey seed file", Path: o.NKeySeedFile, Err: errors.New("not a valid nkey user seed")}
		}
		opts = append(opts, opt)
	}
	if o.User != "" {
		var pass string
		if o.PasswordFile != "" {
			p, err := readSecret("password file", o.PasswordFile)
			if err != nil {
				return nil, nil, err
			}
			pass = p
		} else if pass = o.Getenv(EnvPassword); pass == "" {
			return nil, nil, fmt.Errorf("natsrun: nats user %q has no password: set nats.password_file or %s", o.User, EnvPassword)
		}
		opts = append(opts, nats.UserInfo(o.User, pass))
		secrets = append(secrets, pass)
	}
	var token string
	switch {
	case o.TokenFile != "":
		t, err := readSecret("token file", o.TokenFile)
		if err != nil {
			return nil, nil, err
		}
		token = t
	case o.CredsFile == "" && o.NKeySeedFile == "" && o.User == "":
		token = o.Getenv(EnvToken)
	}
	if token != "" {
		opts = append(opts, nats.Token(token))
		secrets = append(secrets, token)
	}
	return opts, secrets, nil
}

// errEmptyFile is the cause of a *FileError for an empty file.
var errEmptyFile = errors.New("file is empty")

// readSecret reads a one-line secret from path, trimmed of surrounding
// white space, under package secretfile's rules (secretfile.ReadFile: a
// file open to others is refused, wrapping secretfile.ErrMode). Its errors
// never hold the content.
func readSecret(what, path string) (string, error) {
	b, err := secretfile.ReadFile(path)
	if err != nil {
		return "", &FileError{What: what, Path: path, Err: err}
	}
	s := strings.TrimSpace(string(b))
	clear(b)
	if s == "" {
		return "", &FileError{What: what, Path: path, Err: errEmptyFile}
	}
	return s, nil
}

// checkReadable checks that the secret file at path can be read under
// package secretfile's rules and is not empty, without keeping its
// content; nats.go reads it itself when connecting.
func checkReadable(what, path string) error {
	b, err := secretfile.ReadFile(path)
	if err != nil {
		return &FileError{What: what, Path: path, Err: err}
	}
	empty := len(strings.TrimSpace(string(b))) == 0
	clear(b)
	if empty {
		return &FileError{What: what, Path: path, Err: errEmptyFile}
	}
	return nil
}

// tlsConfig builds the client TLS configuration t asks for, or nil if t is
// empty.
func tlsConfig(t TLS) (*tls.Config, error) {
	if t == (TLS{}) {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, &FileError{What: "TLS CA file", Path: t.CAFile, Err: err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &FileError{What: "TLS CA file", Path: t.CAFile, Err: errors.New("no PEM certificate found")}
		}
		c.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("natsrun: a TLS client certificate needs both nats.tls.cert_file and nats.tls.key_file")
	}
	if t.CertFile != "" {
		certPEM, err := os.ReadFile(t.CertFile)
		if err != nil {
			return nil, &FileError{What: "TLS certificate file", Path: t.CertFile, Err: err}
		}
		keyPEM, err := secretfile.ReadFile(t.KeyFile)
		if err != nil {
			return nil, &FileError{What: "TLS key file", Path: t.KeyFile, Err: err}
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		clear(keyPEM)
		if err != nil {
			return nil, &FileError{What: "TLS key pair", Path: t.CertFile + " and " + t.KeyFile, Err: err}
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// ctxDialer dials with the connect call's ctx until release, so that
// cancelling the call aborts a dial in progress, and with no ctx after
// (reconnects outlive the call).
type ctxDialer struct {
	timeout time.Duration

	mu  sync.Mutex
	ctx context.Context
}

// Dial implements nats.CustomDialer.
func (d *ctxDialer) Dial(network, address string) (net.Conn, error) {
	d.mu.Lock()
	ctx := d.ctx
	d.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	nd := net.Dialer{Timeout: d.timeout}
	return nd.DialContext(ctx, network, address)
}

// release detaches the dialer from the connect call's ctx.
func (d *ctxDialer) release() {
	d.mu.Lock()
	d.ctx = nil
	d.mu.Unlock()
}

// closeWait bounds how long Close waits for the closed handler.
const closeWait = 5 * time.Second

// Close closes nc and waits, for a few seconds at most, until its closed
// handler has run. nats.go runs a connection's handlers (those Connect
// installs log the connection's events) on a goroutine of its own, after
// nc.Close has returned; a program that closes the connection and then
// reads, or closes, what its logger writes to would race with the last
// record. A connection that closes on its own while Close is called may
// have run its handler already: Close then returns after the few seconds.
func Close(nc *nats.Conn) {
	if nc == nil || nc.IsClosed() {
		return
	}
	done := make(chan struct{})
	prev := nc.ClosedHandler()
	nc.SetClosedHandler(func(c *nats.Conn) {
		defer close(done)
		if prev != nil {
			prev(c)
		}
	})
	nc.Close()
	select {
	case <-done:
	case <-time.After(closeWait):
	}
}

// CheckSecrets reads the secrets o names (files and environment
// variables) as Connect reads them, or, with embedded, as
// StartEmbeddedAuth does, and checks the TLS files, without connecting or
// starting anything: the start checks them with it before anything runs.
// Its error is the one Connect or StartEmbeddedAuth would return (a
// *FileError for a file), and never holds a secret.
func CheckSecrets(o Options, embedded bool) error {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if embedded {
		_, err := embeddedAuth(o, o.Getenv)
		return err
	}
	if _, _, err := authOptions(o); err != nil {
		return err
	}
	_, err := tlsConfig(o.TLS)
	return err
}
