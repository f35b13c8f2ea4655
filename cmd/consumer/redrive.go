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
       consumer redrive -filter LINE -preview [-json]     what a bulk redrive would do, per letter and in all
       consumer redrive -filter LINE -yes [-rate N]       a bulk redrive, followed until it is done
       consumer redrive -resume JOB | -job JOB | -jobs

Redrives dead letters: each chosen (by sequence or range in the dead-letter stream, and the
flags) is republished to its trigger's subject with its payload and headers, after the intent's
failed record is cleared, fenced: a committed intent is not redone and work in progress is left
alone. A dry run unless -yes. A dead letter redriven once is not redriven again without -again.
A dead letter of reason unknown_outcome (a one-shot effect that may have gone out) is refused
unless -unknown-outcome=not-sent states that you checked and it did not. Each redrive is logged by
the consumer with who asked, recorded in the audit (consumer audit), and marked on the dead letter.

A bulk redrive (-filter, -preview, -detach, -resume) takes every dead letter chosen, up to the
last one kept when it was previewed: -preview shows, per letter, the effect it will fire or why
it will not (committed meanwhile, in progress, refused without the statement, redriven already)
and, in all, what the model will spend (an answer in the LLM cache costs nothing), and saves it
as a job; -yes runs it in the consumer that answers (or here, with none running), chunk by chunk,
recording how far it got, and follows it until it is done. If the process running it dies, the
job is taken over where it got to (-resume JOB, or any consumer, once its lease runs out), and no
intent's effect happens twice. Flags may follow the arguments.
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
	preview := fs.Bool("preview", false, "a bulk redrive's preview: what it would do with each dead letter (-limit of them shown, default 50) and in all, saved as a job to start")
	detach := fs.Bool("detach", false, "with -yes: start the bulk redrive and return, printing its job")
	rate := fs.Float64("rate", 0, "a bulk redrive takes at most `n` dead letters a second (0: no limit)")
	resume := fs.String("resume", "", "take over the bulk redrive `job` whose process stopped, and follow it")
	showJob := fs.String("job", "", "show the bulk redrive `job`")
	jobs := fs.Bool("jobs", false, "list the latest bulk redrives")
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
	if *rate < 0 {
		return usageError{fmt.Errorf("-rate %v: want a number of letters a second, or 0", *rate)}
	}
	bulk := s.filter != "" || *preview || *detach || *resume != "" || *showJob != "" || *jobs
	if *detach && !*yes {
		return usageError{fmt.Errorf("-detach starts a bulk redrive: give -yes")}
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
	if bulk {
		b := bulkRun{conn: conn, stdout: stdout, stderr: stderr, json: *asJSON}
		switch {
		case *jobs:
			return b.list(ctx)
		case *showJob != "":
			return b.show(ctx, *showJob)
		case *resume != "":
			return b.follow(ctx, *resume, true)
		}
		rows := s.limit
		if rows == 0 {
			rows = 50
		}
		req := admin.PreviewRequest{Selection: sel, Again: *again, UnknownOutcome: *unknown, Rate: *rate, By: conn.by}
		req.Limit = min(rows, admin.MaxLimit)
		if !*yes {
			return b.preview(ctx, req)
		}
		return b.start(ctx, req, *detach)
	}
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
