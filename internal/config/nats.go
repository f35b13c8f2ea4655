package config

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"time"
)

// NATS says which NATS server to use and how to authenticate to it.
//
// Secrets are never read from the file: a password or token is read from a
// file named here, or from the environment variable ONCEGATE_NATS_PASSWORD
// or ONCEGATE_NATS_TOKEN. A "password" or "token" key is an error.
//
// With the embedded server (URL empty), NKeySeedFile, User or the token
// are what the server requires of every client, the consumer included;
// CredsFile and TLS need a deployment (see embedded_auth.go).
type NATS struct {
	// URL is the server to connect to: one URL, or several separated by
	// commas ("nats://a:4222,nats://b:4222"). It must not carry a user or
	// password. Empty (the default) starts an embedded server with
	// JetStream, listening on loopback only, with its data in
	// Embedded.StoreDir.
	URL string `yaml:"url"`
	// Embedded configures the embedded server; it is ignored when URL is
	// set.
	Embedded Embedded `yaml:"embedded"`
	// CredsFile is a NATS credentials file (user JWT and nkey seed).
	CredsFile string `yaml:"creds_file"`
	// NKeySeedFile is a file holding an nkey seed.
	NKeySeedFile string `yaml:"nkey_seed_file"`
	// User is the user name for user and password authentication. The
	// password comes from PasswordFile or ONCEGATE_NATS_PASSWORD.
	User string `yaml:"user"`
	// PasswordFile is a file holding User's password.
	PasswordFile string `yaml:"password_file"`
	// TokenFile is a file holding an authentication token. The token may
	// also come from ONCEGATE_NATS_TOKEN.
	TokenFile string `yaml:"token_file"`
	// TLS configures TLS to the server; empty means the URL's scheme
	// decides.
	TLS TLS `yaml:"tls"`
	// ConnectTimeout bounds the dial of each server. The default is 5s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
}

// Embedded configures the embedded NATS server.
type Embedded struct {
	// Listen is the loopback address the embedded server listens on. The
	// default is "127.0.0.1:4222". A loopback listener is used even
	// in-process: an in-process-only connection stalls under async publish
	// load.
	Listen string `yaml:"listen"`
	// StoreDir is where the server keeps JetStream data. The default is
	// DataDir/nats.
	StoreDir string `yaml:"store_dir"`
	// SyncInterval is how often JetStream data is fsynced, or "always" to
	// fsync every write. The default is 100ms.
	SyncInterval SyncInterval `yaml:"sync_interval"`
}

// TLS names the files of a TLS client configuration.
type TLS struct {
	// CAFile is a PEM file of the CAs that sign the server's certificate.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate and its key, for
	// mutual TLS; set both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Defaults of the nats section.
const (
	DefaultEmbeddedListen = "127.0.0.1:4222"
	DefaultSyncInterval   = SyncInterval(100 * time.Millisecond)
	DefaultConnectTimeout = 5 * time.Second
)

// SyncInterval is how often the embedded server fsyncs JetStream data: a
// positive duration, or SyncAlways. Its text form is a Go duration
// ("100ms") or "always".
type SyncInterval time.Duration

// SyncAlways fsyncs every write.
const SyncAlways SyncInterval = -1

func (s SyncInterval) String() string {
	if s == SyncAlways {
		return "always"
	}
	return formatDuration(time.Duration(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s SyncInterval) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *SyncInterval) UnmarshalText(b []byte) error {
	if string(b) == "always" {
		*s = SyncAlways
		return nil
	}
	d, err := parseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%w, or \"always\"", err)
	}
	*s = SyncInterval(d)
	return nil
}

// natsDefaults fills in the nats section.
func (c *Config) natsDefaults() {
	n := &c.NATS
	setDefault(c, "nats.url", &n.URL, "")
	setDefault(c, "nats.embedded.listen", &n.Embedded.Listen, DefaultEmbeddedListen)
	setDefault(c, "nats.embedded.store_dir", &n.Embedded.StoreDir, filepath.Join(c.DataDir, "nats"))
	setDefault(c, "nats.embedded.sync_interval", &n.Embedded.SyncInterval, DefaultSyncInterval)
	setDefault(c, "nats.connect_timeout", &n.ConnectTimeout, DefaultConnectTimeout)
}

// nats checks the nats section: the embedded server, or the URLs of a
// deployment, and that the credentials are one consistent set.
func (v *validator) nats() {
	n := &v.c.NATS
	v.positive("nats.connect_timeout", n.ConnectTimeout)
	if n.URL == "" {
		if err := checkListen(n.Embedded.Listen, true); err != nil {
			v.add("nats.embedded.listen", err)
		}
		if n.Embedded.StoreDir == "" {
			v.add("nats.embedded.store_dir", missing("a directory is required"))
		}
		if s := n.Embedded.SyncInterval; s != SyncAlways && s <= 0 {
			v.add("nats.embedded.sync_interval", invalid("must be positive or \"always\", got %s", formatDuration(time.Duration(s))))
		}
		v.embeddedAuth()
	} else {
		for u := range strings.SplitSeq(n.URL, ",") {
			if err := checkURL(strings.TrimSpace(u), "nats", "tls", "ws", "wss"); err != nil {
				v.add("nats.url", err)
			}
		}
	}
	if n.CredsFile != "" && n.NKeySeedFile != "" {
		v.add("nats.nkey_seed_file", invalid("set creds_file or nkey_seed_file, not both"))
	}
	if n.TokenFile != "" && (n.CredsFile != "" || n.NKeySeedFile != "" || n.User != "") {
		v.add("nats.token_file", invalid("a token is an alternative to creds_file, nkey_seed_file and user; set one"))
	}
	if n.PasswordFile != "" && n.User == "" {
		v.add("nats.user", missing("password_file needs a user"))
	}
	if (n.TLS.CertFile == "") != (n.TLS.KeyFile == "") {
		p := "nats.tls.key_file"
		if n.TLS.CertFile == "" {
			p = "nats.tls.cert_file"
		}
		v.add(p, missing("a client certificate needs both cert_file and key_file"))
	}
}

// nats explains the nats section: the embedded server and what its
// clients must present, or the deployment and how Oncegate reaches it.
func (x *explainer) nats() {
	n := &x.c.NATS
	if n.URL == "" {
		x.row("nats", "embedded server with JetStream on "+x.d("nats.embedded.listen", n.Embedded.Listen, n.Embedded.Listen),
			"store "+x.d("nats.embedded.store_dir", n.Embedded.StoreDir, n.Embedded.StoreDir),
			"fsync "+x.d("nats.embedded.sync_interval", n.Embedded.SyncInterval, syncText(n.Embedded.SyncInterval)))
		x.row("", "clients must present: "+natsAuth(n))
	} else {
		urls := strings.Split(n.URL, ",")
		for i, u := range urls {
			urls[i] = redactURL(strings.TrimSpace(u))
		}
		x.row("nats", "server "+strings.Join(urls, ", "),
			"connect timeout "+x.d("nats.connect_timeout", n.ConnectTimeout, formatDuration(n.ConnectTimeout)))
		x.row("", "auth: "+natsAuth(n))
		if n.TLS != (TLS{}) {
			var t []string
			if n.TLS.CAFile != "" {
				t = append(t, "CA file "+n.TLS.CAFile)
			}
			if n.TLS.CertFile != "" {
				t = append(t, "client certificate "+n.TLS.CertFile+", key file "+n.TLS.KeyFile)
			}
			x.row("", "tls: "+strings.Join(t, "; "))
		}
	}
}

func natsAuth(n *NATS) string {
	switch {
	case n.CredsFile != "":
		return "credentials file " + n.CredsFile
	case n.NKeySeedFile != "":
		return "nkey seed file " + n.NKeySeedFile
	case n.User != "" && n.PasswordFile != "":
		return "user " + n.User + ", password from file " + n.PasswordFile
	case n.User != "":
		return "user " + n.User + ", password from $ONCEGATE_NATS_PASSWORD"
	case n.TokenFile != "":
		return "token from file " + n.TokenFile
	}
	return "token from $ONCEGATE_NATS_TOKEN if set, else none"
}

func syncText(s SyncInterval) string {
	if s == SyncAlways {
		return "on every write"
	}
	return "every " + s.String()
}

// The nats section's secret-looking keys are refused with their reason: secrets are not read from the file.
func init() {
	refused[reflect.TypeFor[NATS]()] = map[string]string{
		"password": "secrets are not read from the config file: use password_file, or the environment variable ONCEGATE_NATS_PASSWORD",
		"token":    "secrets are not read from the config file: use token_file, or the environment variable ONCEGATE_NATS_TOKEN",
		"nkey":     "secrets are not read from the config file: use nkey_seed_file",
		"seed":     "secrets are not read from the config file: use nkey_seed_file",
	}
}
