package app

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ingress"
	"github.com/oncegate/oncegate/internal/natsrun"
	"github.com/oncegate/oncegate/internal/proxy"
)

// ErrNotStarted is wrapped by the error Preflight returns, and so Start:
// the configuration lacks something it needs from outside its file, and
// nothing was started (no server, no listener, no directory made).
var ErrNotStarted = errors.New("app: not started")

// PreflightError is every problem Preflight found, each a line of its
// message. It wraps ErrNotStarted and each problem, so that errors.Is and
// errors.As reach them (config.ErrMissing, secretfile.ErrMode,
// ErrKeyFilePermissions, *natsrun.FileError, ...).
type PreflightError struct {
	Problems []error
}

func (e *PreflightError) Error() string {
	var b strings.Builder
	if len(e.Problems) == 1 {
		b.WriteString("app: not started; fix this first:")
	} else {
		fmt.Fprintf(&b, "app: not started; fix these %d first:", len(e.Problems))
	}
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(oneLine(p.Error()))
	}
	return b.String()
}

// Unwrap returns ErrNotStarted and the problems.
func (e *PreflightError) Unwrap() []error { return append([]error{ErrNotStarted}, e.Problems...) }

// oneLine folds a message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// Preflight checks, before anything starts, everything cfg needs from
// outside its file, and returns every problem at once, in a
// *PreflightError (nil if there is none), and the warnings that do not
// stop a start. It reads what the start would read, as it would read it:
//
//   - a model for the model steps and the proxy: llm.base_url, or
//     llm.standin asked for by name (config.CheckModel); and the API key's
//     variable, llm.api_key_env, for an endpoint not on loopback;
//   - every effect's secrets (config.CheckSecrets);
//   - with the ingress on, each source's secret, or each tenant's: a
//     source without one is a problem unless it is optional (a warning);
//   - the encryption key file (EncryptionKey);
//   - the NATS credentials, nkey seed, password and token (files or
//     ONCEGATE_NATS_*) and TLS files, when NATS is used (natsrun.CheckSecrets);
//   - the proxy's keys file, the console's operators' tokens.
//
// Secret files are read under package secretfile's rule. o.Getenv and
// o.LookupEnv read the environment. Start calls it first; config check
// calls it too, so that both say the same.
func Preflight(cfg *config.Config, o Options) (warnings []string, err error) {
	o.defaults()
	var problems []error
	add := func(err error) {
		if err != nil {
			problems = append(problems, err)
		}
	}
	// addAll adds each of the problems errors.Join joined into err.
	addAll := func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			problems = append(problems, j.Unwrap()...)
			return
		}
		add(err)
	}

	add(cfg.CheckModel())
	add(cfg.CheckAPIKey(config.LookupFunc(o.LookupEnv)))
	addAll(cfg.CheckSecrets(config.LookupFunc(o.LookupEnv)))

	if cfg.IngressOn() {
		for _, s := range cfg.Ingress.Sources {
			io := IngressOptions(&cfg.Ingress)
			io.Sources, io.Getenv = []config.Source{s}, o.Getenv
			for _, why := range ingress.CheckSecrets(io) {
				why = "ingress." + strings.Replace(why, "source "+s.Name+": ", "sources["+s.Name+"]: ", 1)
				if s.Optional {
					warnings = append(warnings, why+" (optional: it answers 503 until its secret is set)")
					continue
				}
				problems = append(problems, fmt.Errorf("%w (a source may start without it only if marked optional: true)", errors.New(why)))
			}
		}
	}

	key, err := EncryptionKey(cfg)
	clear(key)
	add(err)

	if NeedsNATS(cfg) {
		add(natsrun.CheckSecrets(NATSOptions(cfg.NATS, "", nil), cfg.NATS.URL == ""))
	}
	if cfg.ProxyOn() {
		if _, err := proxy.LoadKeys(cfg.Proxy.KeysFile); err != nil {
			add(fmt.Errorf("proxy.keys_file: %w", err))
		}
	}
	if cfg.Console.Listen != "" {
		_, err := ConsoleOperators(cfg.Console, o.Getenv)
		add(err)
	}
	warnings = append(warnings, cfg.ProxyWarnings()...)
	if len(problems) > 0 {
		return warnings, &PreflightError{Problems: problems}
	}
	return warnings, nil
}

// NeedsNATS reports whether the process uses NATS: for its pipelines, the
// ingress, the console, or a cache in JetStream KV. The proxy alone, with
// the cache in the data directory, needs none, and so starts no server.
func NeedsNATS(cfg *config.Config) bool {
	return len(cfg.Pipelines) > 0 || cfg.IngressOn() || cfg.Console.Listen != "" || cfg.LLM.Cache.Store == config.StoreKV
}

// defaults fills in the options' lookups and logger.
func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.LookupEnv == nil && o.Getenv != nil:
		get := o.Getenv
		o.LookupEnv = func(k string) (string, bool) { v := get(k); return v, v != "" }
	case o.LookupEnv == nil:
		o.LookupEnv = os.LookupEnv
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
}
