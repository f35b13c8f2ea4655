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

const auditUsage = `usage: consumer audit [flags]

Lists the changes people made, newest first, as the audit stream keeps them: every dead letter a
redrive took (what came of it), every forget (done or refused), every approval and cancellation
of a one-shot effect, every bulk redrive started, taken over and finished; who made each (the
console's signed-in operator, or what a command's caller says of itself) and what came of it.
It asks the running consumer's admin service, or, with none running, reads the stream itself.
`

func runAudit(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	var req admin.AuditRequest
	fs.StringVar(&req.Key, "key", "", "only the changes to intent `key`")
	fs.StringVar(&req.Action, "action", "", "only the changes of `action` (redrive, forget, approve, cancel, job)")
	fs.StringVar(&req.By, "by", "", "only the changes by `who` (a part of the name)")
	fs.StringVar(&req.Job, "job", "", "only the changes of bulk redrive `job`")
	fs.IntVar(&req.Limit, "limit", admin.DefaultLimit, "list at most `n` (at most 500)")
	fs.Uint64Var(&req.Before, "before", 0, "only the changes before sequence `seq` (to continue a listing)")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprint(stderr, auditUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Errorf("audit: unexpected argument %q", pos[0])}
	}
	cfg, err := c.load()
	if err != nil {
		return err
	}
	conn, err := openAdmin(ctx, cfg, "audit")
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer conn.close()
	r, err := conn.api.Audit(ctx, req)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if *asJSON {
		return printJSON(stdout, r)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tACTION\tBY\tKEY\tWHAT\tOUTCOME\tDETAIL")
	for _, e := range r.Entries {
		what := e.Pipeline
		if e.Effect != "" {
			what += "/" + e.Effect
		}
		if l := e.Letter; l != nil {
			what += fmt.Sprintf(" dead letter %d", l.Seq)
		}
		if e.Job != "" {
			what += " job " + e.Job
		}
		if e.Statement != "" {
			what += " (stated " + e.Statement + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.At.Format(time.RFC3339), e.Action, e.By, cmpOr(e.Key, "-"), cmpOr(what, "-"), e.Outcome, clip(cmpOr(e.Ledger, e.Detail), 80))
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d changes\n", len(r.Entries))
	if r.More {
		fmt.Fprintf(stdout, "older ones match: continue with -before %d\n", r.Next)
	}
	return nil
}
