package app

import (
	"log/slog"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ingress"
	"github.com/oncegate/oncegate/internal/natsrun"
)

// NATSOptions translates the nats section of the configuration into the
// NATS runner's Options: the authentication and TLS files, the connect
// timeout and the embedded server's settings, for a connection named
// name (the embedded server ignores it) that logs to logger. The URL is
// not among them: Connect takes it, StartEmbedded makes one.
func NATSOptions(n config.NATS, name string, logger *slog.Logger) natsrun.Options {
	sync := time.Duration(n.Embedded.SyncInterval)
	if n.Embedded.SyncInterval == config.SyncAlways {
		sync = natsrun.SyncAlways
	}
	return natsrun.Options{
		Name:         name,
		Logger:       logger,
		CredsFile:    n.CredsFile,
		NKeySeedFile: n.NKeySeedFile,
		User:         n.User,
		PasswordFile: n.PasswordFile,
		TokenFile:    n.TokenFile,
		TLS: natsrun.TLS{
			CAFile:   n.TLS.CAFile,
			CertFile: n.TLS.CertFile,
			KeyFile:  n.TLS.KeyFile,
		},
		ConnectTimeout: n.ConnectTimeout,
		Listen:         n.Embedded.Listen,
		StoreDir:       n.Embedded.StoreDir,
		SyncInterval:   sync,
	}
}

// IngressOptions translates the ingress section of the configuration into
// the webhook ingress's Options: where it listens, its limits and
// timeouts, and the sources as configured (the ingress resolves their
// kinds). The caller adds the JetStream to publish to, and the logger,
// registerer and lookups if it wants others than the defaults.
func IngressOptions(in *config.Ingress) ingress.Options {
	return ingress.Options{
		Listen:            in.Listen,
		MaxBodyBytes:      int64(in.MaxBodyBytes),
		Tolerance:         in.Tolerance,
		PublishTimeout:    in.PublishTimeout,
		RetryAfter:        in.RetryAfter,
		ReadHeaderTimeout: in.ReadHeaderTimeout,
		ReadTimeout:       in.ReadTimeout,
		IdleTimeout:       in.IdleTimeout,
		MaxInFlight:       in.MaxInFlight,
		Sources:           in.Sources,
	}
}
