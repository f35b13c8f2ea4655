package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// With -cluster N the harness runs N nats-server processes clustered over
// loopback routes instead of one. Each server reaches every other one only
// through a TCP proxy of the harness (one per ordered pair; the servers do
// not advertise their route addresses, so no route bypasses a proxy), and a
// partition of one node closes the proxies to and from it. The streams and
// the KV buckets have N replicas, and every consumer replica is given all
// N client URLs.

// routeProxy forwards route connections from one server to another; cut
// closes the ones open and refuses new ones until heal.
type routeProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newRouteProxy(target string) (*routeProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &routeProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	return p, nil
}

func (p *routeProxy) addr() string { return p.ln.Addr().String() }

func (p *routeProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.mu.Unlock()
		up, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			up.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		p.wg.Go(func() { pipe(up, c) })
		p.wg.Go(func() { pipe(c, up) })
	}
}

// setCut cuts (true) or heals (false) the link.
func (p *routeProxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	var open []net.Conn
	if cut {
		for c := range p.conns {
			open = append(open, c)
		}
	}
	p.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
}

func (p *routeProxy) close() {
	p.setCut(true)
	p.ln.Close()
	p.wg.Wait()
}

// clusterNode is one server of the cluster.
type clusterNode struct {
	*natsServer
	idx     int
	name    string
	monPort int
}

// healthy reports whether the node's /healthz answers 200: it is up and
// its JetStream assets are current.
// If not, why says what the node answered.
func (n *clusterNode) healthy() (ok bool, why string) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", n.monPort))
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return true, ""
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	return false, fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
}

// clusterConf is one node's configuration file.
const clusterConf = `# soak: node %[1]s of the cluster
server_name: %[1]s
listen: 127.0.0.1:%[2]d
http: 127.0.0.1:%[3]d
jetstream {
  store_dir: "%[4]s"
  sync_interval: %[5]s
}
cluster {
  name: soak
  listen: 127.0.0.1:%[6]d
  no_advertise: true
  routes: [%[7]s]
}
`

// clusterStreams are the streams the harness creates with N replicas
// before the consumers start, as the configuration under test describes
// them (the consumers, with stream.replicas N, find them as they want).
func clusterStreams(o options) []jetstream.StreamConfig {
	var dead []string
	for _, p := range pipelines {
		dead = append(dead, "oncegate.dead."+p)
	}
	dup := duplicateWindow(o)
	return []jetstream.StreamConfig{
		{Name: "ONCEGATE", Subjects: []string{"triggers.>"}, Duplicates: dup, MaxAge: 72 * time.Hour, Discard: jetstream.DiscardNew},
		{Name: "ONCEGATE_EFFECTS", Subjects: []string{"effects.triage", "effects.poison"}, Duplicates: dup},
		{Name: "ONCEGATE_DEAD", Subjects: dead},
		{Name: "ONCEGATE_OUTBOX", Subjects: []string{"oncegate.outbox.>"}, Duplicates: dup, Retention: jetstream.WorkQueuePolicy},
	}
}

// startCluster starts the nodes, waits until all are healthy, and creates
// the streams with every node as a replica.

func (h *harness) startCluster(ctx context.Context) error {
	n := h.o.cluster
	ports := func() ([]int, error) {
		out := make([]int, n)
		for i := range out {
			p, err := freePort()
			if err != nil {
				return nil, err
			}
			out[i] = p
		}
		return out, nil
	}
	client, err := ports()
	if err != nil {
		return err
	}
	route, err := ports()
	if err != nil {
		return err
	}
	mon, err := ports()
	if err != nil {
		return err
	}
	h.proxies = make([][]*routeProxy, n)
	for i := range n {
		h.proxies[i] = make([]*routeProxy, n)
		for j := range n {
			if i == j {
				continue
			}
			p, err := newRouteProxy(fmt.Sprintf("127.0.0.1:%d", route[j]))
			if err != nil {
				return err
			}
			h.proxies[i][j] = p
			h.stops = append(h.stops, p.close)
		}
	}
	for i := range n {
		name := fmt.Sprintf("n%d", i)
		var routes []string
		for j := range n {
			if j != i {
				routes = append(routes, "nats-route://"+h.proxies[i][j].addr())
			}
		}
		store := filepath.Join(h.dir, "nats", name)
		conf := filepath.Join(h.dir, name+".conf")
		text := fmt.Sprintf(clusterConf, name, client[i], mon[i], store, h.o.syncInterval, route[i], strings.Join(routes, ", "))
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return err
		}
		h.nodes = append(h.nodes, &clusterNode{
			natsServer: &natsServer{h: h, bin: h.natsBin, port: client[i], log: filepath.Join(h.dir, "logs", name+".log"), args: []string{"-c", conf}, name: name},
			idx:        i, name: name, monPort: mon[i],
		})
	}
	for _, nd := range h.nodes {
		if err := nd.start(ctx); err != nil {
			return fmt.Errorf("%s: %w", nd.name, err)
		}
	}
	if err := h.waitHealthy(ctx, 60*time.Second); err != nil {
		return err
	}
	if err := h.connect(); err != nil {
		return err
	}
	for _, sc := range clusterStreams(h.o) {
		sc.Replicas, sc.Storage = n, jetstream.FileStorage
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := h.js.CreateStream(cctx, sc)
		cancel()
		if err != nil {
			return fmt.Errorf("creating stream %s with %d replicas: %w", sc.Name, n, err)
		}
	}
	return nil
}

// waitHealthy waits until every node answers /healthz with 200 and, once
// the harness is connected, every stream (the buckets' included) has a
// leader and every replica current: the cluster is whole again, and the
// next node fault takes down only one copy of each write. A node's
// /healthz answers 200 a moment before it has caught up, and a second
// fault in that moment loses writes that only the first node's memory and
// the second's held.
func (h *harness) waitHealthy(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		var sick []string
		for _, nd := range h.nodes {
			if ok, why := nd.healthy(); !ok {
				sick = append(sick, nd.name+" ("+why+")")
			}
		}
		if len(sick) == 0 && h.js != nil {
			sick = h.behind(ctx)
		}
		if len(sick) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nodes %v not healthy after %v", sick, d)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return context.Cause(ctx)
		}
	}
}

// sickNodes returns the nodes whose /healthz does not answer 200.
func (h *harness) sickNodes() []*clusterNode {
	var out []*clusterNode
	for _, nd := range h.nodes {
		if ok, _ := nd.healthy(); !ok {
			out = append(out, nd)
		}
	}
	return out
}

// behind lists the streams without a leader or with a replica that is not
// current.
func (h *harness) behind(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out []string
	names := h.js.StreamNames(ctx)
	for name := range names.Name() {
		st, err := h.js.Stream(ctx, name)
		if err != nil {
			out = append(out, name+": "+err.Error())
			continue
		}
		ci := st.CachedInfo().Cluster
		switch {
		case ci == nil || ci.Leader == "":
			out = append(out, name+": no leader")
		default:
			for _, r := range ci.Replicas {
				if !r.Current || r.Offline || r.Lag > 0 {
					out = append(out, fmt.Sprintf("%s: replica %s behind", name, r.Name))
				}
			}
		}
	}
	if err := names.Err(); err != nil {
		out = append(out, "listing streams: "+err.Error())
	}
	return out
}

// natsURL is what the harness and the replicas connect to: the server, or
// every node of the cluster.
func (h *harness) natsURL() string {
	if len(h.nodes) == 0 {
		return h.server.url()
	}
	urls := make([]string, len(h.nodes))
	for i, nd := range h.nodes {
		urls[i] = nd.url()
	}
	return strings.Join(urls, ",")
}

// leaderOf returns the node that leads stream, or an error.
func (h *harness) leaderOf(ctx context.Context, stream string) (*clusterNode, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := h.js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	ci := st.CachedInfo().Cluster
	if ci == nil || ci.Leader == "" {
		return nil, errors.New("no leader")
	}
	for _, nd := range h.nodes {
		if nd.name == ci.Leader {
			return nd, nil
		}
	}
	return nil, fmt.Errorf("leader %q is not a node", ci.Leader)
}

// partition cuts node i off from the others for d, then heals it.
func (h *harness) partition(ctx context.Context, i int, d time.Duration) {
	set := func(cut bool) {
		for j := range h.nodes {
			if j != i {
				h.proxies[i][j].setCut(cut)
				h.proxies[j][i].setCut(cut)
			}
		}
	}
	set(true)
	sleepCtx(ctx, d)
	set(false)
}

// stepDown asks the leader of stream to step down: the stream's replicas
// elect another one.
func (h *harness) stepDown(ctx context.Context, stream string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg, err := h.nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil)
	if err != nil {
		return err
	}
	var resp struct {
		Success bool                `json:"success"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("step-down response %q: %w", msg.Data, err)
	}
	if resp.Error != nil {
		return resp.Error
	}
	if !resp.Success {
		return fmt.Errorf("step-down not done: %s", msg.Data)
	}
	return nil
}
