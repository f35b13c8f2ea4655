// Command crashcmp kills a Watermill consumer between its handler's effect
// and the message's ack, restarts it, and counts the effects per intent:
// once with Oncegate's middleware (package wmonce, on a Badger ledger), once
// with Watermill's own deduplicator middleware (an in-memory expiring key
// repository).
//
//	go run ./crashcmp              # from contrib/watermill
//	go run ./crashcmp -keys 20 -kills 5
//
// Each scenario publishes one message per intent to a JetStream stream (an
// embedded server on loopback, in this process), then starts the consumer
// as a child process once per kill: the child handles the messages in
// order, and at its kill key SIGKILLs itself at the scenario's kill point.
// A last child runs until every message is acked. The effect is a line
// appended to a file; the figures are the lines per intent.
//
// Kill points:
//
//   - after-effect: inside the handler, right after the effect (for
//     Oncegate: before the commit);
//   - before-ack: after the middleware chain returned success (for
//     Oncegate: after the commit), before the router acks.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
)

func main() {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	keys := flag.Int("keys", 12, "intents published, one message each")
	kills := flag.Int("kills", 3, "children killed per scenario, each at its own intent")
	flag.Parse()
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashcmp:", err)
		os.Exit(1)
	}
	results, err := Compare(context.Background(), exe, nil, *keys, *kills)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashcmp:", err)
		os.Exit(1)
	}
	Print(os.Stdout, results)
}

// Print writes results as a table.
func Print(w *os.File, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "middleware\tkill point\tintents\tkilled\teffects per killed intent\teffects per other intent\ttotal effects")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%d\n", r.Scenario.Mode, r.Scenario.Kill, r.Keys, len(r.Killed),
			spread(r.PerKilled()), spread(r.PerOther()), r.Total())
	}
	tw.Flush()
}
