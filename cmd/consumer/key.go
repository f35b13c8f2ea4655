package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/canon"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

func runKey(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("key", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		spec     dedupe.KeySpec
		fields   listFlag
		volatile listFlag
		scope    = fs.String("scope", "input", "key `scope`: input (same input, same key in every run) or run (needs -run)")
		hash     = fs.String("hash", "xxh", "key `hash`: xxh, or sha256 for payloads from untrusted parties")
		runID    = fs.String("run", "", "run `id`, for -scope run")
		maxBytes = fs.Int("max-bytes", 0, "largest payload accepted, in `bytes` (0: 1 MiB)")
	)
	fs.StringVar(&spec.Pipeline, "pipeline", "demo", "pipeline `name`")
	fs.StringVar(&spec.Step, "step", "effect", "step `name`")
	fs.Var(&fields, "fields", "comma-separated JSON `pointers` that identify the work (default: the whole payload)")
	fs.Var(&volatile, "volatile", "comma-separated JSON `pointers` dropped from the whole payload (timestamps, delivery ids)")
	fs.StringVar(&spec.Version, "version", "", "JSON `pointer` to a version field that starts new work when it changes")
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
	spec.Fields, spec.Volatile = fields, volatile
	spec.Limits = canon.Options{MaxBytes: *maxBytes}
	switch *scope {
	case "input":
	case "run":
		spec.PerRun = true
	default:
		return fmt.Errorf("key: -scope %q: want input or run", *scope)
	}
	switch *hash {
	case "xxh":
	case "sha256":
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
	fmt.Fprintf(stdout, "canonical:   %s\n", doc)
	fmt.Fprintf(stdout, "key:         %s\n", in.Key)
	fmt.Fprintf(stdout, "fingerprint: %s\n", in.Fingerprint)
	fmt.Fprintf(stdout, "window key:  %#016x\n", ledger.WindowKey(in.Key))
	return nil
}
