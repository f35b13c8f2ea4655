package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/oncegate/oncegate/internal/admin"
)

// bulkRun is the command line's side of a bulk redrive: it previews,
// starts, follows and shows the jobs the admin operations run.
type bulkRun struct {
	conn           *adminConn
	stdout, stderr io.Writer
	json           bool
}

// followEvery is how often a followed job is looked at.
const followEvery = 500 * time.Millisecond

// callTimeout bounds a request of a bulk redrive's command but its
// preview's, which previewTimeout bounds; again makes a request that did
// not pass in time again, for at most againFor.
const (
	callTimeout    = 10 * time.Second
	previewTimeout = 45 * time.Second
	againFor       = time.Minute
)

// again makes the request op until it passes, is refused (a bad request,
// nothing found, refused), or againFor has passed; each try has timeout.
func (b *bulkRun) again(ctx context.Context, timeout time.Duration, op func(context.Context) error) error {
	deadline := time.Now().Add(againFor)
	for {
		octx, cancel := context.WithTimeout(ctx, timeout)
		err := op(octx)
		cancel()
		var ae *admin.Error
		if err == nil || errors.As(err, &ae) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		fmt.Fprintf(b.stderr, "redrive: %v; trying again\n", err)
		select {
		case <-time.After(followEvery):
		case <-ctx.Done():
			return err
		}
	}
}

func (b *bulkRun) preview(ctx context.Context, req admin.PreviewRequest) error {
	rep, err := b.conn.api.Preview(ctx, req)
	if err != nil {
		return fmt.Errorf("redrive -preview: %w", err)
	}
	if b.json {
		return printJSON(b.stdout, rep)
	}
	w := b.stdout
	j := rep.Job
	fmt.Fprintf(w, "bulk redrive %s (previewed, not started): %s, the letters up to %s %d\n", j.ID, j.Selection.Filter(), j.Selection.Stream, j.Selection.UpTo)
	printTotals(w, j.Preview, "would")
	if len(rep.Rows) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tPIPELINE\tEFFECT\tWILL\tMODEL\tKEY\tWHY")
		for _, r := range rep.Rows {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Seq, r.Pipeline, effectName(r.Effect, r.Sink), r.Outcome, modelText(r), r.Key, clip(cmpOr(r.Detail, r.Ledger), 90))
		}
		tw.Flush()
		if n := len(rep.Rows); n < j.Preview.Letters {
			fmt.Fprintf(w, "(the first %d of %d letters; -limit shows more)\n", n, j.Preview.Letters)
		}
	}
	fmt.Fprintf(w, "nothing was changed; start it with: consumer redrive -resume %s   (or run the same command with -yes)\n", j.ID)
	return nil
}

func modelText(r admin.RedriveResult) string {
	switch r.Model {
	case admin.ModelCached:
		return "cached"
	case admin.ModelPaid:
		return fmt.Sprintf("~%d tok $%.4f", r.Tokens, r.Cost)
	case admin.ModelUnknown:
		return "unknown"
	}
	return "-"
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// printTotals prints a preview's or a job's totals; verb is "would" for a
// preview.
func printTotals(w io.Writer, t admin.Totals, verb string) {
	fmt.Fprintf(w, "%d letters", t.Letters)
	for _, o := range slices.Sorted(maps.Keys(t.ByOutcome)) {
		fmt.Fprintf(w, "; %s: %d", o, t.ByOutcome[o])
	}
	fmt.Fprintln(w)
	if len(t.Fire) > 0 {
		var fires []string
		for _, e := range slices.Sorted(maps.Keys(t.Fire)) {
			fires = append(fires, fmt.Sprintf("%s %d", e, t.Fire[e]))
		}
		what := "fires"
		if verb == "would" {
			what = "would fire"
		}
		fmt.Fprintf(w, "effects it %s: %s\n", what, strings.Join(fires, ", "))
	}
	if t.CacheHits+t.CacheMisses+t.CacheUnknown > 0 {
		fmt.Fprintf(w, "model: %d answered from the cache (no cost)", t.CacheHits)
		if t.CacheMisses > 0 {
			fmt.Fprintf(w, ", %d calls: about %d tokens, $%.4f", t.CacheMisses, t.Tokens, t.Cost)
		}
		if t.CacheUnknown > 0 {
			fmt.Fprintf(w, ", %d unknown (the cache is not reachable from here)", t.CacheUnknown)
		}
		fmt.Fprintln(w)
	}
}

// start previews and starts a bulk redrive, and follows it unless detach.
func (b *bulkRun) start(ctx context.Context, req admin.PreviewRequest, detach bool) error {
	req.Limit = 1
	// A request a replica does not answer (it was killed, or paused, as it
	// worked) is made again: to another replica, most likely. A preview
	// made twice leaves a second job previewed, never started.
	var rep admin.PreviewReply
	err := b.again(ctx, previewTimeout, func(ctx context.Context) (err error) {
		rep, err = b.conn.api.Preview(ctx, req)
		return err
	})
	if err != nil {
		return fmt.Errorf("redrive: %w", err)
	}
	var j admin.Job
	err = b.again(ctx, callTimeout, func(ctx context.Context) (err error) {
		j, err = b.conn.api.StartJob(ctx, admin.JobRequest{ID: rep.Job.ID, By: b.conn.by})
		return err
	})
	if err != nil {
		return fmt.Errorf("redrive: starting %s: %w", rep.Job.ID, err)
	}
	fmt.Fprintf(b.stderr, "bulk redrive %s started: %d letters (%s)\n", j.ID, j.Preview.Letters, j.Selection.Filter())
	if detach {
		if !b.conn.remote {
			return fmt.Errorf("redrive -detach: no consumer runs to carry it on; run it without -detach")
		}
		if b.json {
			return printJSON(b.stdout, j)
		}
		fmt.Fprintf(b.stdout, "%s\n", j.ID)
		return nil
	}
	return b.follow(ctx, j.ID, false)
}

// follow follows job id until it is done, taking it over (resume) if its
// runner stops: at once with resume, else once its lease runs out.
func (b *bulkRun) follow(ctx context.Context, id string, resume bool) error {
	var last string
	for {
		jctx, cancel := context.WithTimeout(ctx, callTimeout)
		j, err := b.conn.api.Job(jctx, admin.JobRequest{ID: id})
		cancel()
		if err != nil {
			if errors.Is(err, admin.ErrNotFound) || errors.Is(err, admin.ErrBadRequest) || ctx.Err() != nil {
				return fmt.Errorf("redrive: %w", err)
			}
			fmt.Fprintf(b.stderr, "bulk redrive %s: %v; trying again\n", id, err)
		} else {
			if p := progressLine(j); p != last {
				fmt.Fprintln(b.stderr, p)
				last = p
			}
			switch {
			case j.State == admin.JobDone:
				return b.done(j)
			case resume || j.Abandoned(time.Now()):
				resume = false
				sctx, cancel := context.WithTimeout(ctx, callTimeout)
				_, err := b.conn.api.StartJob(sctx, admin.JobRequest{ID: id, By: b.conn.by})
				cancel()
				if err != nil {
					fmt.Fprintf(b.stderr, "bulk redrive %s: taking it over: %v\n", id, err)
				}
			}
		}
		select {
		case <-time.After(followEvery):
		case <-ctx.Done():
			return fmt.Errorf("redrive: stopped following %s (it goes on where it runs; consumer redrive -job %s shows it): %w", id, id, ctx.Err())
		}
	}
}

func progressLine(j admin.Job) string {
	s := fmt.Sprintf("bulk redrive %s: %s, %d of %d letters", j.ID, j.State, j.Progress.Letters, j.Preview.Letters)
	for _, o := range slices.Sorted(maps.Keys(j.Progress.ByOutcome)) {
		s += fmt.Sprintf(", %s %d", o, j.Progress.ByOutcome[o])
	}
	return s
}

func (b *bulkRun) done(j admin.Job) error {
	if b.json {
		return printJSON(b.stdout, j)
	}
	w := b.stdout
	took := j.Finished.Sub(j.Started).Round(time.Millisecond)
	fmt.Fprintf(w, "bulk redrive %s done in %v (%s)", j.ID, took, j.Selection.Filter())
	if j.Resumed > 0 {
		fmt.Fprintf(w, ", taken over %d time(s) after its process stopped", j.Resumed)
	}
	fmt.Fprintln(w)
	printTotals(w, j.Progress, "")
	fmt.Fprintf(w, "every letter's redrive is in the audit: consumer audit -job %s\n", j.ID)
	return nil
}

func (b *bulkRun) show(ctx context.Context, id string) error {
	j, err := b.conn.api.Job(ctx, admin.JobRequest{ID: id})
	if err != nil {
		return fmt.Errorf("redrive -job: %w", err)
	}
	if b.json {
		return printJSON(b.stdout, j)
	}
	fmt.Fprintln(b.stdout, progressLine(j))
	fmt.Fprintf(b.stdout, "filter: %s, the letters up to %s %d; previewed %s by %s\n", j.Selection.Filter(), j.Selection.Stream, j.Selection.UpTo, j.Created.Format(time.RFC3339), j.By)
	fmt.Fprint(b.stdout, "preview: ")
	printTotals(b.stdout, j.Preview, "would")
	if j.State != admin.JobPreviewed {
		fmt.Fprint(b.stdout, "so far: ")
		printTotals(b.stdout, j.Progress, "")
	}
	if j.Abandoned(time.Now()) {
		fmt.Fprintf(b.stdout, "its runner (%s) stopped: consumer redrive -resume %s takes it over\n", j.Owner, j.ID)
	}
	return nil
}

func (b *bulkRun) list(ctx context.Context) error {
	r, err := b.conn.api.Jobs(ctx, admin.JobsRequest{Limit: 50})
	if err != nil {
		return fmt.Errorf("redrive -jobs: %w", err)
	}
	if b.json {
		return printJSON(b.stdout, r)
	}
	tw := tabwriter.NewWriter(b.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tCREATED\tBY\tSTATE\tLETTERS\tDONE\tFILTER")
	for _, j := range r.Jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", j.ID, j.Created.Format(time.RFC3339), j.By, j.State, j.Preview.Letters, j.Progress.Letters, j.Selection.Filter())
	}
	return tw.Flush()
}
