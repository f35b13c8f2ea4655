// Command consumer is Oncegate's command-line entry point.
//
// Usage:
//
//	consumer demo                      # the whole story, embedded, in under a minute
//	consumer run [-config FILE]        # the pipelines, until SIGTERM
//	consumer inspect [flags]           # keys, ledger records, leases, cache figures
//	consumer dead [flags] [SEQ...]     # dead letters; dead show SEQ: one with its payload
//	consumer redrive [flags] [SEQ...]  # republish dead letters, fenced (dry run unless -yes)
//	consumer forget [flags] KEY        # clear a failed ledger record
//	consumer audit [flags]             # who redrove, forgot, approved what
//	consumer config check [FILE]       # validate and explain a configuration
//	consumer key [flags] < payload.json
//	consumer version                   # version, commit, Go version
//	consumer webhook sign -source NAME < payload.json
//
// The key command reads one trigger payload from standard input, validates it
// as I-JSON, and prints its RFC 8785 canonical form, the intent key that a
// pipeline of the configuration (-config, else the built-in one; -pipeline,
// else its first) derives from it, its key spec overridden by any key flags
// given, and the payload's fingerprint. It exits with status 1 and a message naming the problem and
// its byte offset when the payload is rejected.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/faults"
	"github.com/oncegate/oncegate/internal/version"
)

// The fault switches of an oncegate_faults build (package faults): the
// configuration leaves them alone in that build, and refuses them, as any
// unknown ONCEGATE_* variable, in every other (faults.Env is empty there).
func init() { config.EnvAllowlist = append(config.EnvAllowlist, faults.Env...) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(exitCode(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr), os.Stderr))
}

// usageError is a command line that does not parse: exit status 2, as the
// flag package's own errors have.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitCode reports err and returns the process's exit status: 0 for
// success and for help asked for (-h), 2 for a command line that does not
// parse, 1 for anything else.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintln(stderr, "consumer:", err)
		return 2
	}
	fmt.Fprintln(stderr, "consumer:", err)
	return 1
}

const usage = `usage: consumer <command> [flags]

commands:
  demo     run the whole story on a fresh machine: embedded NATS, stand-in model,
           a burst of triggers with retries and duplicates, and a report
  run      run the pipelines until SIGINT/SIGTERM (embedded NATS unless -nats-url)
  inspect  show a trigger's key and ledger record, pending leases, cache figures
  dead     list dead letters (dead show SEQ: one, with its payload and headers)
  redrive  republish dead letters once their cause is fixed, fenced by the ledger (dry run unless -yes)
  forget   clear an intent's failed ledger record, so that its next trigger runs anew
  audit    list who redrove, forgot, approved and cancelled what, and what came of it
  config   check FILE: validate a configuration and explain it
  key      derive the intent key of a payload read from standard input
  version  print the version, the commit and the Go version of this build
  webhook  sign -source NAME: print the headers a provider would send with a payload

Run "consumer <command> -h" for a command's flags.
`

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{errors.New("a command is required")}
	}
	switch args[0] {
	case "key":
		return runKey(ctx, args[1:], stdin, stdout, stderr)
	case "run":
		return runRun(ctx, args[1:], stdin, stdout, stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdin, stdout, stderr)
	case "inspect":
		return runInspect(ctx, args[1:], stdin, stdout, stderr)
	case "dead":
		return runDead(ctx, args[1:], stdin, stdout, stderr)
	case "redrive":
		return runRedrive(ctx, args[1:], stdin, stdout, stderr)
	case "forget":
		return runForget(ctx, args[1:], stdin, stdout, stderr)
	case "audit":
		return runAudit(ctx, args[1:], stdin, stdout, stderr)
	case "config":
		return runConfig(ctx, args[1:], stdin, stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, version.Get())
		return nil
	case "webhook":
		return runWebhook(ctx, args[1:], stdin, stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[0] == "help" && args[1] != "help" {
			// "consumer help run" is "consumer run -h".
			return run(ctx, []string{args[1], "-h"}, stdin, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return usageError{fmt.Errorf("unknown command %q", args[0])}
}

// listFlag is a comma-separated list of JSON Pointers.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// parseFlags parses args into fs; a flag that does not parse is a usage
// error (exit status 2), and -h is help (exit status 0).
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError{err}
}
