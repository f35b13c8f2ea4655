// Command writes counts, per trigger, what each kind of Oncegate pipeline
// costs the NATS server and the stores: the requests its clients send, and
// the writes that are stored (issue 39, item 2). It counts at the server
// and in the stores, not in Oncegate's code:
//
//   - a tap: a connection of its own, subscribed to ">" on the embedded
//     server, sees every message Oncegate's connections publish (JetStream
//     API requests, KV puts and deletes, acks, effect and outbox
//     publishes) and sorts them by subject; KV writes are named by their
//     key and value (a ledger record's state, a cache key's "f."/"a."
//     prefix), which is how each write is attributed to its component;
//   - the streams: every stream's last sequence before and after the run,
//     so a write is counted once it is stored, whichever client wrote it
//     (a KV write the server refuses — a create that lost a race — is in
//     the tap's count and not in the stream's);
//   - Badger: after the run, the data directory is opened again and every
//     version of every key still in the LSM tree is read (a run this short
//     is never compacted, so each write is there), grouped by prefix, each
//     ledger version named by its record's state. A Badger transaction
//     that writes several keys (a batch of commits) counts once per key and
//     once in "txns".
//
// Cells: gate-window, gate-ledger (no model), full (the model step, on the
// stand-in model through the LLM cache) and one-shot (a gate-ledger
// pipeline whose effect is a one-shot HTTP call through the outbox, to a
// receiver in this process), each on the JetStream KV ledger and cache and
// on Badger. Each cell is a fresh app.Start from a YAML configuration
// joined to one embedded server, with -n unique triggers published first;
// the count runs from the consumer's Run until the server reports every
// trigger acked and the tap has been quiet for -quiet (a one-shot send and
// its commit may follow the trigger's ack).
//
// Printed per cell and per trigger: requests (client messages that are not
// replies or deliveries), of which JetStream API requests, acks, and KV
// writes sent; stored writes per stream; the KV writes by component; and
// the targets on KV (ledger and cache writes per trigger: ≤ 3 with
// a model step, ≤ 2 without) with met or missed.
//
//	go run -C bench ./writes              # 1,000 triggers per cell
//	go run -C bench ./writes -short       # 50 per cell, a few seconds (the test)
//	go run -C bench ./writes -only full -stores kv -v
//
// Everything lives in a temporary directory removed at exit.
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
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgerproto"
	"github.com/oncegate/oncegate/internal/natsrun"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Pipeline kinds, as -only names them.
const (
	kindWindow  = "gate-window"
	kindLedger  = "gate-ledger"
	kindFull    = "full"
	kindOneShot = "one-shot"
)

var allKinds = []string{kindWindow, kindLedger, kindFull, kindOneShot}

// Issue 39's targets on KV: ledger and cache writes per trigger.
const (
	targetModel   = 3.0
	targetNoModel = 2.0
)

func main() {
	if err := run(os.Stdout, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "writes:", err)
		os.Exit(1)
	}
}

type options struct {
	n       int
	kinds   []string
	stores  []string
	quiet   time.Duration
	verbose bool
	log     *slog.Logger
}

func run(out io.Writer, args []string) error {
	fs := flag.NewFlagSet("writes", flag.ContinueOnError)
	var (
		n       = fs.Int("n", 1000, "unique triggers per cell")
		short   = fs.Bool("short", false, "the short form: 50 triggers per cell")
		only    = fs.String("only", strings.Join(allKinds, ","), "pipeline kinds: "+strings.Join(allKinds, ", "))
		stores  = fs.String("stores", "kv,badger", "stores: kv, badger")
		quiet   = fs.Duration("quiet", 500*time.Millisecond, "how long the tap must see nothing after the last ack before the count stops")
		verbose = fs.Bool("v", false, "print every subject class and the consumer's warnings")
		base    = fs.String("baseline", "", "a git revision of this repository (main, 738eae5) whose writes program runs first, with the same flags, its table printed above this one's: the same figures of the design before, in one run")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *base != "" {
		var rest []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name != "baseline" {
				rest = append(rest, "-"+f.Name+"="+f.Value.String())
			}
		})
		if err := baseline(out, *base, rest); err != nil {
			return fmt.Errorf("-baseline %s: %w", *base, err)
		}
		fmt.Fprintf(out, "\n== this tree ==\n")
	}
	o := options{n: *n, quiet: *quiet, verbose: *verbose}
	if *short {
		o.n = 50
		o.quiet = 300 * time.Millisecond
	}
	if o.n <= 0 {
		return errors.New("-n must be positive")
	}
	for _, k := range split(*only) {
		if !contains(allKinds, k) {
			return fmt.Errorf("-only: unknown kind %q", k)
		}
		o.kinds = append(o.kinds, k)
	}
	for _, s := range split(*stores) {
		if s != config.StoreKV && s != config.StoreBadger {
			return fmt.Errorf("-stores: unknown store %q", s)
		}
		o.stores = append(o.stores, s)
	}
	level := slog.LevelError + 1
	if o.verbose {
		level = slog.LevelWarn
	}
	o.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tmp, err := os.MkdirTemp("", "oncegate-bench-writes-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	srv, err := natsrun.StartEmbedded(tmp, natsrun.Options{Listen: "127.0.0.1:0", StoreDir: filepath.Join(tmp, "nats"), Logger: o.log.With("component", "nats-server")})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("bench-writes-producer"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	tc, err := nats.Connect(srv.ClientURL(), nats.Name("bench-writes-tap"))
	if err != nil {
		return err
	}
	defer tc.Close()

	var (
		hits    atomic.Int64
		receive = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			hits.Add(1)
		}))
	)
	defer receive.Close()

	b := &bench{o: o, tmp: tmp, url: srv.ClientURL(), nc: nc, js: js, tap: tc, receiver: receive.URL, hits: &hits}
	var results []*cell
	for _, store := range o.stores {
		for _, kind := range o.kinds {
			c, err := b.cell(ctx, kind, store)
			if err != nil {
				return fmt.Errorf("%s on %s: %w", kind, store, err)
			}
			fmt.Fprintf(os.Stderr, "writes: %s on %s: %d triggers in %v\n", kind, store, c.n, c.took.Round(time.Millisecond))
			results = append(results, c)
		}
	}
	report(out, o, results)
	return nil
}

type bench struct {
	o        options
	tmp      string
	url      string
	nc       *nats.Conn
	js       jetstream.JetStream
	tap      *nats.Conn
	receiver string
	hits     *atomic.Int64
	seq      int
}

// cell is one kind on one store: what was counted.
type cell struct {
	kind, store string
	n           int
	took        time.Duration
	tap         *tally            // the tap's counts by class
	stored      map[string]uint64 // stored writes by stream (the trigger stream left out)
	badger      map[string]int    // Badger versions by component, and "txns"
	effects     int64             // effects that reached their target
	notes       []string
	buckets     buckets
}

// buckets names a cell's KV buckets.
type buckets struct{ ledger, cache string }

func (b *bench) config(prefix, dir, kind, store string) (*config.Config, buckets) {
	bk := buckets{ledger: "wl-" + prefix, cache: "wc-" + prefix}
	mode := config.ModeGateLedger
	switch kind {
	case kindWindow:
		mode = config.ModeGateWindow
	case kindFull:
		mode = config.ModeFull
	}
	var step, effect string
	if kind == kindFull {
		step = `
    step:
      name: triage
      system: You are an experienced site reliability engineer. Be brief and concrete.
      prompt: |
        Triage this alert: {{get . "alert" "labels" "alertname"}} on {{get . "alert" "labels" "instance"}}, occurrence {{get . "alert" "occurrence"}}.`
	}
	if kind == kindOneShot {
		effect = fmt.Sprintf(`
    effect:
      sink: http
      url: %s
      class: one-shot`, b.receiver)
	} else {
		effect = fmt.Sprintf(`
    effect:
      sink: jetstream
      subject: %s.effects.bench`, prefix)
	}
	y := fmt.Sprintf(`data_dir: %s
nats:
  url: %s
metrics:
  listen: ""
stream:
  name: W_%s
  subjects: ["%s.triggers.>"]
  dead_letter_subject: %s.dead.{pipeline}
ledger:
  store: %s
  kv:
    bucket: %s
llm:
  standin: %v
  cache:
    store: %s
    kv:
      bucket: %s
pipelines:
  - name: b%s
    mode: %s
    subject: %s.triggers.alerts
    key:
      fields: [/alert/fingerprint]
      version: /alert/occurrence%s%s
`, dir, b.url, strings.ToUpper(prefix), prefix, prefix, store, bk.ledger, kind == kindFull, store, bk.cache,
		prefix, mode, prefix, step, effect)
	return mustParse(y), bk
}

func mustParse(y string) *config.Config {
	cfg, err := config.Parse([]byte(y), "bench-writes")
	if err != nil {
		panic(fmt.Sprintf("bench/writes: the cell's configuration: %v\n%s", err, y))
	}
	return cfg
}

func (b *bench) cell(ctx context.Context, kind, store string) (*cell, error) {
	b.seq++
	prefix := fmt.Sprintf("c%d", b.seq)
	dir := filepath.Join(b.tmp, prefix)
	cfg, bk := b.config(prefix, dir, kind, store)
	if err := cfg.LoadEnv(nil); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &cell{kind: kind, store: store, n: b.o.n, buckets: bk}
	p := &cfg.Pipelines[0]

	a, err := app.Start(ctx, cfg, app.Options{Logger: b.o.log, NoOps: true})
	if err != nil {
		return nil, err
	}
	closed := false
	closeApp := func() error {
		if closed {
			return nil
		}
		closed = true
		return a.Close()
	}
	defer closeApp()
	if err := a.Consumer.Setup(ctx); err != nil {
		return nil, err
	}
	for i := range b.o.n {
		if _, err := b.js.Publish(ctx, p.Subject, trigger(b.seq, i)); err != nil {
			return nil, fmt.Errorf("publishing triggers: %w", err)
		}
	}
	cons, err := b.js.Consumer(ctx, cfg.Stream.Name, consumer.Durable(p.Name))
	if err != nil {
		return nil, err
	}

	before, err := lastSeqs(ctx, b.js)
	if err != nil {
		return nil, err
	}
	t := newTally(bk, cfg.Stream.Name, prefix)
	sub, err := b.tap.Subscribe(">", t.count)
	if err != nil {
		return nil, err
	}
	if err := b.tap.Flush(); err != nil {
		return nil, err
	}
	hits0 := b.hits.Load()
	start := time.Now()
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Consumer.Run(runCtx) }()
	waitErr := waitAcked(ctx, cons, b.o.n)
	c.took = time.Since(start)
	if waitErr == nil {
		waitErr = t.waitQuiet(ctx, b.o.quiet, 30*time.Second)
	}
	cancel()
	runErr := <-done
	if d, _ := sub.Dropped(); d > 0 && waitErr == nil {
		waitErr = fmt.Errorf("the tap dropped %d messages (a slow consumer): the counts are short", d)
	}
	_ = sub.Unsubscribe()
	if waitErr != nil {
		return nil, waitErr
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return nil, runErr
	}
	after, err := lastSeqs(ctx, b.js)
	if err != nil {
		return nil, err
	}
	c.tap = t
	c.stored = map[string]uint64{}
	for name, seq := range after {
		if name == cfg.Stream.Name {
			continue
		}
		if d := seq - before[name]; d > 0 {
			c.stored[name] = d
		}
	}
	c.effects = b.hits.Load() - hits0
	if kind != kindOneShot {
		if st, err := b.js.Stream(ctx, cfg.Stream.Name+"_EFFECTS"); err == nil {
			c.effects = int64(st.CachedInfo().State.Msgs)
		}
	}
	if int(c.effects) != b.o.n {
		c.notes = append(c.notes, fmt.Sprintf("%d effects for %d intents", c.effects, b.o.n))
	}
	for _, s := range a.Consumer.Stats() {
		if s.Retries+s.Held+s.DeadLetters+s.TakenOver > 0 {
			c.notes = append(c.notes, fmt.Sprintf("retries %d, held %d, dead letters %d, taken over %d", s.Retries, s.Held, s.DeadLetters, s.TakenOver))
		}
	}
	if err := closeApp(); err != nil {
		return nil, err
	}
	if store == config.StoreBadger && kind != kindWindow {
		if c.badger, err = badgerVersions(cfg.BadgerDir(), nil); err != nil {
			return nil, fmt.Errorf("reading the ledger's Badger versions: %w", err)
		}
		if kind == kindFull {
			if _, err = badgerVersions(filepath.Join(dir, "llm-cache"), c.badger); err != nil {
				return nil, fmt.Errorf("reading the LLM cache's Badger versions: %w", err)
			}
		}
	}
	// The cell's streams and buckets go, so the next cell's counts start
	// from a quiet server.
	b.deleteNew(before)
	return c, nil
}

// trigger is the i-th alert of a cell: a new intent each (its fingerprint
// and occurrence are the key).
func trigger(cell, i int) []byte {
	return fmt.Appendf(nil, `{"status":"firing","delivery_id":"%d-%d","alert":{"fingerprint":"%016x","occurrence":1,`+
		`"labels":{"alertname":"DiskAlmostFull","instance":"db-%d:9100","severity":"page"},`+
		`"annotations":{"summary":"Disk /var/lib/pgsql 93%% full"},"startsAt":"2026-11-29T07:09:03Z"}}`,
		cell, i, uint64(cell)<<32|uint64(i), i%64)
}

// lastSeqs returns every stream's last sequence.
func lastSeqs(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	m := map[string]uint64{}
	l := js.ListStreams(ctx)
	for si := range l.Info() {
		m[si.Config.Name] = si.State.LastSeq
	}
	return m, l.Err()
}

func (b *bench) deleteNew(before map[string]uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now, err := lastSeqs(ctx, b.js)
	if err != nil {
		return
	}
	for name := range now {
		if _, ok := before[name]; !ok || strings.HasPrefix(name, "W_") || strings.HasPrefix(name, "KV_w") {
			_ = b.js.DeleteStream(ctx, name)
		}
	}
}

// waitAcked waits until the server reports nothing pending or awaiting an
// ack on the durable consumer.
func waitAcked(ctx context.Context, cons jetstream.Consumer, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ci, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if ci.NumPending == 0 && ci.NumAckPending == 0 && ci.Delivered.Consumer >= uint64(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stuck: %d pending, %d awaiting ack", ci.NumPending, ci.NumAckPending)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// --- the tap -----------------------------------------------------------------

// tally counts the messages the tap sees, by class, and the KV writes by
// component.
type tally struct {
	bk            buckets
	triggerStream string
	prefix        string

	mu       sync.Mutex
	dispatch map[string]bool // the outbox's dispatch records' keys (consumer.DispatchKey of each outbox entry's intent)
	classes  map[string]int  // every message the tap saw that is a client's request or publish
	kv       map[string]int  // KV writes sent, by "bucket component"
	requests int             // client messages that are not replies or deliveries
	last     atomic.Int64    // when the tap last saw a message of Oncegate's (unix ns)
}

func newTally(bk buckets, triggerStream, prefix string) *tally {
	t := &tally{bk: bk, triggerStream: triggerStream, prefix: prefix, classes: map[string]int{}, kv: map[string]int{}, dispatch: map[string]bool{}}
	t.last.Store(time.Now().UnixNano())
	return t
}

// count is the tap's handler.
func (t *tally) count(m *nats.Msg) {
	class, request := t.classify(m)
	if class == "" {
		return
	}
	t.last.Store(time.Now().UnixNano())
	t.mu.Lock()
	defer t.mu.Unlock()
	t.classes[class]++
	if request {
		t.requests++
	}
	if strings.HasPrefix(class, "kv ") {
		t.kv[t.component(m)]++
	}
	// An outbox entry's Nats-Msg-Id is its intent's key; the dispatcher's
	// record is under the key derived from it, written after the entry is
	// stored (so after the tap saw it).
	if class == "outbox publish" {
		if k, err := dedupe.ParseKey(m.Header.Get("Nats-Msg-Id")); err == nil {
			t.dispatch[consumer.DispatchKey(k).String()] = true
		}
	}
}

// classify names a message's class and says whether it is a client's
// request or publish; "" for what is not Oncegate's (replies, deliveries,
// the tap's own flush).
func (t *tally) classify(m *nats.Msg) (string, bool) {
	s := m.Subject
	switch {
	case strings.HasPrefix(s, "_INBOX.") || strings.HasPrefix(s, "_R_.") || strings.HasPrefix(s, "$SYS."):
		return "", false
	case strings.HasPrefix(m.Reply, "$JS.ACK."):
		// A delivery: the server sends a stored message, under its own
		// subject, to a consumer's inbox (the tap on ">" sees it too).
		return "", false
	case strings.HasPrefix(s, "$JS.ACK."):
		if m.Reply != "" {
			return "ack (awaits the server's reply)", true
		}
		return "ack", true
	case strings.HasPrefix(s, "$JS.API.CONSUMER.MSG.NEXT."):
		return "js api: pull request", true
	case strings.HasPrefix(s, "$JS.API.DIRECT.GET."):
		return "js api: direct get (KV read) of the " + t.store(strings.TrimPrefix(s, "$JS.API.DIRECT.GET.")), true
	case strings.HasPrefix(s, "$JS.API.STREAM.MSG.GET."):
		return "js api: msg get (KV read) of the " + t.store(strings.TrimPrefix(s, "$JS.API.STREAM.MSG.GET.")), true
	case strings.HasPrefix(s, "$JS.API."):
		verb := strings.TrimPrefix(s, "$JS.API.")
		parts := strings.Split(verb, ".")
		if len(parts) > 2 {
			parts = parts[:2]
		}
		return "js api: " + strings.ToLower(strings.Join(parts, " ")), true
	case strings.HasPrefix(s, "$JS.FC.") || strings.HasPrefix(s, "$JS.EVENT."):
		return "", false
	case strings.HasPrefix(s, "$KV."):
		bucket, _, _ := strings.Cut(strings.TrimPrefix(s, "$KV."), ".")
		return "kv " + bucket, true
	case strings.HasPrefix(s, t.prefix+".triggers."):
		return "", false // the producer's (none while the count runs)
	case strings.HasPrefix(s, t.prefix+".effects."):
		return "effect publish", true
	case strings.HasPrefix(s, t.prefix+".dead."):
		return "dead letter publish", true
	case strings.HasPrefix(s, "oncegate.outbox."):
		return "outbox publish", true
	}
	return "other: " + s, true
}

// store names the store a read's stream (its subject's first token) is.
func (t *tally) store(rest string) string {
	stream, _, _ := strings.Cut(rest, ".")
	switch stream {
	case "KV_" + t.bk.ledger:
		return "ledger"
	case "KV_" + t.bk.cache:
		return "cache"
	case "KV_" + t.bk.cache + "-budgets":
		return "cache's budgets"
	}
	return "stream " + stream
}

// component names a KV write by its bucket, key and value.
func (t *tally) component(m *nats.Msg) string {
	rest := strings.TrimPrefix(m.Subject, "$KV.")
	bucket, key, _ := strings.Cut(rest, ".")
	op := m.Header.Get("KV-Operation")
	create := m.Header.Get("Nats-Expected-Last-Subject-Sequence") == "0"
	switch bucket {
	case t.bk.ledger:
		what := "ledger"
		if t.dispatch[key] {
			what = "ledger (outbox dispatch record)"
		}
		return what + ": " + ledgerWrite(m.Data, op, create)
	case t.bk.cache:
		switch {
		case strings.HasPrefix(key, "f."):
			switch {
			case op == "DEL" || op == "PURGE":
				return "cache: fill claim deleted"
			case create:
				return "cache: fill claim"
			case len(m.Data) > 0 && m.Data[0] == 1:
				return "cache: fill claim renewed or taken over"
			}
			return "cache: fill claim released"
		case strings.HasPrefix(key, "a."):
			if op == "DEL" || op == "PURGE" {
				return "cache: answer deleted"
			}
			return "cache: answer"
		case strings.HasPrefix(key, "p."):
			return "cache: answer chunk"
		}
		return "cache: other key"
	case t.bk.cache + "-budgets":
		return "cache: token budget"
	}
	return "kv " + bucket + ": write"
}

// baseline runs the writes program of revision rev, checked out in a
// temporary worktree, with args, and prints its table.
func baseline(out io.Writer, rev string, args []string) error {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return fmt.Errorf("finding the repository: %w", err)
	}
	repo := strings.TrimSpace(string(top))
	dir, err := os.MkdirTemp("", "oncegate-writes-baseline-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	wt := filepath.Join(dir, "tree")
	if b, err := exec.Command("git", "-C", repo, "worktree", "add", "--detach", wt, rev).CombinedOutput(); err != nil {
		return fmt.Errorf("git worktree add: %w: %s", err, b)
	}
	defer exec.Command("git", "-C", repo, "worktree", "remove", "--force", wt).Run()
	sha, _ := exec.Command("git", "-C", wt, "rev-parse", "--short", "HEAD").Output()
	fmt.Fprintf(out, "== baseline: %s (%s) ==\n", rev, strings.TrimSpace(string(sha)))
	cmd := exec.Command("go", append([]string{"run", "./writes"}, args...)...)
	cmd.Dir = filepath.Join(wt, "bench")
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("its writes program: %w", err)
	}
	// Its table: from the heading to the first blank line after the rows.
	text := string(b)
	if i := strings.Index(text, "per trigger,"); i >= 0 {
		text = text[i:]
	}
	if i := strings.Index(text, "\n\nrequests:"); i >= 0 {
		text = text[:i+1]
	}
	_, err = io.WriteString(out, text)
	return err
}

// ledgerWrite names a ledger KV write by its operation and its record's
// state.
func ledgerWrite(data []byte, op string, create bool) string {
	if op == "DEL" || op == "PURGE" {
		return "delete"
	}
	rec, err := ledgerproto.Decode(dedupe.Key{}, data)
	if err != nil {
		return "unreadable write"
	}
	switch rec.State {
	case ledger.StatePending:
		switch {
		case create:
			return "claim"
		case rec.Reason == ledger.ReasonReleased:
			return "release"
		case len(rec.Note) > 0:
			return "note (the step's answer), or a renewal after it"
		}
		return "extend or takeover"
	case ledger.StateCommitted:
		if create {
			return "commit (created)"
		}
		return "commit"
	case ledger.StateFailed:
		return "fail"
	}
	return rec.State.String()
}

// waitQuiet waits until the tap has seen nothing for quiet.
func (t *tally) waitQuiet(ctx context.Context, quiet, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		idle := time.Since(time.Unix(0, t.last.Load()))
		if idle >= quiet {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the tap never went quiet for %v", quiet)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(quiet - idle):
		}
	}
}

// --- Badger ------------------------------------------------------------------

// badgerVersions opens the Badger directory and counts every version of
// every key by component: ledger records by state, the LLM cache's answers
// ("c/") and budgets ("b/"), and the distinct commit timestamps ("txns").
//
// The ledger's database and the LLM cache's (DataDir/llm-cache) are two;
// counts add into m when it is not nil ("txns" too: each database has its
// own commit timestamps).
func badgerVersions(dir string, m map[string]int) (map[string]int, error) {
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if m == nil {
		m = map[string]int{}
	}
	txns := map[uint64]bool{}
	err = db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.AllVersions = true
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			k := string(item.Key())
			if strings.HasPrefix(k, "!badger!") {
				continue
			}
			txns[item.Version()] = true
			what := "other: " + k[:min(len(k), 12)]
			switch {
			case strings.HasPrefix(k, "dedupe/ledger/"):
				if item.IsDeletedOrExpired() {
					what = "ledger: delete"
					break
				}
				v, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				rec, err := ledgerproto.Decode(dedupe.Key{}, v)
				if err != nil {
					what = "ledger: unreadable"
					break
				}
				switch rec.State {
				case ledger.StatePending:
					what = "ledger: pending (claim, extend or release)"
					if len(rec.Note) > 0 {
						what = "ledger: pending with a note (the step's answer)"
					}
				case ledger.StateCommitted:
					what = "ledger: commit"
				default:
					what = "ledger: " + rec.State.String()
				}
			case strings.HasPrefix(k, "c/"):
				what = "cache: answer"
			case strings.HasPrefix(k, "b/"):
				what = "cache: token budget"
			}
			m[what]++
		}
		return nil
	})
	m["txns"] += len(txns)
	return m, err
}

// --- report ------------------------------------------------------------------

func report(w io.Writer, o options, cells []*cell) {
	fmt.Fprintf(w, "per trigger, %d unique triggers per cell (counted at the server: a tap on \">\" and the streams' last sequences; Badger: its versions after the run)\n\n", o.n)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "kind\tstore\trequests\tjs api\tacks\tkv writes sent\tstored: ledger+cache\tstored: other streams\tbadger writes\tbadger txns\ttarget\tverdict\t\n")
	for _, c := range cells {
		n := float64(c.n)
		var api, acks, kv int
		for class, k := range c.tap.classes {
			switch {
			case strings.HasPrefix(class, "js api"):
				api += k
			case strings.HasPrefix(class, "ack"):
				acks += k
			case strings.HasPrefix(class, "kv "):
				kv += k
			}
		}
		var stKV, stOther uint64
		for name, d := range c.stored {
			if isBucketStream(name, c.buckets) {
				stKV += d
			} else {
				stOther += d
			}
		}
		bw, bt := "-", "-"
		if c.badger != nil {
			var writes int
			for what, k := range c.badger {
				if what != "txns" {
					writes += k
				}
			}
			bw, bt = fmt.Sprintf("%.2f", float64(writes)/n), fmt.Sprintf("%.3f", float64(c.badger["txns"])/n)
		}
		target, verdict := "-", "-"
		if c.store == config.StoreKV {
			t := targetNoModel
			if c.kind == kindFull {
				t = targetModel
			}
			target = fmt.Sprintf("≤ %.0f", t)
			verdict = "met"
			if float64(stKV)/n > t+1e-9 {
				verdict = "MISSED"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t\n", c.kind, c.store,
			float64(c.tap.requests)/n, float64(api)/n, float64(acks)/n, float64(kv)/n,
			float64(stKV)/n, float64(stOther)/n, bw, bt, target, verdict)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nrequests: client messages that are not replies or deliveries (JetStream API, acks, KV writes, publishes); stored: writes the server stored (a stream's last sequence, before and after), ledger+cache = the KV buckets, other = effect, outbox and dead-letter streams; the target (issue 39) is on stored ledger+cache writes on KV")

	for _, c := range cells {
		fmt.Fprintf(w, "\n%s on %s (%d triggers, %v", c.kind, c.store, c.n, c.took.Round(time.Millisecond))
		for _, note := range c.notes {
			fmt.Fprintf(w, "; %s", note)
		}
		fmt.Fprintln(w, ")")
		n := float64(c.n)
		printMap(w, "  by component (KV writes sent)", c.tap.kv, n)
		stored := map[string]int{}
		for name, d := range c.stored {
			stored[name] = int(d)
		}
		printMap(w, "  stored, by stream", stored, n)
		if c.badger != nil {
			printMap(w, "  Badger versions", c.badger, n)
		}
		if o.verbose {
			printMap(w, "  requests, by class", c.tap.classes, n)
		} else {
			top := map[string]int{}
			for class, k := range c.tap.classes {
				if float64(k)/n >= 0.05 {
					top[class] = k
				}
			}
			printMap(w, "  requests, by class (≥ 0.05 per trigger; -v for all)", top, n)
		}
	}
}

func isBucketStream(name string, bk buckets) bool {
	return name == "KV_"+bk.ledger || name == "KV_"+bk.cache || name == "KV_"+bk.cache+"-budgets"
}

func printMap(w io.Writer, title string, m map[string]int, n float64) {
	if len(m) == 0 {
		return
	}
	fmt.Fprintln(w, title)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "    %-56s %8.3f  (%d)\n", k, float64(m[k])/n, m[k])
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}
