package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
)

// common holds the flags run, demo and inspect share. Flags override the
// file and the environment; secrets never come from flags.
type common struct {
	file      string
	dataDir   string
	natsURL   string
	listen    string
	metrics   string
	logFormat string
	logLevel  string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.file, "config", "", "configuration `file` (default: the built-in configuration, see examples/oncegate.yaml)")
	fs.StringVar(&c.dataDir, "data", "", "data `directory` for the embedded NATS server, the ledger and the cache (overrides data_dir)")
	fs.StringVar(&c.natsURL, "nats-url", "", "NATS `URL` to join a deployment; empty starts an embedded server (overrides nats.url; credentials come from the file or the environment, never from flags)")
	fs.StringVar(&c.listen, "listen", "", "embedded server's loopback `address` (overrides nats.embedded.listen)")
	fs.StringVar(&c.metrics, "metrics", "", "metrics and health `address`, or \"off\" (overrides metrics.listen)")
	fs.StringVar(&c.logFormat, "log-format", "", "log `format`: text or json (overrides log.format)")
	fs.StringVar(&c.logLevel, "log-level", "", "log `level`: debug, info, warn, error (overrides log.level)")
}

// load reads the configuration and applies the flags; it validates the
// result again, so a flag cannot bring in a bad value.
func (c *common) load() (*config.Config, error) {
	cfg, err := config.Load(c.file)
	if err != nil {
		return nil, err
	}
	if c.dataDir != "" {
		old := cfg.DataDir
		cfg.DataDir = c.dataDir
		// The embedded store follows the data directory when it lies
		// below it (as its default, data_dir/nats, does). Compare clean
		// paths: the default is "oncegate-data/nats" under "./oncegate-data".
		store, oldClean := filepath.Clean(cfg.NATS.Embedded.StoreDir), filepath.Clean(old)
		if rel, err := filepath.Rel(oldClean, store); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(os.PathSeparator)) && store != oldClean {
			cfg.NATS.Embedded.StoreDir = filepath.Join(c.dataDir, rel)
		}
	}
	set := func(flag, path string, dst *string, v string) {
		if v != "" {
			*dst = v
			cfg.SetByFlag(path, flag)
		}
	}
	set("-nats-url", "nats.url", &cfg.NATS.URL, c.natsURL)
	set("-listen", "nats.embedded.listen", &cfg.NATS.Embedded.Listen, c.listen)
	if c.metrics == "off" {
		cfg.Metrics.Listen = ""
		cfg.SetByFlag("metrics.listen", "-metrics")
	} else {
		set("-metrics", "metrics.listen", &cfg.Metrics.Listen, c.metrics)
	}
	set("-log-format", "log.format", &cfg.Log.Format, c.logFormat)
	set("-log-level", "log.level", &cfg.Log.Level, c.logLevel)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == config.LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func runRun(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	ingressAddr := fs.String("ingress", "", "serve the webhook ingress on `address` (host:port; \":8080\" is loopback, \"0.0.0.0:8080\" every interface; overrides ingress.listen)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: consumer run [flags]\n\nRuns the pipelines until SIGINT or SIGTERM, then drains.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("run: unexpected argument %q", fs.Arg(0))}
	}
	cfg, err := c.load()
	if err != nil {
		return err
	}
	if *ingressAddr != "" {
		cfg.Ingress.Listen = *ingressAddr
		if err := cfg.Validate(); err != nil {
			return err
		}
	}
	log := newLogger(cfg, stderr)
	a, err := app.Start(ctx, cfg, app.Options{Logger: log, Clock: faultClock()})
	if err != nil {
		return err
	}
	defer a.Close()
	// Where to reach the process, on standard output: a line for people,
	// or with -log-format json a JSON object, like every other line.
	if a.Embedded != nil {
		if cfg.Log.Format == config.LogJSON {
			slog.New(slog.NewJSONHandler(stdout, nil)).Info("embedded NATS", "url", a.Embedded.ClientURL(), "subjects", cfg.Stream.Subjects)
		} else {
			fmt.Fprintf(stdout, "Oncegate: embedded NATS at %s; publish triggers to %s\n", a.Embedded.ClientURL(), strings.Join(cfg.Stream.Subjects, ", "))
		}
	}
	if a.Ingress != nil {
		if cfg.Log.Format == config.LogJSON {
			slog.New(slog.NewJSONHandler(stdout, nil)).Info("webhook ingress", "url", "http://"+a.IngressAddr+"/hooks/<source>")
		} else {
			fmt.Fprintf(stdout, "Oncegate: webhook ingress at http://%s/hooks/<source>\n", a.IngressAddr)
		}
	}
	err = a.Run(ctx)
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func runConfig(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	const usage = "usage: consumer config check [FILE]\n\nValidates FILE (or the built-in configuration) with the ONCEGATE_* environment applied, and explains it."
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help"):
		fmt.Fprintln(stdout, usage)
		return flag.ErrHelp
	case len(args) == 0:
		fmt.Fprintln(stderr, usage)
		return usageError{errors.New("config: a subcommand is required: check")}
	case args[0] != "check":
		fmt.Fprintln(stderr, usage)
		return usageError{fmt.Errorf("config: unknown subcommand %q; the one subcommand is check", args[0])}
	}
	file := ""
	if len(args) > 2 {
		return fmt.Errorf("config check: one file at most")
	}
	if len(args) == 2 {
		file = args[1]
	}
	cfg, err := config.Load(file)
	if err != nil {
		return err
	}
	if err := cfg.Explain(stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\nconfiguration is valid")
	return nil
}
