// Command consumer is Oncegate's command-line entry point.
//
// Usage:
//
//	consumer demo                      # the whole story, embedded, in under a minute
//	consumer run [-config FILE]        # the pipelines, until SIGTERM
//	consumer inspect [flags]           # keys, ledger records, leases, cache figures
//	consumer config check [FILE]       # validate and explain a configuration
//	consumer key [flags] < payload.json
//	consumer version                   # version, commit, Go version
//	consumer webhook sign -source NAME < payload.json
//
// The key command reads one trigger payload from standard input, validates it
// as I-JSON, and prints its RFC 8785 canonical form, the intent key that a
// pipeline step with the given key spec derives from it, and the payload's
// fingerprint. It exits with status 1 and a message naming the problem and
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

	"github.com/oncegate/oncegate/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "consumer:", err)
		}
		os.Exit(1)
	}
}

const usage = `usage: consumer <command> [flags]

commands:
  demo     run the whole story on a fresh machine: embedded NATS, stand-in model,
           a burst of triggers with retries and duplicates, and a report
  run      run the pipelines until SIGINT/SIGTERM (embedded NATS unless -nats-url)
  inspect  show a trigger's key and ledger record, pending leases, cache figures
  config   check FILE: validate a configuration and explain it
  key      derive the intent key of a payload read from standard input
  version  print the version, the commit and the Go version of this build
  webhook  sign -source NAME: print the headers a provider would send with a payload

Run "consumer <command> -h" for a command's flags.
`

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
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
	case "config":
		return runConfig(ctx, args[1:], stdin, stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, version.Get())
		return nil
	case "webhook":
		return runWebhook(ctx, args[1:], stdin, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
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
