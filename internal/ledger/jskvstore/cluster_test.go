package jskvstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/jskvstore"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
	"github.com/oncegate/oncegate/internal/natstest"
)

// connectCluster connects to every server of a cluster, failing over
// between them for as long as the test runs.
func connectCluster(t *testing.T, servers []*server.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(natstest.ClientURLs(servers),
		nats.Name(t.Name()), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connecting to %s: %v", natstest.ClientURLs(servers), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

// TestClusterConformance runs the conformance suite on R3 buckets of a
// three-server cluster.
func TestClusterConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-server cluster")
	}
	_, js := connectCluster(t, natstest.RunCluster(t, 3))
	ledgertest.Run(t, func(t *testing.T, opts ledger.Options) ledger.Ledger {
		return newLedger(t, js, jskvstore.Options{Options: opts, Replicas: 3})
	})
}

// TestClusterLeaderLoss commits records to an R3 bucket, shuts down the
// server that leads the bucket's stream, and checks that, once another
// leader is elected, every committed record is still there with its result
// and the ledger takes new work.
func TestClusterLeaderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-server cluster")
	}
	servers := natstest.RunCluster(t, 3)
	_, js := connectCluster(t, servers)
	const bucket, keys = "leader-loss", 50
	opts := jskvstore.Options{Bucket: bucket, Replicas: 3, Timeout: time.Second}
	l := newLedger(t, js, opts)
	result := func(i int) ledger.Result {
		return ledger.Result{DownstreamID: key(i).String(), Response: fmt.Appendf(nil, "response %d", i)}
	}
	sameResult := func(got ledger.Result, i int) bool {
		want := result(i)
		return got.DownstreamID == want.DownstreamID && bytes.Equal(got.Response, want.Response)
	}
	begin := ledger.BeginOptions{Owner: "a", Lease: time.Minute}
	for i := range keys {
		c, err := l.Begin(ctx, key(i), begin)
		if err != nil || c.Status != ledger.StatusNew {
			t.Fatalf("Begin(key %d) = %v, %v; want new", i, c.Status, err)
		}
		if err := l.Commit(ctx, key(i), c.Lease.Token, result(i)); err != nil {
			t.Fatalf("Commit(key %d): %v", i, err)
		}
	}

	// Wait for every replica to hold every write. Commit returns once a
	// quorum has it, and Begin reads from any replica; a lagging one would
	// answer "held" (safe, but not what this test checks).
	stream := "KV_" + bucket
	var leader string
	waitUntil(t, "all replicas current", func() error {
		info, err := streamInfo(js, stream)
		if err != nil {
			return err
		}
		if info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
			return errors.New("no leader or missing replicas")
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Lag != 0 {
				return errors.New("replica " + r.Name + " behind")
			}
		}
		leader = info.Cluster.Leader
		return nil
	})
	i := slices.IndexFunc(servers, func(s *server.Server) bool { return s.Name() == leader })
	if i < 0 {
		t.Fatalf("stream leader %q is none of the cluster's servers", leader)
	}
	servers[i].Shutdown()
	servers[i].WaitForShutdown()
	survivors := slices.Delete(slices.Clone(servers), i, i+1)

	// A ledger on a fresh connection to the survivors, and the first one,
	// reconnected, must both see every record. Errors are expected only
	// until the new leader answers a read through both.
	_, js2 := connectCluster(t, survivors)
	var l2 *jskvstore.Ledger
	var newLeader string
	waitUntil(t, "a new stream leader", func() error {
		info, err := streamInfo(js2, stream)
		if err != nil {
			return err
		}
		if info.Cluster.Leader == "" || info.Cluster.Leader == leader {
			return errors.New("no new leader")
		}
		newLeader = info.Cluster.Leader
		if l2 == nil {
			if l2, err = jskvstore.New(ctx, js2, opts); err != nil {
				return err
			}
			t.Cleanup(func() { l2.Close() })
		}
		for _, l := range []*jskvstore.Ledger{l, l2} {
			if _, err := l.Get(ctx, key(0)); err != nil {
				return err
			}
		}
		return nil
	})
	t.Logf("stream leader %s shut down; %s took over", leader, newLeader)
	for li, l := range []*jskvstore.Ledger{l, l2} {
		for i := range keys {
			rec, err := l.Get(ctx, key(i))
			if err != nil || rec.State != ledger.StateCommitted || !sameResult(rec.Result, i) {
				t.Fatalf("ledger %d: Get(key %d) = %+v, %v; want committed with %+v", li, i, rec, err, result(i))
			}
			c, err := l.Begin(ctx, key(i), begin)
			if err != nil || c.Status != ledger.StatusCommitted || !sameResult(c.Record.Result, i) {
				t.Fatalf("ledger %d: Begin(key %d) = %v with %+v, %v; want committed with %+v", li, i, c.Status, c.Record.Result, err, result(i))
			}
		}
		k := key(keys + li)
		c, err := l.Begin(ctx, k, begin)
		if err != nil || c.Status != ledger.StatusNew {
			t.Fatalf("ledger %d: Begin(new key) after failover = %v, %v; want new", li, c.Status, err)
		}
		if err := l.Commit(ctx, k, c.Lease.Token, ledger.Result{DownstreamID: "after"}); err != nil {
			t.Fatalf("ledger %d: Commit(new key) after failover: %v", li, err)
		}
		if rec, err := l2.Get(ctx, k); err != nil || rec.State != ledger.StateCommitted {
			t.Errorf("Get(key committed by ledger %d after failover) = %+v, %v; want committed", li, rec, err)
		}
	}
}

// TestClusterReplicasChecked: a lone server cannot hold a replicated
// bucket, and New says so rather than quietly making an R1 one.
func TestClusterReplicasChecked(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	_, js := natstest.Connect(t, natstest.RunServer(t))
	l, err := jskvstore.New(ctx, js, jskvstore.Options{Bucket: "r3-on-one", Replicas: 3})
	if !errors.Is(err, ledger.ErrInvalidLedger) {
		if l != nil {
			l.Close()
		}
		t.Fatalf("New(Replicas: 3) on a lone server: error = %v; want ErrInvalidLedger", err)
	}
	t.Logf("New(Replicas: 3) on a lone server: %v", err)
}

// streamInfo returns the info, with cluster info, of the stream name.
func streamInfo(js jetstream.JetStream, name string) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err == nil && info.Cluster == nil {
		return nil, errors.New("stream " + name + " has no cluster info")
	}
	return info, err
}

// waitUntil retries fn until it returns nil, failing t with fn's last error
// if it has not within 30 seconds.
func waitUntil(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
