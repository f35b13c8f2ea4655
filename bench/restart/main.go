// Command restart measures how Oncegate comes back after a crash, and how
// long it takes to be ready.
//
// The crash: a nats-server runs in this process (JetStream on loopback, a
// file store in a temporary directory) and the consumer binary, built from
// the module, runs beside it as a child process on the Badger ledger, with a
// replayable pipeline (HTTP effect with Idempotency-Key) and a one-shot one
// (HTTP, through the outbox). Both receivers run in this process and hold
// every request until told to let go, so that -triggers intents of the
// replayable pipeline are claimed and in the middle of their effect when the
// consumer is killed with SIGKILL (and the one-shot dispatcher is in the
// middle of a send). A second process starts on the same directory, and the
// provider retries every intent (a duplicate of each, published as the new
// process starts). Printed:
//
//   - ready: from the new process's start to its /readyz;
//   - first effect: from ready to the first effect the new process performs
//     (target ≤ 2s: the claims the dead process left are taken over at once,
//     not after their leases);
//   - all settled: from ready until every trigger (originals, whose
//     redeliveries wait for their ack wait, and duplicates) is acked or
//     dead-lettered (target ≤ one ack wait + 5s);
//   - effects per intent at the replayable receiver (exactly one each,
//     counting the calls the dead process made), calls per key at the
//     one-shot receiver (at most one), and the dead letters by reason (the
//     send that was in flight at the kill: unknown_outcome, never resent).
//
// The readiness cells: the time from `consumer run` to /readyz with an empty
// data directory and with a ledger of -records committed records.
//
//	go run -C bench ./restart                                # 1,000 in flight, 1M records
//	go run -C bench ./restart -triggers 200 -records 20000   # the short form CI runs
//
// It exits 1 if a target is missed or an intent has no effect or two.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "restart:", err)
		os.Exit(1)
	}
}

type options struct {
	triggers int
	ackWait  time.Duration
	records  int
	bin      string
	keep     bool
	cells    string
}

func run() error {
	var o options
	flag.IntVar(&o.triggers, "triggers", 1000, "intents of the replayable pipeline in flight at the kill")
	flag.DurationVar(&o.ackWait, "ack-wait", 15*time.Second, "the pipelines' ack wait")
	flag.IntVar(&o.records, "records", 1_000_000, "committed records in the ledger of the second readiness cell (0: skip it)")
	flag.StringVar(&o.bin, "consumer-bin", "", "a consumer binary to run instead of building one")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory")
	flag.StringVar(&o.cells, "cells", "crash,readiness", "the cells to run")
	flag.Parse()

	dir, err := os.MkdirTemp("", "oncegate-restart-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Println("restart: keeping", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if o.bin == "" {
		o.bin = filepath.Join(dir, "consumer")
		fmt.Println("restart: building the consumer")
		// Built in the oncegate module, whose go.sum covers the consumer's
		// dependencies (bench's covers only what bench imports).
		root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/oncegate/oncegate").Output()
		if err != nil {
			return fmt.Errorf("go list -m github.com/oncegate/oncegate: %w", err)
		}
		cmd := exec.Command("go", "build", "-o", o.bin, "./cmd/consumer")
		cmd.Dir = strings.TrimSpace(string(root))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %w\n%s", err, out)
		}
	}
	failed := false
	if strings.Contains(o.cells, "crash") {
		ok, err := crash(dir, o)
		if err != nil {
			return err
		}
		failed = failed || !ok
	}
	if strings.Contains(o.cells, "readiness") {
		ok, err := readiness(dir, o)
		if err != nil {
			return err
		}
		failed = failed || !ok
	}
	if failed {
		return errors.New("FAIL")
	}
	fmt.Println("restart: PASS")
	return nil
}

// receiver is an HTTP effect target that records every call per
// Idempotency-Key and, while holding, keeps each request until released.
type receiver struct {
	mu      sync.Mutex
	calls   map[string]int
	first   map[string]time.Time // when each key was first performed
	holding bool
	release chan struct{}
	inHold  atomic.Int64
	mark    time.Time // letGo's time
	after   time.Time // the first call that came in after mark
}

func newReceiver() *receiver {
	return &receiver{calls: map[string]int{}, first: map[string]time.Time{}, holding: true, release: make(chan struct{})}
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	io.Copy(io.Discard, req.Body)
	key := req.Header.Get("Idempotency-Key")
	r.mu.Lock()
	r.calls[key]++
	if !r.mark.IsZero() && r.after.IsZero() {
		r.after = time.Now()
	}
	if _, ok := r.first[key]; !ok {
		r.first[key] = time.Now()
	} else {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	hold := r.holding
	r.mu.Unlock()
	if hold {
		r.inHold.Add(1)
		select {
		case <-r.release:
		case <-req.Context().Done(): // the caller died
		}
		r.inHold.Add(-1)
	}
	w.WriteHeader(http.StatusOK)
}

// letGo ends the hold: the calls held (the dead process's) return, and
// the calls that come in from now on are answered at once.
func (r *receiver) letGo() {
	r.mu.Lock()
	r.holding = false
	r.mark = time.Now()
	r.mu.Unlock()
	close(r.release)
}

// snapshot returns the first call that came in after letGo (zero if none),
// and how many keys and calls there are and the most calls of one key.
func (r *receiver) snapshot() (after time.Time, keys, calls, maxCalls int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.calls {
		calls += n
		maxCalls = max(maxCalls, n)
	}
	return r.after, len(r.calls), calls, maxCalls
}

const config = `
data_dir: %s
log: {level: warn, format: text}
metrics: {listen: "%s"}
ledger: {lease: 30s}
stream: {duplicates: 30m}
pipelines:
  - name: replay
    subject: triggers.replay
    key: {fields: [/id]}
    effect: {sink: http, url: "%s"}
    concurrency: %d
    max_ack_pending: %d
    ack_wait: %s
    max_deliver: 5
  - name: oneshot
    subject: triggers.oneshot
    key: {fields: [/id]}
    effect: {sink: http, url: "%s", class: one-shot}
    max_ack_pending: %d
    ack_wait: %s
    max_deliver: 5
`

func startServer(dir string) (*server.Server, error) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "js"), NoSigs: true})
	if err != nil {
		return nil, err
	}
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		return nil, errors.New("nats-server not ready")
	}
	return s, nil
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:9465"
	}
	defer l.Close()
	return l.Addr().String()
}

// child is a consumer process.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited, with err set
	err  error
	mu   sync.Mutex
	log  strings.Builder
}

func start(bin string, args ...string) (*child, error) {
	c := &child{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	c.cmd.Stderr = writerFunc(func(p []byte) (int, error) { c.mu.Lock(); defer c.mu.Unlock(); return c.log.Write(p) })
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// waitReady polls /readyz until it answers 200, and returns when it did.
func waitReady(c *child, addr string, limit time.Duration) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			return time.Time{}, fmt.Errorf("the consumer exited: %w\n%s", c.err, c.logs())
		default:
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("not ready within %v", limit)
}

func (c *child) stop() {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
}

// settled reports whether every durable consumer of the stream has nothing
// pending and nothing unacknowledged.
func settled(ctx context.Context, js jetstream.JetStream) bool {
	for _, sd := range [][2]string{
		{"ONCEGATE", consumer.Durable("replay")}, {"ONCEGATE", consumer.Durable("oneshot")},
		{consumer.OutboxStream("ONCEGATE"), consumer.Durable("oneshot") + "-dispatch"},
	} {
		c, err := js.Consumer(ctx, sd[0], sd[1])
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		if err != nil || info.NumPending != 0 || info.NumAckPending != 0 {
			return false
		}
	}
	return true
}

func publish(ctx context.Context, js jetstream.JetStream, subject string, i, delivery int) error {
	_, err := js.Publish(ctx, subject, fmt.Appendf(nil, `{"id":"%s-%d","delivery":%d}`, subject, i, delivery))
	return err
}

// crash runs the crash cell.
func crash(dir string, o options) (bool, error) {
	ctx := context.Background()
	srv, err := startServer(filepath.Join(dir, "crash"))
	if err != nil {
		return false, err
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return false, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false, err
	}
	replay, oneshot := newReceiver(), newReceiver()
	rs, os1 := httptest.NewServer(replay), httptest.NewServer(oneshot)
	defer rs.Close()
	defer os1.Close()
	oneshots := max(o.triggers/10, 1)
	addr := freeAddr()
	cfgPath := filepath.Join(dir, "crash.yaml")
	cfg := fmt.Sprintf(config, filepath.Join(dir, "crash", "data"), addr, rs.URL, o.triggers, 4*o.triggers, o.ackWait,
		os1.URL, 4*o.triggers, o.ackWait)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return false, err
	}
	args := []string{"run", "-config", cfgPath, "-nats-url", srv.ClientURL()}
	first, err := start(o.bin, args...)
	if err != nil {
		return false, err
	}
	if _, err := waitReady(first, addr, time.Minute); err != nil {
		return false, err
	}
	for i := range o.triggers {
		if err := publish(ctx, js, "triggers.replay", i, 0); err != nil {
			return false, err
		}
	}
	for i := range oneshots {
		if err := publish(ctx, js, "triggers.oneshot", i, 0); err != nil {
			return false, err
		}
	}
	fmt.Printf("restart: waiting for %d effects in flight\n", o.triggers)
	for deadline := time.Now().Add(2 * time.Minute); replay.inHold.Load() < int64(o.triggers) || oneshot.inHold.Load() < 1; {
		if time.Now().After(deadline) {
			return false, fmt.Errorf("only %d replayable and %d one-shot effects in flight after 2m", replay.inHold.Load(), oneshot.inHold.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done
	replay.letGo()
	oneshot.letGo()

	t0 := time.Now()
	second, err := start(o.bin, args...)
	if err != nil {
		return false, err
	}
	defer second.stop()
	// The provider retries every intent.
	go func() {
		for i := range o.triggers {
			publish(ctx, js, "triggers.replay", i, 1)
		}
		for i := range oneshots {
			publish(ctx, js, "triggers.oneshot", i, 1)
		}
	}()
	ready, err := waitReady(second, addr, time.Minute)
	if err != nil {
		return false, err
	}
	deadline := ready.Add(o.ackWait + 60*time.Second)
	for !settled(ctx, js) {
		if time.Now().After(deadline) {
			return false, fmt.Errorf("not settled %v after ready", time.Since(ready))
		}
		time.Sleep(20 * time.Millisecond)
	}
	done := time.Now()
	firstEffect, keys, calls, _ := replay.snapshot()
	_, oneKeys, _, oneMax := oneshot.snapshot()
	reasons := deadReasons(ctx, js)

	firstAfter := firstEffect.Sub(ready)
	all := done.Sub(ready)
	okFirst := !firstEffect.IsZero() && firstAfter <= 2*time.Second
	okAll := all <= o.ackWait+5*time.Second
	okOnce := keys == o.triggers && oneMax <= 1
	fmt.Printf("\ncrash with %d replayable effects and one one-shot send in flight (Badger ledger, lease 30s, ack wait %v)\n", o.triggers, o.ackWait)
	fmt.Printf("  ready                %8v after the new process started\n", ready.Sub(t0).Round(time.Millisecond))
	fmt.Printf("  first effect         %8v after ready (target ≤ 2s)  %s\n", firstAfter.Round(time.Millisecond), verdict(okFirst))
	fmt.Printf("  all settled          %8v after ready (target ≤ ack wait + 5s = %v)  %s\n", all.Round(time.Millisecond), o.ackWait+5*time.Second, verdict(okAll))
	fmt.Printf("  replayable           %d intents, %d with an effect (%d calls, the dead process's included)  %s\n", o.triggers, keys, calls, verdict(keys == o.triggers))
	fmt.Printf("  one-shot             %d intents, %d sent, at most %d call per key  %s\n", oneshots, oneKeys, oneMax, verdict(oneMax <= 1))
	fmt.Printf("  dead letters         %v\n", reasons)
	return okFirst && okAll && okOnce, nil
}

func verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISSED"
}

// deadReasons counts the dead letters by reason.
func deadReasons(ctx context.Context, js jetstream.JetStream) map[string]int {
	out := map[string]int{}
	st, err := js.Stream(ctx, "ONCEGATE_DEAD")
	if err != nil {
		return out
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return out
	}
	info, err := st.Info(ctx)
	if err != nil {
		return out
	}
	n := int(info.State.Msgs)
	for got := 0; got < n; {
		b, err := c.Fetch(n-got, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			break
		}
		for m := range b.Messages() {
			out[m.Headers().Get(consumer.HeaderReason)]++
			got++
		}
		if b.Error() != nil {
			break
		}
	}
	return out
}

// readiness runs the readiness cells.
func readiness(dir string, o options) (bool, error) {
	fmt.Printf("\nreadiness: from `consumer run` to /readyz (embedded NATS, Badger ledger)\n")
	cells := []int{0}
	if o.records > 0 {
		cells = append(cells, o.records)
	}
	for _, n := range cells {
		d := filepath.Join(dir, fmt.Sprintf("ready-%d", n))
		if n > 0 {
			t0 := time.Now()
			if err := fill(filepath.Join(d, "badger"), n); err != nil {
				return false, err
			}
			fmt.Printf("  (%d committed records written in %v)\n", n, time.Since(t0).Round(time.Millisecond))
		}
		addr := freeAddr()
		cfgPath := filepath.Join(dir, fmt.Sprintf("ready-%d.yaml", n))
		cfg := fmt.Sprintf(`data_dir: %s
log: {level: warn}
metrics: {listen: %q}
nats: {embedded: {listen: %q}}
pipelines:
  - name: hooks
    subject: triggers.hooks
    key: {fields: [/id]}
    effect: {sink: jetstream, subject: effects.hooks}
`, d, addr, freeAddr())
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			return false, err
		}
		t0 := time.Now()
		c, err := start(o.bin, "run", "-config", cfgPath)
		if err != nil {
			return false, err
		}
		ready, err := waitReady(c, addr, 5*time.Minute)
		c.stop()
		if err != nil {
			return false, err
		}
		fmt.Printf("  %9d records     %8v\n", n, ready.Sub(t0).Round(time.Millisecond))
	}
	return true, nil
}

// fill writes n committed records into a Badger ledger in dir, as a
// long-running consumer leaves them.
func fill(dir string, n int) error {
	db, err := badgerstore.Open(dir, badgerstore.OpenOptions{})
	if err != nil {
		return err
	}
	defer db.Close()
	l, err := badgerstore.New(db, badgerstore.Options{Options: ledger.Options{}, NoSync: true})
	if err != nil {
		return err
	}
	defer l.Close()
	ctx := context.Background()
	const batch = 2000
	for i := 0; i < n; i += batch {
		m := min(batch, n-i)
		begins := make([]ledger.BeginRequest, m)
		for j := range begins {
			var k dedupe.Key
			binary.LittleEndian.PutUint64(k[:], uint64(i+j)+1)
			k[15] = 0x5a
			begins[j] = ledger.BeginRequest{Key: k, Options: ledger.BeginOptions{Owner: "fill", Lease: time.Minute}}
		}
		commits := make([]ledger.CommitRequest, m)
		for j, r := range l.BeginBatch(ctx, begins) {
			if r.Err != nil {
				return r.Err
			}
			commits[j] = ledger.CommitRequest{Key: begins[j].Key, Token: r.Claim.Lease.Token, Result: ledger.Result{DownstreamID: "ticket", Response: make([]byte, 96)}}
		}
		for _, err := range l.CommitBatch(ctx, commits) {
			if err != nil {
				return err
			}
		}
	}
	return nil
}
