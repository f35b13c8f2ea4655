package natstest

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/oncegate/oncegate/internal/freeport"
)

// clusterTimeout bounds the wait for a cluster to form: routes connected,
// the JetStream meta leader elected and every server known to it.
const clusterTimeout = 30 * time.Second

// RunCluster starts n clustered NATS servers with JetStream, named n0 to
// n<n-1>, each on a random client port of 127.0.0.1 with its store in a
// fresh t.TempDir, routed to one another on 127.0.0.1. It returns once
// every server accepts connections, the JetStream meta leader is elected,
// it knows all n servers, and every server is current with it, so that a
// stream with up to n replicas can be created at once. Every server is shut
// down, and waited for, in t.Cleanup; shutting one down earlier (to lose a
// leader) is fine.
//
// Each opt, applied in order after the cluster's settings, may change a
// server's options (accounts, say).
//
// The route ports are picked before the servers start, since every server
// must know the others' addresses: outside the kernel's ephemeral range
// (freeport), where a test's listener on port 0 or a connection's source
// port would take one in between (TestHundredMissesOneCall failed so once,
// "server not ready for connections", with the packages' tests side by
// side).
func RunCluster(t testing.TB, n int, opts ...func(*server.Options)) []*server.Server {
	t.Helper()
	if n < 1 {
		t.Fatalf("natstest: RunCluster(%d): need at least one server", n)
	}
	ports := freePorts(t, n)
	routes := make([]*url.URL, n)
	for i, p := range ports {
		routes[i] = &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)}
	}
	servers := make([]*server.Server, n)
	for i := range n {
		servers[i] = RunServer(t, append([]func(*server.Options){func(o *server.Options) {
			o.ServerName = fmt.Sprintf("n%d", i)
			o.Cluster = server.ClusterOpts{Name: "natstest", Host: "127.0.0.1", Port: ports[i]}
			o.Routes = routes // a server skips the route to itself
		}}, opts...)...)
	}
	waitFor(t, clusterTimeout, "JetStream meta leader with all servers", func() bool {
		var leader *server.Server
		for _, s := range servers {
			if !s.JetStreamIsCurrent() {
				return false
			}
			if s.JetStreamIsLeader() {
				leader = s
			}
		}
		return leader != nil && len(leader.JetStreamClusterPeers()) == n
	})
	return servers
}

// ClientURLs returns the client URLs of servers, comma-separated, as
// nats.Connect takes them: a client connected with them fails over to the
// others when its server goes.
func ClientURLs(servers []*server.Server) string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// freePorts returns n distinct ports of 127.0.0.1 that were free a moment
// ago, outside the kernel's ephemeral range (freeport).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range n {
		p, err := freeport.Port()
		if err != nil {
			t.Fatalf("natstest: finding a free port: %v", err)
		}
		ports[i] = p
	}
	return ports
}

// waitFor polls cond until it holds, failing t if it does not within d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("natstest: no %s after %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
