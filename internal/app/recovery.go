package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/console"
	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/secretfile"
)

// URLFile is the file in the data directory where a process with the
// embedded server writes the server's client URL, for the command line's
// admin commands to find it (the port may have been picked at start).
const URLFile = "nats.url"

// startRecovery starts the admin service (unless admin.off) and writes the
// embedded server's URL where the command line looks for it.
func (a *App) startRecovery(o Options) error {
	cfg := a.Config
	if a.Embedded != nil {
		path := filepath.Join(cfg.DataDir, URLFile)
		if err := os.WriteFile(path, []byte(a.Embedded.ClientURL()+"\n"), 0o600); err != nil {
			return fmt.Errorf("app: %w", err)
		}
		a.closers = append(a.closers, func() error { os.Remove(path); return nil })
	}
	if cfg.Admin.Off {
		return nil
	}
	host, _ := os.Hostname()
	ad, err := admin.New(admin.Options{
		Config: cfg, Conn: a.Conn, Ledger: a.Ledger, Counter: a.Metrics, Cache: a.Cache,
		Logger: o.Logger.With("component", "admin"), Owner: fmt.Sprintf("%s:%d", host, os.Getpid()),
		ResumeJobs: true, // a bulk redrive whose process died is taken over here
	})
	if err != nil {
		return err
	}
	a.Admin = ad
	a.closers = append(a.closers, func() error { ad.Close(); return nil })
	// The audit stream and the redrive buckets, made now that the
	// cluster is whole rather than in an incident.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := ad.Setup(sctx); err != nil {
		o.Logger.Warn("admin: the audit stream and redrive buckets are not set up yet (the operations will make them)", "err", err)
	}
	cancel()
	prefix := admin.Prefix(cfg.Admin.Subject, cfg.Stream.Name)
	svc, err := admin.Serve(a.Conn, ad, prefix, o.Logger.With("component", "admin"))
	if err != nil {
		return err
	}
	a.closers = append(a.closers, svc.Stop)
	o.Logger.Info("admin service", "subject", prefix+".>", "service", admin.ServiceName)
	return a.startConsole(o)
}

// startConsole serves the console if console.listen is set.
func (a *App) startConsole(o Options) error {
	cfg := a.Config
	if cfg.Console.Listen == "" {
		return nil
	}
	operators, err := ConsoleOperators(cfg.Console, o.Getenv)
	if err != nil {
		return err
	}
	co := console.Options{API: a.Admin, Config: cfg, Conn: a.Conn, Operators: operators, Logger: o.Logger.With("component", "console")}
	if c := a.Cache; c != nil {
		co.CacheStats = func() []llmhook.StepStats { return llmhook.Stats(c) }
		co.CacheSummary = func() (llmhook.Summary, error) { return llmhook.Summarize(c) }
	}
	s, err := console.New(co)
	if err != nil {
		return err
	}
	if a.ConsoleAddr, err = s.Start(cfg.Console.Listen); err != nil {
		return err
	}
	a.closers = append(a.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return s.Shutdown(ctx)
	})
	mode := "read-only: no console token"
	if operators.Len() > 0 {
		mode = "changes need an operator's token"
	}
	o.Logger.Info("console", "url", "http://"+a.ConsoleAddr+"/", "mode", mode, "operators", operators.Names())
	return nil
}

// ConsoleOperators returns who may sign in to the console: the operators
// of c.TokenFile if it is set, else of the environment variable
// config.EnvConsoleToken (read with getenv), else none (nil: the console
// is read-only). Either holds one token a line as "name token", or one
// token alone, whose operator is console.LoneOperator; it is held to
// package secretfile's rules: a file readable by its owner alone, tokens
// of at least secretfile.MinBytes bytes, names valid and given once, no
// token twice. The error wraps secretfile.ErrMode, ErrTooShort or
// ErrFormat, or the file system's error.
func ConsoleOperators(c config.Console, getenv func(string) string) (*secretfile.Set, error) {
	o := secretfile.Options{LoneName: console.LoneOperator}
	if f := c.TokenFile; f != "" {
		s, err := secretfile.Load(f, o)
		if err != nil {
			return nil, fmt.Errorf("app: console.token_file: %w", err)
		}
		return s, nil
	}
	v := getenv(config.EnvConsoleToken)
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	s, err := secretfile.Parse("$"+config.EnvConsoleToken, []byte(v), o)
	if err != nil {
		return nil, fmt.Errorf("app: %s: %w", config.EnvConsoleToken, err)
	}
	return s, nil
}
