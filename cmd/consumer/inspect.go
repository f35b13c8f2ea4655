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

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/dirlock"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/ledger/jskvstore"
	"github.com/oncegate/oncegate/internal/natsrun"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/llmcache"
)

const inspectUsage = `usage: consumer inspect [flags] <what>

what:
  key -pipeline NAME < payload.json   the trigger's intent key in that pipeline, and its ledger record
  record KEY                          the ledger record of an intent key (32 hex digits)
  pending                             work in progress, or whose holder stopped renewing its lease
  cache                               what the LLM cache holds: answers, their tokens, budgets spent

A Badger ledger and the cache belong to one process: inspect them with the consumer stopped
(a running consumer's figures are on its /metrics). A Badger ledger keeps the claims of
replayable effects in the consumer's memory only, so pending shows one-shot work there. A KV
ledger (ledger.store: kv) can be inspected while consumers run.
`

func runInspect(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	pipeline := fs.String("pipeline", "", "pipeline `name`, for inspect key (default: the first)")
	fs.Usage = func() {
		fmt.Fprint(stderr, inspectUsage)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return flag.ErrHelp
	}
	what, rest := fs.Arg(0), fs.Args()[1:]
	// Flags may also follow the subcommand: inspect key -pipeline alerts.
	if err := parseFlags(fs, rest); err != nil {
		return err
	}
	rest = fs.Args()
	cfg, err := c.load()
	if err != nil {
		return err
	}
	switch what {
	case "cache":
		return inspectCache(stdout, cfg)
	case "key", "record", "pending":
	default:
		fs.Usage()
		return fmt.Errorf("inspect: unknown %q", what)
	}
	ledger, closeLedger, err := openLedger(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeLedger()
	switch what {
	case "key":
		p, err := pickPipeline(cfg, *pipeline)
		if err != nil {
			return err
		}
		keyer, err := dedupe.NewKeyer(p.KeySpec())
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
		fmt.Fprintf(stdout, "pipeline:    %s\nkey:         %s\nfingerprint: %s\n", p.Name, in.Key, in.Fingerprint)
		return printRecord(ctx, stdout, ledger, in.Key)
	case "record":
		if len(rest) != 1 {
			return errors.New("inspect record: want one key")
		}
		k, err := dedupe.ParseKey(rest[0])
		if err != nil {
			return err
		}
		return printRecord(ctx, stdout, ledger, k)
	default: // pending
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tOWNER\tTOKEN\tATTEMPTS\tLEASE\t")
		n := 0
		now := time.Now()
		for rec, err := range ledger.Pending(ctx) {
			if err != nil {
				return err
			}
			lease := "expired " + now.Sub(rec.LeaseUntil).Round(time.Millisecond).String() + " ago"
			if now.Before(rec.LeaseUntil) {
				lease = "live for " + rec.LeaseUntil.Sub(now).Round(time.Millisecond).String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t\n", rec.Key, rec.Owner, rec.Token, rec.Attempts, lease)
			n++
		}
		tw.Flush()
		fmt.Fprintf(stdout, "%d pending\n", n)
		return nil
	}
}

func pickPipeline(cfg *config.Config, name string) (*config.Pipeline, error) {
	var names []string
	for i := range cfg.Pipelines {
		if name == "" || cfg.Pipelines[i].Name == name {
			return &cfg.Pipelines[i], nil
		}
		names = append(names, cfg.Pipelines[i].Name)
	}
	return nil, fmt.Errorf("inspect: no pipeline %q (have %s)", name, strings.Join(names, ", "))
}

func openLedger(ctx context.Context, cfg *config.Config) (ledger.Ledger, func(), error) {
	if cfg.Ledger.Store == config.StoreKV {
		if cfg.NATS.URL == "" {
			return nil, nil, errors.New("inspect: a KV ledger is read through NATS: give -nats-url (or nats.url)")
		}
		nc, err := natsrun.Connect(ctx, cfg.NATS, cfg.NATS.URL, "oncegate-inspect", nil)
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		l, err := jskvstore.New(ctx, js, jskvstore.Options{Options: cfg.Ledger.Options(), Bucket: cfg.Ledger.KV.Bucket, Replicas: cfg.Ledger.KV.Replicas})
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return l, func() { l.Close(); nc.Close() }, nil
	}
	if err := haveData(cfg.BadgerDir()); err != nil {
		return nil, nil, err
	}
	db, err := badgerstore.Open(cfg.BadgerDir(), badgerstore.OpenOptions{EncryptionKeyFile: cfg.Encryption.KeyFile})
	if err != nil {
		if errors.Is(err, badgerstore.ErrLocked) {
			return nil, nil, fmt.Errorf("inspect: %s is held by a running consumer; stop it first, or read its /metrics", cfg.BadgerDir())
		}
		return nil, nil, err
	}
	l, err := badgerstore.New(db, badgerstore.Options{Options: cfg.Ledger.Options()})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return l, func() { l.Close(); db.Close() }, nil
}

func printRecord(ctx context.Context, w io.Writer, l ledger.Ledger, k dedupe.Key) error {
	rec, err := l.Get(ctx, k)
	if errors.Is(err, ledger.ErrNotFound) {
		fmt.Fprintln(w, "ledger:      no record (new work, or forgotten after the retention)")
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "ledger:      %s, token %d, %d attempt(s), owner %s\n", rec.State, rec.Token, rec.Attempts, rec.Owner)
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
	if r := rec.Result; !r.Committed.IsZero() {
		fmt.Fprintf(w, "committed:   %s\n", r.Committed.Format(time.RFC3339Nano))
		if r.DownstreamID != "" {
			fmt.Fprintf(w, "downstream:  %s\n", r.DownstreamID)
		}
		if r.ModelRef != "" {
			fmt.Fprintf(w, "model ref:   %s (LLM cache key)\n", r.ModelRef)
		}
		if len(r.Response) > 0 {
			fmt.Fprintf(w, "response:    %d bytes: %.300s\n", len(r.Response), r.Response)
		}
	}
	return nil
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
	c, err := llmcache.OpenEncrypted(dir, key, llmcache.Options{})
	if err != nil {
		if dirlock.Held(dir) {
			return fmt.Errorf("inspect: %s is held by a running consumer; stop it first, or read its /metrics (oncegate_llm_*)", dir)
		}
		return err
	}
	defer c.Close()
	s, err := c.Summary()
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
