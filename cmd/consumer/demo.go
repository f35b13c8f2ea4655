package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/oncegate/oncegate/internal/demo"
)

// runDemo is the demo command: its flags, and internal/demo's Run.
func runDemo(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d := demo.DefaultOptions
	fs.IntVar(&d.Alerts, "alerts", d.Alerts, "distinct alerts to publish (each 1 to 4 times)")
	fs.IntVar(&d.Webhooks, "webhooks", d.Webhooks, "distinct webhooks to publish (each 1 to 3 times)")
	fs.Uint64Var(&d.Seed, "seed", uint64(time.Now().UnixNano()), "workload and fault `seed`")
	fs.BoolVar(&d.Keep, "keep", false, "keep the data directory (printed) instead of removing it")
	verbose := fs.Bool("v", false, "log what the consumer does")
	fs.DurationVar(&d.Timeout, "timeout", d.Timeout, "give up if the work is not done by then")
	fs.Float64Var(&d.ModelErrors, "model-errors", d.ModelErrors, "share of model calls answered 500")
	fs.Float64Var(&d.Model429, "model-429", d.Model429, "share of model calls answered 429")
	fs.Float64Var(&d.EffectErrors, "effect-errors", d.EffectErrors, "share of effects that fail (retryably) before they are sent")
	fs.IntVar(&d.RecipeAlerts, "recipe-alerts", d.RecipeAlerts, "distinct alerts for the Alertmanager recipe (PagerDuty and Slack in this process)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: consumer demo [flags]\n\nStarts NATS, the ledger, the LLM cache and the stand-in model in this process, publishes a burst of\nwebhook and alert triggers with provider retries, redeliveries and reworded duplicates, restarts the\nconsumer half-way, and reports what each guard suppressed and what the effects were.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("demo: unexpected argument %q", fs.Arg(0))}
	}
	cfg, err := (&common{}).load()
	if err != nil {
		return err
	}
	if *verbose {
		d.Logger = newLogger(cfg, stderr)
	}
	err = demo.Run(ctx, cfg, d, stdout)
	if errors.Is(err, demo.ErrOptions) {
		return usageError{err}
	}
	return err
}
