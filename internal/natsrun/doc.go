// Package natsrun gets the consumer a NATS connection: it starts the
// embedded server when no URL is configured, and connects with the
// configured authentication, TLS and reconnect policy. It takes its own
// [Options], whose zero value means the defaults; internal/app fills them
// in from the configuration.
//
//	o := natsrun.Options{Name: "oncegate", Logger: logger, TokenFile: "/run/secrets/nats-token"}
//	if url == "" {
//		e, err := natsrun.StartEmbeddedAuth(dataDir, o)
//		...
//		defer e.Shutdown(ctx)
//		url = e.ClientURL()
//	}
//	nc, err := natsrun.Connect(ctx, url, o)
//
// # Embedded server
//
// [StartEmbedded] runs nats-server with JetStream in the process, on a
// loopback socket only ([ErrNotLoopback] otherwise: it has no
// authentication) and never in-process only, because an in-process-only
// connection stalls under async publish load. It locks its store directory
// ([ErrStoreInUse]) and returns once it accepts connections
// ([*NotReadyError] otherwise). [Embedded.Shutdown] stops it gracefully.
//
// # Connecting
//
// [Connect] fails fast at start-up when no server can be reached, then
// reconnects forever with capped, jittered backoff. Secrets come from
// files or the environment ([EnvPassword], [EnvToken]), never from the
// configuration file; an unusable file is a [*FileError].
//
// # Secrets
//
// No error text or log record of this package holds a password, token,
// nkey seed, file content or URL user information; [Redact] hides the
// latter in URLs.
package natsrun
