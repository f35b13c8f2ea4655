package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/natsrun"
	"github.com/oncegate/oncegate/pkg/dedupe/window"
)

// gateRun is one measured system: a pass over the triggers, then a restart
// and the same intents delivered again.
type gateRun struct {
	name        string
	n, unique   int
	took        time.Duration
	effects     uint64 // effects after the first pass
	again       int    // intents delivered again after the restart
	letThrough  uint64 // effects the second pass added
	memPerKey   string
	diskBytes   int64 // on disk after both passes, for a system that keeps its keys there
	notes       []string
	description string
}

// gateBench holds the server and the producer's connection.
type gateBench struct {
	o   options
	dir string
	url string
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger
	seq int
}

func runGate(ctx context.Context, o options, dir string, w io.Writer) error {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := natsrun.StartEmbedded(dir, natsrun.Options{Listen: "127.0.0.1:0", StoreDir: filepath.Join(dir, "nats"), Logger: log})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	nc, err := natsrun.Connect(ctx, srv.ClientURL(), natsrun.Options{Name: "bench-peers-producer", Logger: log})
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return err
	}
	b := &gateBench{o: o, dir: dir, url: srv.ClientURL(), nc: nc, js: js, log: log}

	payloads, unique := generate(o.n, o.dup)
	again := redeliveries(unique)
	var runs []gateRun
	for _, sys := range []struct {
		name string
		run  func(context.Context, [][]byte, [][]byte) (gateRun, error)
	}{
		{"oncegate gate-ledger", b.oncegate},
		{"watermill, 1 handler", func(ctx context.Context, p, a [][]byte) (gateRun, error) { return b.watermill(ctx, p, a, 1) }},
		{fmt.Sprintf("watermill, %d handlers", config.DefaultConcurrency), func(ctx context.Context, p, a [][]byte) (gateRun, error) {
			return b.watermill(ctx, p, a, config.DefaultConcurrency)
		}},
	} {
		r, err := sys.run(ctx, payloads, again)
		if err != nil {
			return fmt.Errorf("%s: %w", sys.name, err)
		}
		r.name, r.n, r.unique, r.again = sys.name, len(payloads), unique, len(again)
		if r.diskBytes > 0 {
			r.memPerKey += fmt.Sprintf(" + %.0f B on disk (ledger, Badger's files over the intents)", float64(r.diskBytes)/float64(unique))
		}
		runs = append(runs, r)
		fmt.Fprintf(os.Stderr, "gate: %-24s %6.0f triggers/s, %d effects, %d let through after the restart\n", r.name, float64(r.n)/r.took.Seconds(), r.effects, r.letThrough)
	}

	fmt.Fprintf(w, "\nGate, end to end: %d alert triggers (%d%% repeat an earlier intent: %d intents) prepublished to a JetStream stream on one embedded server; the clock runs from the consumer's start until the server reports every trigger acked\n",
		len(payloads), o.dup, unique)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "system\ttriggers/s\tvs oncegate\teffects\texpected\tlet through after restart\tmemory per key\t\n")
	base := float64(runs[0].n) / runs[0].took.Seconds()
	for _, r := range runs {
		rate := float64(r.n) / r.took.Seconds()
		fmt.Fprintf(tw, "%s\t%.0f\t%.2fx\t%d\t%d\t%d of %d\t%s\t\n", r.name, rate, rate/base, r.effects, r.unique, r.letThrough, r.again, r.memPerKey)
	}
	tw.Flush()
	for _, r := range runs {
		fmt.Fprintf(w, "  %-24s %s\n", r.name, r.description)
		for _, n := range r.notes {
			fmt.Fprintf(w, "  %-24s note: %s\n", "", n)
		}
	}
	fmt.Fprintln(w, "  after the first pass each system is stopped and started again (same data directory, same durable consumer), and every intent is delivered once more with a new delivery id, as a producer retrying after a timeout would: \"let through\" counts the effects that second pass published (0 is right)")
	return nil
}

// --- Oncegate ------------------------------------------------------------------

func (b *gateBench) oncegateConfig(prefix, dir string) (*config.Config, error) {
	cfg := config.Default()
	cfg.DataDir = dir
	cfg.NATS.URL = b.url
	cfg.Metrics.Listen = ""
	cfg.Stream.Name = strings.ToUpper("PEERS_" + prefix)
	cfg.Stream.Subjects = []string{prefix + ".triggers.>"}
	cfg.Stream.DeadLetterSubject = prefix + ".dead.{pipeline}"
	// The default gate pipeline with the alerts pipeline's key: the
	// alert's fingerprint and occurrence.
	p := cfg.Pipelines[1]
	p.Key = cfg.Pipelines[0].Key
	p.Name = "bench"
	p.Mode = config.ModeGateLedger
	p.Subject = prefix + ".triggers.alerts"
	p.Effect.Subject = prefix + ".effects.alerts"
	cfg.Pipelines = []config.Pipeline{p}
	if err := cfg.LoadEnv(nil); err != nil {
		return nil, err
	}
	return cfg, cfg.Validate()
}

func (b *gateBench) oncegate(ctx context.Context, payloads, again [][]byte) (gateRun, error) {
	b.seq++
	prefix := fmt.Sprintf("g%d", b.seq)
	dir := filepath.Join(b.dir, prefix)
	cfg, err := b.oncegateConfig(prefix, dir)
	if err != nil {
		return gateRun{}, err
	}
	p := cfg.Pipelines[0]
	r := gateRun{description: fmt.Sprintf("Oncegate, pipeline mode %s (the in-memory window in front of the Badger ledger, fsynced), default configuration (concurrency %d)", p.Mode, p.Concurrency)}
	effects := cfg.Stream.Name + "_EFFECTS"
	defer b.deleteStreams(cfg.Stream.Name, effects, cfg.Stream.Name+"_DEAD")

	pass := func(ps [][]byte, first bool) (time.Duration, error) {
		a, err := app.Start(ctx, cfg, app.Options{Logger: b.log, NoOps: true})
		if err != nil {
			return 0, err
		}
		defer a.Close()
		if err := a.Consumer.Setup(ctx); err != nil {
			return 0, err
		}
		if err := b.prepublish(ctx, cfg.Stream.Name, p.Subject, ps); err != nil {
			return 0, err
		}
		cons, err := b.onlyConsumer(ctx, cfg.Stream.Name)
		if err != nil {
			return 0, err
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- a.Consumer.Run(runCtx) }()
		err = waitAcked(ctx, cons, done)
		took := time.Since(start)
		cancel()
		if rerr := <-done; err == nil && rerr != nil && !errors.Is(rerr, context.Canceled) {
			err = rerr
		}
		return took, err
	}
	if r.took, err = pass(payloads, true); err != nil {
		return r, err
	}
	if r.effects, err = b.streamMsgs(ctx, effects); err != nil {
		return r, err
	}
	if _, err := pass(again, false); err != nil {
		return r, fmt.Errorf("after the restart: %w", err)
	}
	after, err := b.streamMsgs(ctx, effects)
	if err != nil {
		return r, err
	}
	r.letThrough = after - r.effects
	if dead, _ := b.streamMsgs(ctx, cfg.Stream.Name+"_DEAD"); dead > 0 {
		r.notes = append(r.notes, fmt.Sprintf("%d dead letters", dead))
	}
	// Memory per key: the window's table per key of capacity (fixed, off
	// the Go heap), and the ledger's bytes on disk per intent.
	wnd, err := window.New(window.Options{Capacity: p.Window.Capacity, TTL: time.Minute})
	if err != nil {
		return r, err
	}
	r.diskBytes = dirSize(cfg.BadgerDir())
	capacity := wnd.Stats().Capacity
	r.memPerKey = fmt.Sprintf("%d B in memory (window table of %d keys, off the Go heap)", 16, capacity) // the window's documented 16 bytes per key of capacity
	return r, nil
}

// --- Watermill -----------------------------------------------------------------

// alertKey is the key a Watermill user would write for these triggers: the
// alert's fingerprint and occurrence, as Oncegate's pipeline uses.
func alertKey(m *message.Message) (string, error) {
	var t struct {
		Alert struct {
			Fingerprint string `json:"fingerprint"`
			Occurrence  int    `json:"occurrence"`
		} `json:"alert"`
	}
	if err := json.Unmarshal(m.Payload, &t); err != nil {
		return "", err
	}
	return t.Alert.Fingerprint + ":" + strconv.Itoa(t.Alert.Occurrence), nil
}

func (b *gateBench) watermill(ctx context.Context, payloads, again [][]byte, handlers int) (gateRun, error) {
	b.seq++
	prefix := fmt.Sprintf("g%d", b.seq)
	stream := strings.ToUpper("PEERS_" + prefix)
	subject, effectSubject := prefix+".triggers.alerts", prefix+".effects.alerts"
	def := config.Default()
	pipe := def.Pipelines[1]
	r := gateRun{description: fmt.Sprintf("Watermill router, Deduplicator middleware (key: fingerprint + occurrence; NewMapExpiringKeyRepository, %v), %d handler(s) on one durable consumer (watermill-nats JetStream subscriber, default options), each effect published by the router through the watermill-nats JetStream publisher", def.Stream.Duplicates, handlers)}
	for _, sc := range []jetstream.StreamConfig{
		{Name: stream, Subjects: []string{prefix + ".triggers.>"}, Storage: jetstream.FileStorage, Duplicates: def.Stream.Duplicates},
		{Name: stream + "_EFFECTS", Subjects: []string{effectSubject}, Storage: jetstream.FileStorage, Duplicates: def.Stream.Duplicates},
	} {
		if _, err := b.js.CreateStream(ctx, sc); err != nil {
			return r, err
		}
	}
	defer b.deleteStreams(stream, stream+"_EFFECTS")
	cons, err := b.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       "watermill",
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       pipe.AckWait,
		MaxDeliver:    pipe.MaxDeliver,
		MaxAckPending: pipe.MaxAckPending,
	})
	if err != nil {
		return r, err
	}

	pass := func(ps [][]byte) (time.Duration, error) {
		// A process: its own connections, router and deduplicator.
		logger := watermill.NopLogger{}
		subConn, err := nats.Connect(b.url, nats.Name("watermill-sub"))
		if err != nil {
			return 0, err
		}
		pubConn, err := nats.Connect(b.url, nats.Name("watermill-pub"))
		if err != nil {
			subConn.Close()
			return 0, err
		}
		sub, err := wmjs.NewSubscriber(wmjs.SubscriberConfig{
			Conn:   subConn,
			Logger: logger,
			ResourceInitializer: func(context.Context, jetstream.JetStream, string) (jetstream.Consumer, func(context.Context, watermill.LoggerAdapter), error) {
				return cons, nil, nil
			},
			ConfigureStream: func(string) jetstream.StreamConfig {
				return jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".triggers.>"}, Storage: jetstream.FileStorage, Duplicates: def.Stream.Duplicates}
			},
		})
		if err != nil {
			return 0, err
		}
		pub, err := wmjs.NewPublisher(wmjs.PublisherConfig{
			Conn:   pubConn,
			Logger: logger,
			// The publisher sends to the stream name it is given: the
			// subject.
			ConfigureStream: func(topic string) jetstream.StreamConfig { return jetstream.StreamConfig{Name: topic} },
		})
		if err != nil {
			return 0, err
		}
		repo, err := middleware.NewMapExpiringKeyRepository(def.Stream.Duplicates)
		if err != nil {
			return 0, err
		}
		router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
		if err != nil {
			return 0, err
		}
		dd := &middleware.Deduplicator{KeyFactory: alertKey, Repository: repo}
		router.AddMiddleware(dd.Middleware)
		for h := range handlers {
			router.AddHandler(fmt.Sprintf("alerts-%d", h), subject, sub, effectSubject, pub,
				func(m *message.Message) ([]*message.Message, error) {
					return []*message.Message{message.NewMessage(watermill.NewUUID(), m.Payload)}, nil
				})
		}
		if err := b.prepublish(ctx, stream, subject, ps); err != nil {
			return 0, err
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- router.Run(runCtx) }()
		err = waitAcked(ctx, cons, done)
		took := time.Since(start)
		cancel()
		<-done
		_ = router.Close()
		_ = sub.Close()
		_ = pub.Close()
		subConn.Close()
		pubConn.Close()
		return took, err
	}
	if r.took, err = pass(payloads); err != nil {
		return r, err
	}
	if r.effects, err = b.streamMsgs(ctx, stream+"_EFFECTS"); err != nil {
		return r, err
	}
	if _, err := pass(again); err != nil {
		return r, fmt.Errorf("after the restart: %w", err)
	}
	after, err := b.streamMsgs(ctx, stream+"_EFFECTS")
	if err != nil {
		return r, err
	}
	r.letThrough = after - r.effects
	bpk, err := watermillBytesPerKey(1_000_000)
	if err != nil {
		return r, err
	}
	r.memPerKey = fmt.Sprintf("%.0f B in memory (Go heap, at 1000000 keys), nothing on disk", bpk)
	return r, nil
}

// watermillBytesPerKey returns the Go heap a Watermill map repository
// holds per key, for n keys of this bench's form.
func watermillBytesPerKey(n int) (float64, error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	repo, err := middleware.NewMapExpiringKeyRepository(time.Hour)
	if err != nil {
		return 0, err
	}
	for i := range n {
		h := uint64(i)*0x9E3779B97F4A7C15 + 1
		if _, err := repo.IsDuplicate(context.Background(), fmt.Sprintf("%016x:%d", h, 1+i%5)); err != nil {
			return 0, err
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(repo)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n), nil
}

// --- shared --------------------------------------------------------------------

// onlyConsumer returns the one consumer on stream.
func (b *gateBench) onlyConsumer(ctx context.Context, stream string) (jetstream.Consumer, error) {
	st, err := b.js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	names := st.ConsumerNames(ctx)
	for name := range names.Name() {
		return st.Consumer(ctx, name)
	}
	if err := names.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no consumer on stream %s", stream)
}

func (b *gateBench) streamMsgs(ctx context.Context, stream string) (uint64, error) {
	st, err := b.js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	return st.CachedInfo().State.Msgs, nil
}

func (b *gateBench) deleteStreams(names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range names {
		_ = b.js.DeleteStream(ctx, s)
	}
}

// prepublish puts payloads into stream on subject and checks they landed.
func (b *gateBench) prepublish(ctx context.Context, stream, subject string, payloads [][]byte) error {
	st, err := b.js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	before := st.CachedInfo().State.Msgs
	for _, p := range payloads {
		if _, err := b.js.PublishAsync(subject, p, jetstream.WithStallWait(30*time.Second)); err != nil {
			return err
		}
	}
	select {
	case <-b.js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Minute):
		return errors.New("publishing triggers: PubAcks missing after a minute")
	}
	if st, err = b.js.Stream(ctx, stream); err != nil {
		return err
	}
	if got := st.CachedInfo().State.Msgs - before; got != uint64(len(payloads)) {
		return fmt.Errorf("publishing triggers: %d of %d landed", got, len(payloads))
	}
	return nil
}

// waitAcked waits until the server reports nothing pending or awaiting an
// ack on cons, polling every 10ms; it fails if the system under test
// stops (done) or nothing moves for a minute.
func waitAcked(ctx context.Context, cons jetstream.Consumer, done <-chan error) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	var last uint64
	progress := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-done:
			return fmt.Errorf("stopped before the end: %v", err)
		case <-t.C:
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if ci.NumPending == 0 && ci.NumAckPending == 0 {
			return nil
		}
		if ci.AckFloor.Consumer != last {
			last, progress = ci.AckFloor.Consumer, time.Now()
		} else if time.Since(progress) > time.Minute {
			return fmt.Errorf("stuck: %d pending, %d awaiting ack", ci.NumPending, ci.NumAckPending)
		}
	}
}

// dirSize returns the disk space the files under dir take: allocated
// blocks, not apparent sizes (Badger preallocates and maps its files).
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		} else {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// --- triggers ------------------------------------------------------------------

// generate returns n alert payloads (about 330 bytes of JSON, shaped like
// examples/alert.json; the same generator as bench/e2e) of which dup
// percent repeat an earlier intent: the same fingerprint and occurrence
// (the key fields) and content, with a new delivery id and send time. It
// also returns the number of distinct intents, which are intents 0 to
// that number minus one.
func generate(n, dup int) ([][]byte, int) {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(dup)))
	var intents []int
	out := make([][]byte, n)
	for i := range n {
		intent := len(intents)
		if i > 0 && rng.IntN(100) < dup {
			intent = intents[rng.IntN(len(intents))]
		} else {
			intents = append(intents, intent)
		}
		out[i] = alert(rng, i, intent)
	}
	return out, len(intents)
}

// redeliveries returns every intent of generate once more, with new
// delivery ids and times.
func redeliveries(unique int) [][]byte {
	rng := rand.New(rand.NewPCG(7, 7))
	out := make([][]byte, unique)
	for i := range unique {
		out[i] = alert(rng, 1_000_000+i, i)
	}
	return out
}

func alert(rng *rand.Rand, i, intent int) []byte {
	base := time.Date(2026, 11, 29, 7, 14, 3, 0, time.UTC)
	h := uint64(intent)*0x9E3779B97F4A7C15 + 1
	return fmt.Appendf(nil, `{"status":"firing","delivery_id":"%08x%04x%012x",`+
		`"sent_at":"%s","alert":{"fingerprint":"%016x","occurrence":%d,`+
		`"labels":{"alertname":"DiskAlmostFull","instance":"db-%d:9100","severity":"page"},`+
		`"annotations":{"summary":"Disk /var/lib/pgsql 93%% full"},"startsAt":"2026-11-29T07:09:03Z"}}`,
		rng.Uint32(), i&0xffff, rng.Uint64()&0xffffffffffff,
		base.Add(time.Duration(i)*time.Millisecond).Format("2006-01-02T15:04:05.000Z"),
		h, 1+intent%5, intent%64)
}
