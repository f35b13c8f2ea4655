package jskvstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/jskvstore"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

var ctx = context.Background()

var buckets atomic.Int64

// newLedger returns a ledger on js in a bucket no other test uses.
func newLedger(t testing.TB, js jetstream.JetStream, opts jskvstore.Options) *jskvstore.Ledger {
	t.Helper()
	if opts.Bucket == "" {
		opts.Bucket = fmt.Sprintf("ledger-%d", buckets.Add(1))
	}
	l, err := jskvstore.New(ctx, js, opts)
	if err != nil {
		t.Fatalf("New(%q): %v", opts.Bucket, err)
	}
	t.Cleanup(func() { l.Close() })
	if opts.Replicas > 1 {
		waitReplicated(t, js, "KV_"+opts.Bucket)
	}
	return l
}

// waitReplicated waits until the stream has a leader and every replica is
// current: a request made before that, on a loaded machine, can find no
// responder yet.
func waitReplicated(t testing.TB, js jetstream.JetStream, stream string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := js.Stream(ctx, stream)
		if err == nil {
			if info, err := st.Info(ctx); err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
				current := true
				for _, r := range info.Cluster.Replicas {
					current = current && r.Current
				}
				if current {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s has no leader with current replicas after 30s (%v)", stream, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func key(i int) dedupe.Key {
	var k dedupe.Key
	copy(k[:], fmt.Sprintf("jskv-test%7d", i))
	return k
}

func TestConformance(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ledgertest.Run(t, func(t *testing.T, opts ledger.Options) ledger.Ledger {
		return newLedger(t, js, jskvstore.Options{Options: opts})
	})
}

// TestTwoReplicas races two ledgers on two connections to one bucket, as
// two consumer replicas would: first for new keys, then, once the leases
// have run out, for the takeovers. Each key has exactly one winner each
// time.
func TestTwoReplicas(t *testing.T) {
	s := natstest.RunServer(t)
	_, jsA := natstest.Connect(t, s)
	_, jsB := natstest.Connect(t, s)
	clock := ledgertest.NewClock()
	opts := jskvstore.Options{Bucket: "two-replicas", Options: ledger.Options{Clock: clock}}
	ledgers := []*jskvstore.Ledger{newLedger(t, jsA, opts), newLedger(t, jsB, opts)}

	const lease = time.Minute
	keys := make([]dedupe.Key, 200)
	for i := range keys {
		keys[i] = key(i)
	}
	handles := []ledger.Ledger{ledgers[0], ledgers[1]}
	ledgertest.RaceBegin(t, handles, 16, keys, lease, ledger.StatusNew)
	clock.Advance(lease)
	ledgertest.RaceBegin(t, handles, 16, keys, lease, ledger.StatusTakenOver)

	rec, err := ledgers[1].Get(ctx, key(0))
	if err != nil || rec.Token != 2 || rec.Attempts != 2 {
		t.Errorf("Get(key 0) = %+v, %v; want token 2 after 2 attempts", rec, err)
	}
}

// TestServerGone checks that a ledger whose server has gone returns errors
// within its timeout, and ErrClosed once its connection is closed.
func TestServerGone(t *testing.T) {
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	const timeout = 300 * time.Millisecond
	l := newLedger(t, js, jskvstore.Options{Timeout: timeout})
	c, err := l.Begin(ctx, key(1), ledger.BeginOptions{Owner: "a", Lease: time.Minute})
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	s.Shutdown()
	s.WaitForShutdown()

	for _, tt := range []struct {
		name string
		call func() error
	}{
		{"Begin", func() error {
			_, err := l.Begin(ctx, key(2), ledger.BeginOptions{Owner: "a", Lease: time.Minute})
			return err
		}},
		{"Commit", func() error { return l.Commit(ctx, key(1), c.Lease.Token, ledger.Result{DownstreamID: "x"}) }},
		{"Get", func() error { _, err := l.Get(ctx, key(1)); return err }},
		{"Pending", func() error {
			for _, err := range l.Pending(ctx) {
				return err
			}
			return nil
		}},
	} {
		start := time.Now()
		err := tt.call()
		if took := time.Since(start); err == nil || took > 5*timeout {
			t.Errorf("%s with the server gone = %v after %v; want an error within %v", tt.name, err, took, timeout)
		}
	}

	nc.Close()
	_, err = l.Begin(ctx, key(3), ledger.BeginOptions{Owner: "a", Lease: time.Minute})
	if !errors.Is(err, ledger.ErrClosed) {
		t.Errorf("Begin on a closed connection: error = %v; want ErrClosed", err)
	}
	if err := l.Commit(ctx, key(1), c.Lease.Token, ledger.Result{}); !errors.Is(err, ledger.ErrClosed) {
		t.Errorf("Commit on a closed connection: error = %v; want ErrClosed", err)
	}
}

func TestExistingBucket(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "short-ttl", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "in-memory", Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		opts    jskvstore.Options
		wantErr error
	}{
		{"ttl shorter than retention", jskvstore.Options{Bucket: "short-ttl"}, ledger.ErrInvalidLedger},
		{"ttl covers retention", jskvstore.Options{Bucket: "short-ttl", Options: ledger.Options{Retention: time.Hour}}, nil},
		{"memory for file", jskvstore.Options{Bucket: "in-memory"}, ledger.ErrInvalidLedger},
		{"memory for memory", jskvstore.Options{Bucket: "in-memory", Storage: jetstream.MemoryStorage}, nil},
		{"more replicas than the bucket has", jskvstore.Options{Bucket: "in-memory", Storage: jetstream.MemoryStorage, Replicas: 3}, ledger.ErrInvalidLedger},
		{"new", jskvstore.Options{Bucket: "fresh"}, nil},
		{"same again", jskvstore.Options{Bucket: "fresh"}, nil},
		{"longer retention on its bucket", jskvstore.Options{Bucket: "fresh", Options: ledger.Options{Retention: 30 * 24 * time.Hour}}, ledger.ErrInvalidLedger},
		{"shorter retention on its bucket", jskvstore.Options{Bucket: "fresh", Options: ledger.Options{Retention: time.Hour}}, nil},
		{"invalid bucket name", jskvstore.Options{Bucket: "a.b"}, ledger.ErrInvalidLedger},
		{"result larger than max_payload", jskvstore.Options{Options: ledger.Options{MaxResultBytes: 2 << 20}}, ledger.ErrInvalidLedger},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, err := jskvstore.New(ctx, js, tt.opts)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("New(%+v) error = %v; want %v", tt.opts, err, tt.wantErr)
			}
			if l != nil {
				l.Close()
			}
		})
	}
	st, err := mustKV(t, js, "fresh").Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.TTL(), ledger.DefaultRetention+time.Hour; got != want || st.History() != 1 {
		t.Errorf("new bucket TTL %v, history %d; want %v, 1", got, st.History(), want)
	}
}

func mustKV(t *testing.T, js jetstream.JetStream, bucket string) jetstream.KeyValue {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatalf("KeyValue(%q): %v", bucket, err)
	}
	return kv
}

// TestForeignValues: a key someone deleted by hand can be begun again (the
// write expects the delete marker's revision), and a value that is not a
// record is an error, not an answer.
func TestForeignValues(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	l := newLedger(t, js, jskvstore.Options{Bucket: "foreign"})
	kv := mustKV(t, js, "foreign")

	c, err := l.Begin(ctx, key(1), ledger.BeginOptions{Owner: "a", Lease: time.Minute})
	if err != nil || c.Status != ledger.StatusNew {
		t.Fatalf("Begin = %v, %v; want new", c.Status, err)
	}
	if err := kv.Delete(ctx, key(1).String()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get(ctx, key(1)); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Get after Delete: error = %v; want ErrNotFound", err)
	}
	if err := l.Commit(ctx, key(1), c.Lease.Token, ledger.Result{}); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Commit after Delete: error = %v; want ErrNotFound", err)
	}
	c, err = l.Begin(ctx, key(1), ledger.BeginOptions{Owner: "b", Lease: time.Minute})
	if err != nil || c.Status != ledger.StatusNew || c.Record.Owner != "b" {
		t.Fatalf("Begin after Delete = %v by %q, %v; want new by b", c.Status, c.Record.Owner, err)
	}

	if _, err := kv.Put(ctx, key(2).String(), []byte("not a record")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "not-a-ledger-key", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get(ctx, key(2)); !errors.Is(err, ledger.ErrCorruptRecord) {
		t.Errorf("Get of a foreign value: error = %v; want ErrCorruptRecord", err)
	}
	if _, err := l.Begin(ctx, key(2), ledger.BeginOptions{Owner: "a", Lease: time.Minute}); !errors.Is(err, ledger.ErrCorruptRecord) {
		t.Errorf("Begin on a foreign value: error = %v; want ErrCorruptRecord", err)
	}
	var pending, corrupt int
	for rec, err := range l.Pending(ctx) {
		switch {
		case errors.Is(err, ledger.ErrCorruptRecord):
			corrupt++
		case err != nil:
			t.Fatalf("Pending: %v", err)
		case rec.Key != key(1):
			t.Errorf("Pending listed %v; want only %v", rec.Key, key(1))
		default:
			pending++
		}
	}
	if pending != 1 || corrupt != 1 {
		t.Errorf("Pending listed %d records and %d errors; want 1 and 1", pending, corrupt)
	}
}

// TestDomain runs the ledger through a JetStream domain, whose API subjects
// differ from the default ones.
func TestDomain(t *testing.T) {
	s := natstest.RunServer(t, func(o *server.Options) { o.JetStreamDomain = "hub" })
	nc, _ := natstest.Connect(t, s)
	js, err := jetstream.NewWithDomain(nc, "hub")
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger(t, js, jskvstore.Options{})
	c, err := l.Begin(ctx, key(1), ledger.BeginOptions{Owner: "a", Lease: time.Minute})
	if err != nil || c.Status != ledger.StatusNew {
		t.Fatalf("Begin = %v, %v; want new", c.Status, err)
	}
	if err := l.Commit(ctx, key(1), c.Lease.Token, ledger.Result{DownstreamID: "x"}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if rec, err := l.Get(ctx, key(1)); err != nil || rec.State != ledger.StateCommitted {
		t.Errorf("Get = %+v, %v; want committed", rec, err)
	}
}

// BenchmarkLedger measures Begin+Commit pairs on fresh keys on an embedded
// server with a file-backed R1 bucket (see ledgertest.Benchmark).
func BenchmarkLedger(b *testing.B) {
	s := natstest.RunServer(b)
	_, js := natstest.Connect(b, s)
	ledgertest.Benchmark(b, func(b *testing.B) ledger.Ledger {
		return newLedger(b, js, jskvstore.Options{})
	})
}
