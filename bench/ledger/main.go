// Command ledger measures the idempotency ledger: Begin+Commit pairs per
// second on fresh keys (one unit of new work each) with 1, 16 and 256
// concurrent workers, for the Badger ledger with fsync per write batch
// (SyncWrites), with group-committed explicit syncs, and without syncs, for
// the JetStream KV ledger on an embedded server, and — as the ceiling to
// compare with — a raw synchronous JetStream publish to a file-backed stream
// on the same server.
//
//	go run -C bench ./ledger                 # default: 3s per cell
//	go run -C bench ./ledger -dur 10s -workers 1,16,256,1024
//
// Every cell runs in this process, one after another, against stores in a
// temporary directory that is removed at exit. Nothing is written elsewhere.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/ledger/jskvstore"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ledger:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		dur     = flag.Duration("dur", 3*time.Second, "measured time per cell")
		workers = flag.String("workers", "1,16,256", "comma-separated worker counts")
		only    = flag.String("only", "", "comma-separated subset of: badger-syncwrites, badger-explicit, badger-nosync, jskv, js-publish")
	)
	flag.Parse()
	var counts []int
	for _, s := range strings.Split(*workers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("-workers: %q is not a positive number", s)
		}
		counts = append(counts, n)
	}
	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	selected := func(name string) bool { return len(want) == 0 || want[name] }

	tmp, err := os.MkdirTemp("", "oncegate-bench-ledger-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	srv, nc, js, err := startNATS(tmp + "/nats")
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	defer nc.Close()

	ctx := context.Background()
	type cell struct {
		impl    string
		workers int
		rate    float64
	}
	var cells []cell
	ceiling := map[int]float64{}
	n := 0
	for _, w := range counts {
		if selected("js-publish") {
			r, err := measurePublish(ctx, js, fmt.Sprintf("raw%d", n), w, *dur)
			if err != nil {
				return fmt.Errorf("js-publish: %w", err)
			}
			ceiling[w] = r
			cells = append(cells, cell{"js-publish (sync)", w, r})
		}
		for _, b := range []struct {
			name   string
			open   badgerstore.OpenOptions
			noSync bool
		}{
			{"badger-syncwrites", badgerstore.OpenOptions{SyncWrites: true}, false},
			{"badger-explicit", badgerstore.OpenOptions{}, false},
			{"badger-nosync", badgerstore.OpenOptions{}, true},
		} {
			if !selected(b.name) {
				continue
			}
			n++
			db, err := badgerstore.Open(fmt.Sprintf("%s/badger%d", tmp, n), b.open)
			if err != nil {
				return err
			}
			l, err := badgerstore.New(db, badgerstore.Options{NoSync: b.noSync})
			if err != nil {
				return err
			}
			r, err := measurePairs(ctx, l, w, *dur)
			l.Close()
			db.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", b.name, err)
			}
			cells = append(cells, cell{b.name, w, r})
		}
		if selected("jskv") {
			n++
			l, err := jskvstore.New(ctx, js, jskvstore.Options{Bucket: fmt.Sprintf("bench-%d", n)})
			if err != nil {
				return err
			}
			r, err := measurePairs(ctx, l, w, *dur)
			l.Close()
			if err != nil {
				return fmt.Errorf("jskv: %w", err)
			}
			cells = append(cells, cell{"jskv (R1, file)", w, r})
		}
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "impl\tworkers\tpairs/s\tvs js-publish\t\n")
	for _, c := range cells {
		ratio := "-"
		if base := ceiling[c.workers]; base > 0 && c.impl != "js-publish (sync)" {
			ratio = fmt.Sprintf("%.3f", c.rate/base)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t\n", c.impl, c.workers, c.rate, ratio)
	}
	tw.Flush()
	fmt.Printf("\none pair = Begin + Commit of a fresh key with a 128-byte result; %v per cell; js-publish = jetstream.Publish (awaits the PubAck) of a 128-byte message to a file-backed stream, the server's default sync_interval\n", *dur)
	return nil
}

func startNATS(dir string) (*server.Server, *nats.Conn, jetstream.JetStream, error) {
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		return nil, nil, nil, errors.New("embedded nats-server not ready after 10s")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		srv.Shutdown()
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		srv.Shutdown()
		return nil, nil, nil, err
	}
	return srv, nc, js, nil
}

// measurePairs runs Begin+Commit pairs on fresh keys from workers
// goroutines for d and returns pairs per second.
func measurePairs(ctx context.Context, l ledger.Ledger, workers int, d time.Duration) (float64, error) {
	result := ledger.Result{DownstreamID: "ticket-1", Response: make([]byte, 128)}
	var next atomic.Uint64
	seed := uint64(time.Now().UnixNano())
	return measure(workers, d, func() error {
		var k dedupe.Key
		binary.LittleEndian.PutUint64(k[:], next.Add(1))
		binary.LittleEndian.PutUint64(k[8:], seed)
		c, err := l.Begin(ctx, k, ledger.BeginOptions{Owner: "bench", Lease: time.Minute})
		if err != nil {
			return err
		}
		if c.Status != ledger.StatusNew {
			return fmt.Errorf("fresh key %v: %v", k, c.Status)
		}
		return l.Commit(ctx, k, c.Lease.Token, result)
	})
}

// measurePublish publishes synchronously (each publish awaits its PubAck)
// from workers goroutines for d and returns messages per second.
func measurePublish(ctx context.Context, js jetstream.JetStream, name string, workers int, d time.Duration) (float64, error) {
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage}); err != nil {
		return 0, err
	}
	defer js.DeleteStream(ctx, name)
	payload := make([]byte, 128)
	var next atomic.Uint64
	return measure(workers, d, func() error {
		_, err := js.Publish(ctx, name+".effects", payload, jetstream.WithMsgID(strconv.FormatUint(next.Add(1), 10)))
		return err
	})
}

// measure runs op from workers goroutines for d after a short warm-up and
// returns completed ops per second.
func measure(workers int, d time.Duration, op func() error) (float64, error) {
	var (
		done    atomic.Int64
		stop    atomic.Bool
		counted atomic.Bool
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if err := op(); err != nil {
					errOnce.Do(func() { first = err })
					stop.Store(true)
					return
				}
				if counted.Load() {
					done.Add(1)
				}
			}
		}()
	}
	time.Sleep(d / 5) // warm-up: fill caches, start the group syncs
	counted.Store(true)
	start := time.Now()
	time.Sleep(d)
	n := done.Load()
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()
	return float64(n) / elapsed.Seconds(), first
}
