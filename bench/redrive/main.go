// Command redrive measures a bulk redrive at incident scale: -letters
// dead letters (100,000) of one pipeline, whose HTTP receiver refused
// every effect (400) and is then fixed, a tenth of their intents done
// meanwhile by a duplicate; the preview of a redrive of all of them and
// the redrive itself, with the console answering pages while it runs.
//
// Everything runs in this process, as it does in a consumer: the app
// (embedded NATS on loopback, the Badger ledger, the admin operations, the
// console), the receiver (which counts its effects by Idempotency-Key),
// and a prober that loads a console page (the dead letters, newest first,
// the job's page, a filtered list) every -page-every while the redrive
// runs, as a few people watching it would.
//
//  1. The letters: -letters orders published, each refused and
//     dead-lettered by the consumer (permanent_effect).
//  2. The receiver fixed; a tenth of the intents done meanwhile by a
//     duplicate (their failed record expired: cleared, and the duplicate
//     committed, one effect each).
//  3. The preview of a redrive of every dead letter of the pipeline
//     (target ≤ 30s): it must say 90% fire the http effect, and 10% are
//     skipped, committed meanwhile.
//  4. The redrive (target ≤ 5 minutes), with the console's pages timed
//     meanwhile (target: p99 ≤ 300ms).
//  5. The receiver's effects: exactly one per intent, none for the
//     tenth beyond their duplicate's.
//
// It prints the figures against their targets and exits 1 if an intent
// did not end with exactly one effect, or the preview or the redrive said
// otherwise than what happened; missing a time target is reported, and
// fails the run only with -strict (the machine is shared).
//
//	go run -C bench ./redrive                  # 100,000 letters (a few minutes)
//	go run -C bench ./redrive -letters 2000    # the short form CI runs
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "redrive:", err)
		os.Exit(1)
	}
}

type options struct {
	letters   int
	committed float64
	strict    bool
	keep      bool
	pageEvery time.Duration
	profile   string
}

// Targets.
const (
	previewTarget = 30 * time.Second
	redriveTarget = 5 * time.Minute
	pageTarget    = 300 * time.Millisecond
)

const benchConfig = `
data_dir: %s
metrics: {listen: ""}
nats: {embedded: {listen: "127.0.0.1:0"}}
ledger: {lease: 10s}
console: {listen: "127.0.0.1:0", token_file: %s}
pipelines:
  - name: orders
    subject: triggers.orders
    key: {fields: [/order]}
    effect: {sink: http, url: "%s"}
    ack_wait: 10s
    max_deliver: 3
    max_ack_pending: 4096
    concurrency: 256
`

func run(args []string) error {
	var o options
	fs := flag.NewFlagSet("redrive", flag.ContinueOnError)
	fs.IntVar(&o.letters, "letters", 100_000, "dead letters to make and redrive")
	fs.Float64Var(&o.committed, "committed", 0.1, "share of the intents done meanwhile by a duplicate")
	fs.BoolVar(&o.strict, "strict", false, "fail the run when a time target is missed")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory")
	fs.DurationVar(&o.pageEvery, "page-every", 250*time.Millisecond, "how often the prober loads a console page while the redrive runs (a few people watching it)")
	fs.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of the redrive to `file`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.letters < 10 || o.committed < 0 || o.committed >= 1 {
		return errors.New("-letters must be at least 10, -committed in [0, 1)")
	}
	dir, err := os.MkdirTemp("", "oncegate-redrive-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	} else {
		fmt.Println("redrive: keeping", dir)
	}
	recv := &receiver{effects: map[string]int{}}
	hs := httptest.NewServer(recv)
	defer hs.Close()
	tokens := filepath.Join(dir, "console-tokens")
	if err := os.WriteFile(tokens, []byte("bench bench-console-token-0123456789\n"), 0o600); err != nil {
		return err
	}
	cfg, err := config.Parse(fmt.Appendf(nil, benchConfig, filepath.Join(dir, "data"), tokens, hs.URL), "bench")
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	a, err := app.Start(ctx, cfg, app.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer a.Close()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { stop(); <-done }()
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	err = a.WaitReady(wctx)
	wcancel()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(a.Embedded.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	keyer, err := dedupe.NewKeyer(consumer.KeySpec(&cfg.Pipelines[0]))
	if err != nil {
		return err
	}

	// 1. The dead letters.
	fmt.Printf("redrive: %d orders, their receiver refusing them (400)…\n", o.letters)
	t0 := time.Now()
	keys := make([]string, o.letters)
	for i := range o.letters {
		payload := fmt.Appendf(nil, `{"order":"R-%07d","amount":%d,"customer_ref":"c-%d"}`, i, 100+i%900, i%5000)
		in, err := keyer.Intent(payload)
		if err != nil {
			return err
		}
		keys[i] = in.Key.String()
		if _, err := js.PublishAsync("triggers.orders", payload); err != nil {
			return err
		}
		if i%1024 == 1023 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	if err := waitFor(ctx, 20*time.Minute, func() bool { return deadLetters(ctx, js) >= uint64(o.letters) }); err != nil {
		return fmt.Errorf("the dead letters: %d of %d after %v", deadLetters(ctx, js), o.letters, time.Since(t0).Round(time.Second))
	}
	if err := waitFor(ctx, 5*time.Minute, func() bool { n, err := a.Outstanding(ctx); return err == nil && n == 0 }); err != nil {
		return errors.New("the orders did not settle")
	}
	made := time.Since(t0)
	fmt.Printf("redrive: %d dead letters in %v\n", o.letters, made.Round(time.Millisecond))

	// 2. Fixed; a share done meanwhile by a duplicate.
	recv.fix()
	meanwhile := int(float64(o.letters) * o.committed)
	for i := range meanwhile {
		k, _ := dedupe.ParseKey(keys[i*o.letters/max(meanwhile, 1)])
		rec, err := a.Ledger.Get(ctx, k)
		if err != nil {
			return err
		}
		if err := a.Ledger.Clear(ctx, k, rec.Token, "the failure's record expired"); err != nil {
			return err
		}
	}
	for i := range meanwhile {
		idx := i * o.letters / max(meanwhile, 1)
		payload := fmt.Appendf(nil, `{"order":"R-%07d","amount":%d,"customer_ref":"c-%d","note":"a duplicate"}`, idx, 100+idx%900, idx%5000)
		if _, err := js.PublishAsync("triggers.orders", payload); err != nil {
			return err
		}
		if i%1024 == 1023 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	if err := waitFor(ctx, 10*time.Minute, func() bool { n, err := a.Outstanding(ctx); return err == nil && n == 0 && recv.total() == meanwhile }); err != nil {
		return fmt.Errorf("the duplicates: %d effects of %d", recv.total(), meanwhile)
	}

	// 3. The preview.
	by := admin.Caller{Name: "bench", User: "redrive"}
	sel := admin.Selection{Pipeline: "orders", Reason: "permanent_effect", Unhandled: true, Limit: 20}
	t1 := time.Now()
	p, err := a.Admin.Preview(ctx, admin.PreviewRequest{Selection: sel, By: by})
	if err != nil {
		return fmt.Errorf("the preview: %w", err)
	}
	previewTook := time.Since(t1)
	pv := p.Job.Preview
	wantFire, wantSkip := o.letters-meanwhile, meanwhile
	var failures []string
	if pv.Letters != o.letters || pv.ByOutcome[admin.OutcomeWouldRedrive] != wantFire || pv.ByOutcome[admin.OutcomeCommitted] != wantSkip {
		failures = append(failures, fmt.Sprintf("the preview says %s; want %d letters, %d would redrive, %d committed", pv.String(), o.letters, wantFire, wantSkip))
	}

	// 4. The redrive, the console's pages timed meanwhile.
	probe := &prober{base: "http://" + a.ConsoleAddr, job: p.Job.ID, every: o.pageEvery}
	if o.profile != "" {
		f, err := os.Create(o.profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	pctx, pstop := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	pwg.Go(func() { probe.run(pctx) })
	t2 := time.Now()
	if _, err := a.Admin.StartJob(ctx, admin.JobRequest{ID: p.Job.ID, By: by}); err != nil {
		pstop()
		pwg.Wait()
		return fmt.Errorf("starting the redrive: %w", err)
	}
	var j admin.Job
	err = waitFor(ctx, 30*time.Minute, func() bool {
		var err error
		j, err = a.Admin.Job(ctx, admin.JobRequest{ID: p.Job.ID})
		return err == nil && (j.State == admin.JobDone || j.State == admin.JobFailed)
	})
	redriveTook := time.Since(t2)
	pstop()
	pwg.Wait()
	if err != nil || j.State != admin.JobDone {
		return fmt.Errorf("the redrive: %s %s after %v", j.State, j.Error, redriveTook.Round(time.Second))
	}
	if pr := j.Progress; pr.ByOutcome[admin.OutcomeRedriven] != wantFire || pr.ByOutcome[admin.OutcomeCommitted] != wantSkip {
		failures = append(failures, fmt.Sprintf("the redrive did %s; want %d redriven, %d committed", pr.String(), wantFire, wantSkip))
	}
	// 5. The effects.
	if err := waitFor(ctx, 10*time.Minute, func() bool { n, err := a.Outstanding(ctx); return err == nil && n == 0 && recv.total() >= o.letters }); err != nil {
		failures = append(failures, fmt.Sprintf("%d effects after the redrive; want %d", recv.total(), o.letters))
	}
	settled := time.Since(t2)
	none, twice := recv.check(keys)
	if none > 0 || twice > 0 {
		failures = append(failures, fmt.Sprintf("%d intents with no effect, %d with more than one; want one each", none, twice))
	}

	lat := probe.latencies()
	p99 := percentile(lat, 0.99)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\nbulk redrive of %d dead letters (%d fire, %d committed meanwhile), one pipeline, on this machine\n", o.letters, wantFire, wantSkip)
	fmt.Fprintln(tw, "what\tmeasured\ttarget\t")
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Fprintf(tw, "preview (every letter: ledger, marks, cost)\t%v\t≤ %v %s\t\n", previewTook.Round(time.Millisecond), previewTarget, mark(previewTook <= previewTarget))
	fmt.Fprintf(tw, "redrive (every letter taken, marked, audited)\t%v (%.0f letters/s)\t≤ %v %s\t\n", redriveTook.Round(time.Millisecond), float64(o.letters)/redriveTook.Seconds(), redriveTarget, mark(redriveTook <= redriveTarget))
	fmt.Fprintf(tw, "…and every redriven trigger's effect done\t%v\t\t\n", settled.Round(time.Millisecond))
	fmt.Fprintf(tw, "console page while it ran (%d loads: dead letters, the job)\tp50 %v, p99 %v, max %v\t≤ %v p99 %s\t\n", len(lat),
		percentile(lat, 0.5).Round(time.Millisecond), p99.Round(time.Millisecond), percentile(lat, 1).Round(time.Millisecond), pageTarget, mark(len(lat) > 0 && p99 <= pageTarget))
	fmt.Fprintf(tw, "effects\t%d intents, each exactly once\t\t\n", o.letters-none-twice)
	tw.Flush()
	if len(failures) > 0 {
		return errors.New(strings.Join(failures, "; "))
	}
	if o.strict && (previewTook > previewTarget || redriveTook > redriveTarget || p99 > pageTarget) {
		return errors.New("a time target was missed (-strict)")
	}
	return nil
}

func deadLetters(ctx context.Context, js jetstream.JetStream) uint64 {
	st, err := js.Stream(ctx, "ONCEGATE_DEAD")
	if err != nil {
		return 0
	}
	return st.CachedInfo().State.Msgs
}

func waitFor(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// receiver refuses every effect (400) until fixed, then takes them,
// counting them by Idempotency-Key (a repeat of a key is a replay).
type receiver struct {
	mu      sync.Mutex
	fixed   bool
	effects map[string]int
	n       int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.fixed {
		http.Error(w, "unknown field customer_ref", http.StatusBadRequest)
		return
	}
	k := req.Header.Get("Idempotency-Key")
	if r.effects[k] == 0 {
		r.n++
	} else {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	r.effects[k]++
	fmt.Fprint(w, `{"ok":true}`)
}

func (r *receiver) fix() { r.mu.Lock(); r.fixed = true; r.mu.Unlock() }

// total is how many keys got their effect.
func (r *receiver) total() int { r.mu.Lock(); defer r.mu.Unlock(); return r.n }

// check counts the keys with no effect, and those whose effect the
// receiver took more than once without it being a replay (never: a key's
// later calls are replays, each of one effect).
func (r *receiver) check(keys []string) (none, twice int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if r.effects[k] == 0 {
			none++
		}
	}
	if r.n > len(keys) {
		twice = r.n - len(keys)
	}
	return none, twice
}

// prober loads console pages one after the other, and times them.
type prober struct {
	base, job string
	every     time.Duration
	mu        sync.Mutex
	took      []time.Duration
	errs      atomic.Int64
}

func (p *prober) run(ctx context.Context) {
	pages := []string{"/dead", "/redrive/" + p.job, "/dead?reason=permanent_effect&text=R-00"}
	tick := time.NewTicker(p.every)
	defer tick.Stop()
	for i := 0; ctx.Err() == nil; i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.base+pages[i%len(pages)], nil)
		t := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				p.errs.Add(1)
			}
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took := time.Since(t)
		if resp.StatusCode != http.StatusOK {
			p.errs.Add(1)
			continue
		}
		p.mu.Lock()
		p.took = append(p.took, took)
		p.mu.Unlock()
	}
}

func (p *prober) latencies() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := slices.Clone(p.took)
	slices.Sort(out)
	return out
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[min(i, len(sorted)-1)]
}
