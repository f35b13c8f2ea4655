package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/dirlock"
	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/llmcache"
	llmbadger "github.com/oncegate/oncegate/pkg/llmcache/badgerstore"
)

const inspectUsage = `usage: consumer inspect [flags] <what>

what:
  key -pipeline NAME < payload.json   the trigger's intent key in that pipeline, and its ledger record
  record KEY                          the ledger record of an intent key (32 hex digits)
  pending                             work in progress, or whose holder stopped renewing its lease
  cache                               what the LLM cache holds: answers, their tokens, budgets spent

key, record and pending ask the running consumer's admin service, or, with none running, open
the ledger themselves; the answers are the same either way. The cache belongs to one process:
inspect it with the consumer stopped (a running consumer's figures are on its /metrics and its
console). A Badger ledger keeps the claims of replayable effects in the consumer's memory only,
so with the consumer stopped pending shows one-shot work only. Flags may follow the arguments.
`

func runInspect(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	pipeline := fs.String("pipeline", "", "pipeline `name`, for inspect key (default: the first)")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprint(stderr, inspectUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return flag.ErrHelp
	}
	what, rest := pos[0], pos[1:]
	cfg, err := c.load()
	if err != nil {
		return err
	}
	switch what {
	case "cache":
		return inspectCache(stdout, cfg)
	case "key", "pending":
		if len(rest) != 0 {
			return usageError{fmt.Errorf("inspect %s: unexpected argument %q", what, rest[0])}
		}
	case "record":
		if len(rest) != 1 {
			return usageError{errors.New("inspect record: want one key")}
		}
	default:
		fs.Usage()
		return usageError{fmt.Errorf("inspect: unknown %q", what)}
	}
	var req admin.RecordRequest
	switch what {
	case "key":
		// The key needs no ledger: derive it here, before anything opens.
		p, err := pickPipeline(cfg, *pipeline)
		if err != nil {
			return fmt.Errorf("inspect: %w", err)
		}
		keyer, err := dedupe.NewKeyer(consumer.KeySpec(p))
		if err != nil {
			return err
		}
		payload, err := io.ReadAll(io.LimitReader(stdin, 64<<20))
		if err != nil {
			return err
		}
		in, err := keyer.Intent(payload)
		if err != nil {
			return fmt.Errorf("inspect key: the payload cannot be keyed (it would be dead-lettered): %w", err)
		}
		req = admin.RecordRequest{Key: in.Key.String(), Pipeline: p.Name}
		if !*asJSON {
			fmt.Fprintf(stdout, "pipeline:    %s\nkey:         %s\nfingerprint: %s\n", p.Name, in.Key, in.Fingerprint)
		}
	case "record":
		k, err := dedupe.ParseKey(rest[0])
		if err != nil {
			return usageError{err}
		}
		req = admin.RecordRequest{Key: k.String(), Pipeline: *pipeline}
	}
	conn, err := openAdmin(ctx, cfg, "inspect")
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	defer conn.close()
	if what == "pending" {
		r, err := conn.api.Pending(ctx, admin.PendingRequest{})
		if err != nil {
			return fmt.Errorf("inspect pending: %w", err)
		}
		if *asJSON {
			return printJSON(stdout, r)
		}
		printPending(stdout, r, time.Now())
		return nil
	}
	r, err := conn.api.Record(ctx, req)
	if err != nil {
		return fmt.Errorf("inspect %s: %w", what, err)
	}
	if *asJSON {
		return printJSON(stdout, r)
	}
	if !r.Ledger {
		fmt.Fprintln(stdout, "ledger:      none (the pipeline is gate-window: its window alone decides)")
		return nil
	}
	printRecord(stdout, "ledger:", r.Record)
	for _, d := range r.Effects {
		fmt.Fprintf(stdout, "effect %s (one-shot), sent under %s:\n", effectName(d.Effect, d.Sink), d.Key)
		if d.Dispatch == nil {
			fmt.Fprintln(stdout, "dispatch:    not dispatched")
			continue
		}
		printRecord(stdout, "dispatch:", d.Dispatch)
	}
	printStory(stdout, r.Story)
	return nil
}

// printStory prints an intent's story, oldest first.
func printStory(w io.Writer, story []admin.Event) {
	if len(story) == 0 {
		return
	}
	fmt.Fprintln(w, "story:")
	for _, e := range story {
		line := "  " + e.At.Format(time.RFC3339) + "  " + e.What
		if e.Effect != "" {
			line += " (" + e.Effect + ")"
		}
		if e.By != "" {
			line += " by " + e.By
		}
		if e.Detail != "" {
			line += ": " + clip(e.Detail, 160)
		}
		fmt.Fprintln(w, line)
	}
}

func printPending(w io.Writer, r admin.PendingReply, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tOWNER\tTOKEN\tATTEMPTS\tLEASE\t")
	for _, rec := range r.Records {
		lease := "expired " + now.Sub(rec.LeaseUntil).Round(time.Millisecond).String() + " ago"
		if now.Before(rec.LeaseUntil) {
			lease = "live for " + rec.LeaseUntil.Sub(now).Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t\n", rec.Key, rec.Owner, rec.Token, rec.Attempts, lease)
	}
	tw.Flush()
	more := ""
	if r.More {
		more = " (and more)"
	}
	fmt.Fprintf(w, "%d pending%s\n", len(r.Records), more)
}

func pickPipeline(cfg *config.Config, name string) (*config.Pipeline, error) {
	var names []string
	for i := range cfg.Pipelines {
		if name == "" || cfg.Pipelines[i].Name == name {
			return &cfg.Pipelines[i], nil
		}
		names = append(names, cfg.Pipelines[i].Name)
	}
	return nil, fmt.Errorf("no pipeline %q in the configuration (it has %s)", name, strings.Join(names, ", "))
}

// printRecord prints a ledger record under label ("ledger:").
func printRecord(w io.Writer, label string, rec *admin.Record) {
	if rec == nil {
		fmt.Fprintf(w, "%-12s no record (new work, or forgotten after the retention)\n", label)
		return
	}
	fmt.Fprintf(w, "%-12s %s, token %d, %d attempt(s), owner %s\n", label, rec.State, rec.Token, rec.Attempts, rec.Owner)
	fmt.Fprintf(w, "created:     %s\nupdated:     %s\nexpires:     %s\n", rec.Created.Format(time.RFC3339Nano), rec.Updated.Format(time.RFC3339Nano), rec.Expires.Format(time.RFC3339))
	if !rec.LeaseUntil.IsZero() {
		fmt.Fprintf(w, "lease until: %s\n", rec.LeaseUntil.Format(time.RFC3339Nano))
	}
	if rec.Mismatches > 0 {
		fmt.Fprintf(w, "mismatches:  %d (taken over with a different payload)\n", rec.Mismatches)
	}
	if rec.Reason != "" {
		fmt.Fprintf(w, "reason:      %s\n", rec.Reason)
	}
	if !rec.Committed.IsZero() {
		fmt.Fprintf(w, "committed:   %s\n", rec.Committed.Format(time.RFC3339Nano))
		if rec.DownstreamID != "" {
			fmt.Fprintf(w, "downstream:  %s\n", rec.DownstreamID)
		}
		if rec.ModelRef != "" {
			fmt.Fprintf(w, "model ref:   %s (LLM cache key)\n", rec.ModelRef)
		}
		if len(rec.Response) > 0 {
			fmt.Fprintf(w, "response:    %d bytes: %.300s\n", len(rec.Response), rec.Response)
		}
	}
}

func inspectCache(w io.Writer, cfg *config.Config) error {
	dir := filepath.Join(cfg.DataDir, "llm-cache")
	if err := haveData(cfg.DataDir); err != nil {
		return err
	}
	key, err := app.EncryptionKey(cfg)
	if err != nil {
		return err
	}
	c, err := llmbadger.OpenEncrypted(dir, key, llmcache.Options{})
	if err != nil {
		if dirlock.Held(dir) {
			return fmt.Errorf("inspect: %s is held by a running consumer; stop it first, or read its /metrics (oncegate_llm_*)", dir)
		}
		return err
	}
	defer c.Close()
	s, err := llmhook.Summarize(c)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "LLM cache in %s\n", dir)
	fmt.Fprintf(w, "answers:        %d (%d streamed), %d bytes\n", s.Answers, s.Streams, s.AnswerBytes)
	fmt.Fprintf(w, "tokens in them: %d (what each hit on all of them would save)\n", s.AnswerTokens)
	fmt.Fprintf(w, "budgets:        %d intents, %d tokens spent\n", s.Budgets, s.BudgetSpent)
	return nil
}

// haveData refuses a store directory that does not exist, rather than
// create an empty one and report that it holds nothing: a mistyped -data
// must not look like a fresh ledger.
func haveData(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("inspect: no Oncegate data at %s (check -data or data_dir)", dir)
	}
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("inspect: %s is not a directory", dir)
	}
	return nil
}
