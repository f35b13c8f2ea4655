package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/oncegate/oncegate/internal/admin"
)

const redriveUsage = `usage: consumer redrive [flags] [SEQ|FROM-TO ...]

Redrives dead letters: each chosen (by sequence or range in the dead-letter stream, and the
flags) is republished to its trigger's subject with its payload and headers, after the intent's
failed record is cleared, fenced: a committed intent is not redone and work in progress is left
alone. A dry run unless -yes. A dead letter redriven once is not redriven again without -again.
A dead letter of reason unknown_outcome (a one-shot effect that may have gone out) is refused
unless -unknown-outcome=not-sent states that you checked and it did not. Each redrive is logged by
the consumer with who asked, and marked on the dead letter. Flags may follow the arguments.
`

func runRedrive(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("redrive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	var s selectFlags
	s.register(fs, "redrive at most `n` dead letters (0: every one chosen)", 0)
	yes := fs.Bool("yes", false, "carry the redrive out (without it, a dry run says what would be done)")
	again := fs.Bool("again", false, "redrive dead letters that were redriven before (still fenced by the ledger)")
	unknown := fs.String("unknown-outcome", "", "for dead letters of reason unknown_outcome: `not-sent` states that the effect did not happen")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprint(stderr, redriveUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *unknown != "" && *unknown != admin.StatementNotSent {
		return usageError{fmt.Errorf("-unknown-outcome %q: the one statement is %s (the effect did not happen)", *unknown, admin.StatementNotSent)}
	}
	sel, err := s.selection(pos, time.Now())
	if err != nil {
		return err
	}
	cfg, err := c.load()
	if err != nil {
		return err
	}
	conn, err := openAdmin(ctx, cfg, "redrive")
	if err != nil {
		return fmt.Errorf("redrive: %w", err)
	}
	defer conn.close()
	req := admin.RedriveRequest{Selection: sel, Yes: *yes, Again: *again, UnknownOutcome: *unknown, By: conn.by}
	all := admin.RedriveReply{DryRun: !*yes, Results: []admin.RedriveResult{}}
	for want := s.limit; ; {
		req.Limit = admin.MaxLimit
		if s.limit > 0 {
			req.Limit = min(want, admin.MaxLimit)
		}
		r, err := conn.api.Redrive(ctx, req)
		if err != nil {
			return fmt.Errorf("redrive: %w", err)
		}
		all.Results = append(all.Results, r.Results...)
		all.More, all.Next = r.More, r.Next
		want -= len(r.Results)
		if !r.More || s.limit > 0 && want <= 0 || len(r.Results) == 0 {
			break
		}
		req.After = r.Next
	}
	if *asJSON {
		return printJSON(stdout, all)
	}
	printRedrive(stdout, all)
	return nil
}

func printRedrive(w io.Writer, r admin.RedriveReply) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tPIPELINE\tREASON\tKEY\tOUTCOME\tLEDGER\tDETAIL")
	counts := map[string]int{}
	var order []string
	for _, x := range r.Results {
		if counts[x.Outcome] == 0 {
			order = append(order, x.Outcome)
		}
		counts[x.Outcome]++
		key, led := x.Key, x.Ledger
		if key == "" {
			key = "-"
		}
		if led == "" {
			led = "-"
		}
		detail := x.Detail
		if x.Outcome == admin.OutcomeRedriven && x.Mark != nil && detail == "" {
			detail = fmt.Sprintf("republished as %s %d", x.Mark.Stream, x.Mark.Seq)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", x.Seq, x.Pipeline, x.Reason, key, x.Outcome, led, clip(detail, 100))
	}
	tw.Flush()
	fmt.Fprintf(w, "%d dead letters chosen", len(r.Results))
	for _, o := range order {
		fmt.Fprintf(w, "; %s: %d", o, counts[o])
	}
	fmt.Fprintln(w)
	if r.DryRun && counts[admin.OutcomeWouldRedrive] > 0 {
		fmt.Fprintln(w, "dry run: nothing was changed; run again with -yes to redrive")
	}
	if r.More {
		fmt.Fprintf(w, "more match: continue with -after %d\n", r.Next)
	}
}
