package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/canon"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// runKey prints the key a pipeline of the configuration (-config, else the
// built-in one; -pipeline, else its first) derives from the payload on
// standard input. The key flags (-step, -fields, -volatile, -version,
// -scope, -hash) override the pipeline's key spec, to try another.
func runKey(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("key", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		file     = fs.String("config", "", "configuration `file` whose pipeline's key spec to use (default: the built-in configuration)")
		pipeline = fs.String("pipeline", "", "pipeline `name` (default: the configuration's first)")
		step     = fs.String("step", "", "step `name` (default: the pipeline's)")
		fields   listFlag
		volatile listFlag
		version  = fs.String("version", "", "JSON `pointer` to a version field that starts new work when it changes (default: the pipeline's)")
		scope    = fs.String("scope", "", "key `scope`: input (same input, same key in every run) or run (needs -run) (default: the pipeline's)")
		hash     = fs.String("hash", "", "key `hash`: xxh, or sha256 for payloads from untrusted parties (default: the pipeline's)")
		runID    = fs.String("run", "", "run `id`, for -scope run")
		maxBytes = fs.Int("max-bytes", 0, "largest payload accepted, in `bytes` (0: 1 MiB)")
	)
	fs.Var(&fields, "fields", "comma-separated JSON `pointers` that identify the work (default: the pipeline's)")
	fs.Var(&volatile, "volatile", "comma-separated JSON `pointers` dropped from the whole payload (timestamps, delivery ids) (default: the pipeline's)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: consumer key [flags] < payload.json")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("key: unexpected argument %q (the payload is read from standard input)", fs.Arg(0))}
	}
	cfg, err := config.Load(*file)
	if err != nil {
		return err
	}
	p, err := pickPipeline(cfg, *pipeline)
	if err != nil {
		return fmt.Errorf("key: %w", err)
	}
	spec := consumer.KeySpec(p)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["step"] {
		spec.Step = *step
	}
	if set["fields"] {
		spec.Fields = fields
	}
	if set["volatile"] {
		spec.Volatile = volatile
	}
	if set["version"] {
		spec.Version = *version
	}
	spec.Limits = canon.Options{MaxBytes: *maxBytes}
	switch *scope {
	case "":
	case config.ScopeInput:
		spec.PerRun = false
	case config.ScopeRun:
		spec.PerRun = true
	default:
		return fmt.Errorf("key: -scope %q: want input or run", *scope)
	}
	switch *hash {
	case "":
	case config.HashXXH:
		spec.SHA256 = false
	case config.HashSHA256:
		spec.SHA256 = true
	default:
		return fmt.Errorf("key: -hash %q: want xxh or sha256", *hash)
	}
	keyer, err := dedupe.NewKeyer(spec)
	if err != nil {
		return err
	}
	limit := *maxBytes
	if limit <= 0 {
		limit = 1 << 20
	}
	// Read one byte past the limit, so that an oversized payload is reported
	// as such without reading all of it.
	payload, err := io.ReadAll(io.LimitReader(stdin, int64(limit)+1))
	if err != nil {
		return fmt.Errorf("key: reading standard input: %w", err)
	}
	in, err := keyer.RunIntent(*runID, payload)
	if err != nil {
		return err
	}
	c, err := canon.New(spec.Limits)
	if err != nil {
		return err
	}
	doc, err := c.Append(nil, payload) // the Keyer accepted it with the same limits
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pipeline:    %s (step %s)\n", p.Name, spec.Step)
	fmt.Fprintf(stdout, "canonical:   %s\n", doc)
	fmt.Fprintf(stdout, "key:         %s\n", in.Key)
	fmt.Fprintf(stdout, "fingerprint: %s\n", in.Fingerprint)
	fmt.Fprintf(stdout, "window key:  %#016x\n", ledger.WindowKey(in.Key))
	return nil
}
