// Command consumer is Oncegate's command-line entry point.
//
// Usage:
//
//	consumer key [flags] < payload.json
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
  key    derive the intent key of a payload read from standard input
`

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "key":
		return runKey(ctx, args[1:], stdin, stdout, stderr)
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
