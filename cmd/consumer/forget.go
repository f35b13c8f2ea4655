package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/oncegate/oncegate/internal/admin"
)

const forgetUsage = `usage: consumer forget [flags] KEY

Clears the failed ledger record of intent KEY (32 hex digits, as consumer dead shows it), so that
the intent's next trigger runs its work anew; or, when the intent's work was done and one of its
one-shot effects failed to go out, that effect's failed dispatch, so that a redrive of its dead
letter sends it. It refuses a committed record (its effect would happen again) and one in
progress (its effect may be under way), and clears only the failure it read: a success that
lands meanwhile stands. A record that failed with reason unknown_outcome (its effect may have
happened) is refused unless -unknown-outcome=not-sent states that you checked and it did not, as
redrive asks; the statement is kept in the cleared record and logged by the consumer with who
asked. Flags may follow the argument.
`

func runForget(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("forget", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	effect := fs.String("effect", "", "clear the failed dispatch of the one-shot effect `name` (by default: the one record of the intent that failed, its own or one of its effects' dispatch)")
	unknown := fs.String("unknown-outcome", "", "for a record that failed with reason unknown_outcome: `not-sent` states that the effect did not happen")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprint(stderr, forgetUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageError{fmt.Errorf("forget: want one key")}
	}
	if *unknown != "" && *unknown != admin.StatementNotSent {
		return usageError{fmt.Errorf("-unknown-outcome %q: the one statement is %s (the effect did not happen)", *unknown, admin.StatementNotSent)}
	}
	cfg, err := c.load()
	if err != nil {
		return err
	}
	conn, err := openAdmin(ctx, cfg, "forget")
	if err != nil {
		return fmt.Errorf("forget: %w", err)
	}
	defer conn.close()
	r, err := conn.api.Forget(ctx, admin.ForgetRequest{Key: pos[0], Effect: *effect, UnknownOutcome: *unknown, By: conn.by})
	if err != nil {
		return fmt.Errorf("forget: %w", err)
	}
	if *asJSON {
		return printJSON(stdout, r)
	}
	if r.Dispatch {
		fmt.Fprintf(stdout, "%s: %s the failed dispatch of %s; a redrive of its dead letter sends it\n", r.Key, r.Outcome, effectName(r.Effect, "")+" (one-shot)")
	} else {
		fmt.Fprintf(stdout, "%s: %s; the intent's next trigger runs its work anew\n", r.Key, r.Outcome)
	}
	if r.Statement != "" {
		fmt.Fprintf(stdout, "stated: the effect was %s (kept in the record, with who stated it)\n", r.Statement)
	}
	if r.Record != nil {
		fmt.Fprintf(stdout, "ledger: %s, token %d, updated %s\nreason: %s\n", r.Record.State, r.Record.Token, r.Record.Updated.Format(time.RFC3339Nano), r.Record.Reason)
	}
	return nil
}
