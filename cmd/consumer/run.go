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
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/faults"
	"github.com/oncegate/oncegate/internal/ingress"
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
	cfg, err := c.loadFlags()
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// loadFlags reads the configuration and applies the flags, leaving the
// validation of the result to the caller.
func (c *common) loadFlags() (*config.Config, error) {
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

// errNoNATSURL is what run -require-nats-url returns without a NATS URL.
var errNoNATSURL = errors.New("run: no NATS URL: set ONCEGATE_NATS_URL (or -nats-url, or nats.url in the file) " +
	"to the NATS deployment to join, e.g. nats://nats:4222. -require-nats-url, as the container image's default " +
	"command has it, does not start an embedded server: one on the container's loopback is out of every other container's reach")

// runFlags are the run command's flags: the common ones and its own.
type runFlags struct {
	common
	ingress    string
	proxy      string
	requireURL bool
}

func (r *runFlags) register(fs *flag.FlagSet) {
	r.common.register(fs)
	fs.StringVar(&r.ingress, "ingress", "", "serve the webhook ingress on `address` (host:port; \":8080\" is loopback, \"0.0.0.0:8080\" every interface; overrides ingress.listen)")
	fs.StringVar(&r.proxy, "proxy", "", "serve the OpenAI-compatible proxy on `address` (host:port; \":8081\" is loopback; overrides proxy.listen; clients' keys come from proxy.keys_file)")
	fs.BoolVar(&r.requireURL, "require-nats-url", false, "fail unless a NATS URL is set (nats.url, ONCEGATE_NATS_URL or -nats-url) rather than start an embedded server; the container image's default command sets it")
}

// load is common.load with the run command's own flags applied too,
// before the one validation (a configuration of the proxy alone is valid
// with -proxy).
func (r *runFlags) load() (*config.Config, error) {
	cfg, err := r.common.loadFlags()
	if err != nil {
		return nil, err
	}
	if r.ingress != "" {
		cfg.Ingress.Listen = r.ingress
		cfg.SetByFlag("ingress.listen", "-ingress")
	}
	if r.proxy != "" {
		cfg.Proxy.Listen = r.proxy
		cfg.SetByFlag("proxy.listen", "-proxy")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if r.requireURL && cfg.NATS.URL == "" && app.NeedsNATS(cfg) {
		return nil, errNoNATSURL
	}
	return cfg, nil
}

func runRun(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c runFlags
	c.register(fs)
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
	log := newLogger(cfg, stderr)
	a, err := app.Start(ctx, cfg, app.Options{Logger: log, Clock: faults.Clock(), WrapLedger: faults.WrapLedger()})
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
	if a.Proxy != nil {
		if cfg.Log.Format == config.LogJSON {
			slog.New(slog.NewJSONHandler(stdout, nil)).Info("OpenAI-compatible proxy", "url", "http://"+a.ProxyAddr+"/v1")
		} else {
			fmt.Fprintf(stdout, "Oncegate: OpenAI-compatible proxy at http://%s/v1\n", a.ProxyAddr)
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
	const usage = `usage: consumer config check [FILE] [-sample TRIGGER.json [-header K=V ...] [-answer ANSWER] [-pipeline NAME]]

Validates FILE (or the built-in configuration) with the ONCEGATE_* environment applied,
checks what run checks before it starts anything (a model for the model steps, every
secret, variable and file, read as run reads them: the same error, every problem at once),
and explains it. With -sample, it shows what a
pipeline would do with that trigger: its key, the filter's and the route's decisions, the
rendered prompt, and each effect's rendered request (secrets redacted), calling nothing.
A sample that is an Alertmanager notification (its webhook's body, several alerts) is
split as the ingress splits it, and each alert's trigger is shown.`
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
	args = args[1:]
	file := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		file, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("config check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sample := fs.String("sample", "", "a sample trigger `file` (JSON) to show what a pipeline would do with it")
	answerFile := fs.String("answer", "", "a `file` standing for the model's answer to the sample (JSON for a step with a schema)")
	pipeline := fs.String("pipeline", "", "the pipeline the sample goes to (default: the only one)")
	var headers headerFlag
	fs.Var(&headers, "header", "a header of the sample trigger, `K=V` (repeatable)")
	fs.Usage = func() { fmt.Fprintln(stderr, usage); fs.PrintDefaults() }
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 1 && file == "":
		file = fs.Arg(0)
	case fs.NArg() > 0:
		return fmt.Errorf("config check: one file at most")
	}
	cfg, err := config.Load(file)
	if err != nil {
		return err
	}
	// What run checks before it starts anything (app.Preflight: the
	// model, every secret, variable and file), the same error.
	warnings, preflightErr := app.Preflight(cfg, app.Options{})
	for _, w := range append(warnings, ingressWarnings(cfg)...) {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if err := cfg.Explain(stdout); err != nil {
		return err
	}
	if *sample != "" {
		if err := previewSample(stdout, cfg, *sample, *answerFile, *pipeline, headers); err != nil {
			return errors.Join(err, preflightErr)
		}
	}
	if preflightErr != nil {
		return preflightErr
	}
	fmt.Fprintln(stdout, "\nconfiguration is valid")
	return nil
}

// ingressWarnings are, with the ingress off in the configuration (it is
// turned on with run -ingress), the sources whose secret is not set (or
// does not decode), read as the ingress reads them at start (a tenant's
// too): run -ingress would refuse to start without them (an optional
// source's, it would answer 503 until it is set). With the ingress on,
// Preflight reports them.
func ingressWarnings(cfg *config.Config) []string {
	if cfg.IngressOn() {
		return nil
	}
	var out []string
	for _, p := range ingress.CheckSecrets(app.IngressOptions(&cfg.Ingress)) {
		out = append(out, "ingress "+p+" (needed once the ingress is served: run -ingress ADDR, or ingress.listen)")
	}
	return out
}

// previewSample shows what a pipeline would do with the sample trigger.
func previewSample(w io.Writer, cfg *config.Config, sampleFile, answerFile, name string, headers headerFlag) error {
	payload, err := os.ReadFile(sampleFile)
	if err != nil {
		return fmt.Errorf("config check: -sample: %w", err)
	}
	var answer []byte
	if answerFile != "" {
		if answer, err = os.ReadFile(answerFile); err != nil {
			return fmt.Errorf("config check: -answer: %w", err)
		}
	}
	var p *config.Pipeline
	switch {
	case name != "":
		if p, err = pickPipeline(cfg, name); err != nil {
			return fmt.Errorf("config check: %w", err)
		}
	case len(cfg.Pipelines) == 1:
		p = &cfg.Pipelines[0]
	default:
		names := make([]string, len(cfg.Pipelines))
		for i := range cfg.Pipelines {
			names[i] = cfg.Pipelines[i].Name
		}
		return usageError{fmt.Errorf("config check: -sample needs -pipeline, one of %s", strings.Join(names, ", "))}
	}
	if alerts, err := ingress.SplitAlertmanager(payload); err == nil {
		// What Alertmanager posts: one trigger per alert, as the ingress
		// publishes them.
		fmt.Fprintf(w, "\nsample %s: an Alertmanager notification of %d alerts, one trigger each as the ingress publishes them:\n", sampleFile, len(alerts))
		var errs []error
		for i, a := range alerts {
			fmt.Fprintf(w, "\nalert %d of %d:\n", i+1, len(alerts))
			if err := consumer.Preview(w, p, a, headers, answer); err != nil {
				errs = append(errs, fmt.Errorf("alert %d: %w", i+1, err))
			}
		}
		return errors.Join(errs...)
	}
	fmt.Fprintf(w, "\nsample %s:\n", sampleFile)
	return consumer.Preview(w, p, payload, headers, answer)
}

// headerFlag collects -header K=V.
type headerFlag map[string]string

func (h *headerFlag) String() string { return "" }

func (h *headerFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", s)
	}
	if *h == nil {
		*h = headerFlag{}
	}
	(*h)[k] = v
	return nil
}
