package main

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/oncegate/oncegate/internal/faults"
)

// Kinds of fault.
const (
	fKill       = "kill"        // SIGKILL a replica
	fZombie     = "zombie"      // SIGSTOP a replica past its lease, then SIGCONT
	fServerTerm = "server-term" // restart the nats-server after SIGTERM
	fServerKill = "server-kill" // restart the nats-server after SIGKILL
	fClock      = "clock-jump"  // jump a replica's ledger clock forward (SIGUSR1)
	fPartition  = "partition"   // cut a cluster node off from the others for a while
	fOutage     = "outage"      // SIGKILL every replica and keep them all down for a while
	fBlip       = "ledger-blip" // step the ledger bucket's leader down, or refuse ledger writes for a while
)

// Targets of a node restart, with -cluster.
const (
	tTriggerLeader = "leader of ONCEGATE"
	tLedgerLeader  = "leader of KV_oncegate-ledger"
)

// ledgerStream is the stream of the ledger's KV bucket.
const ledgerStream = "KV_oncegate-ledger"

// fault is one entry of the schedule.
type fault struct {
	at      time.Duration
	kind    string
	replica int
	crashAt string        // kill: ONCEGATE_CRASH_AT armed for the restart
	pause   time.Duration // zombie: how long it stays stopped
	down    time.Duration // server: how long it stays down
	target  string        // server, with -cluster: tTriggerLeader, tLedgerLeader, or "" for node replica
}

func (f fault) String() string {
	switch f.kind {
	case fKill:
		s := fmt.Sprintf("%7.2fs  SIGKILL replica-%d", f.at.Seconds(), f.replica)
		if f.crashAt != "" {
			s += ", restart armed with ONCEGATE_CRASH_AT=" + f.crashAt
		}
		return s
	case fZombie:
		return fmt.Sprintf("%7.2fs  SIGSTOP replica-%d for %v, then SIGCONT", f.at.Seconds(), f.replica, f.pause.Round(time.Millisecond))
	case fServerTerm, fServerKill:
		sig := map[string]string{fServerTerm: "SIGTERM", fServerKill: "SIGKILL"}[f.kind]
		who := "nats-server"
		switch {
		case f.target != "":
			who = "the " + f.target
		case f.replica >= 0:
			who = fmt.Sprintf("node n%d", f.replica)
		}
		return fmt.Sprintf("%7.2fs  %s %s, down %v", f.at.Seconds(), sig, who, f.down.Round(time.Millisecond))
	case fPartition:
		return fmt.Sprintf("%7.2fs  cut node n%d off from the others for %v", f.at.Seconds(), f.replica, f.pause.Round(time.Millisecond))
	case fClock:
		return fmt.Sprintf("%7.2fs  jump replica-%d's ledger clock forward (SIGUSR1)", f.at.Seconds(), f.replica)
	case fOutage:
		return fmt.Sprintf("%7.2fs  SIGKILL every replica, all down for %v", f.at.Seconds(), f.down.Round(time.Millisecond))
	case fBlip:
		return fmt.Sprintf("%7.2fs  ledger blip", f.at.Seconds())
	}
	return f.kind
}

// crashPoints are the points ONCEGATE_CRASH_AT can name.
var crashPoints = append(append([]faults.Point(nil), faults.Points...), faults.AfterDispatchClaim)

// newSchedule draws the faults of a window of length d, within its first
// 90% (the workload is published over the first 80%, and its last copies
// follow by up to 8s): kills at uniformly random instants, pauses and
// server restarts one per equal slot, at a random place in it, so that they
// do not pile up.
func newSchedule(rng *rand.Rand, o options) []fault {
	d := float64(o.duration) * 0.9
	var fs []fault
	for range o.kills {
		f := fault{at: time.Duration(d * (0.03 + 0.97*rng.Float64())), kind: fKill, replica: rng.IntN(o.replicas)}
		if rng.Float64() < o.crashPoints {
			f.crashAt = fmt.Sprintf("%s:%d", crashPoints[rng.IntN(len(crashPoints))], 1+rng.IntN(40))
		}
		fs = append(fs, f)
	}
	for j := range o.zombies {
		fs = append(fs, fault{
			at:   time.Duration(d * (float64(j) + 0.1 + 0.8*rng.Float64()) / float64(o.zombies)),
			kind: fZombie, replica: rng.IntN(o.replicas),
			pause: o.lease + time.Second + time.Duration(rng.Int64N(int64(3*time.Second))),
		})
	}
	first := rng.IntN(2)
	for j := range o.serverRestarts {
		kind := fServerTerm
		if (first+j)%2 == 1 {
			kind = fServerKill
		}
		f := fault{
			at:   time.Duration(d * (float64(j) + 0.2 + 0.6*rng.Float64()) / float64(o.serverRestarts)),
			kind: kind, down: 300*time.Millisecond + time.Duration(rng.Int64N(int64(2500*time.Millisecond))),
			replica: -1,
		}
		if o.cluster > 0 {
			// A third each: the trigger stream's leader, the ledger
			// bucket's leader, any node.
			switch j % 3 {
			case 0:
				f.target = tTriggerLeader
			case 1:
				f.target = tLedgerLeader
			default:
				f.replica = rng.IntN(o.cluster)
			}
		}
		fs = append(fs, f)
	}
	for j := range o.partitions {
		fs = append(fs, fault{
			at:   time.Duration(d * (float64(j) + 0.3 + 0.4*rng.Float64()) / float64(o.partitions)),
			kind: fPartition, replica: rng.IntN(o.cluster), pause: o.partitionFor,
		})
	}
	for j := range o.clockJumps {
		fs = append(fs, fault{
			at:   time.Duration(d * (float64(j) + 0.1 + 0.8*rng.Float64()) / float64(o.clockJumps)),
			kind: fClock, replica: rng.IntN(o.replicas),
		})
	}
	for j := range o.outages {
		fs = append(fs, fault{
			at:   time.Duration(d * (float64(j) + 0.3 + 0.4*rng.Float64()) / float64(o.outages)),
			kind: fOutage, replica: -1, down: o.outageFor,
		})
	}
	for j := range o.ledgerBlips {
		fs = append(fs, fault{
			at:   time.Duration(d * (float64(j) + 0.1 + 0.8*rng.Float64()) / float64(o.ledgerBlips)),
			kind: fBlip, replica: -1, down: o.ledgerBlipFor,
		})
	}
	slices.SortStableFunc(fs, func(a, b fault) int { return cmp.Compare(a.at, b.at) })
	return fs
}

// Kinds of event on the timeline.
const (
	evKill       = "SIGKILL consumer"
	evCrashPoint = "SIGKILL at a crash point"
	evPause      = "SIGSTOP consumer"
	evResume     = "SIGCONT consumer"
	evServerTerm = "SIGTERM nats-server"
	evServerKill = "SIGKILL nats-server"
	evServerUp   = "nats-server up"
	evSickNode   = "SIGTERM of a node still unhealthy"
	evMissed     = "fault skipped"
	evClock      = "ledger clock jump"
	evPartition  = "node cut off"
	evHealed     = "partition healed"
	evOutage     = "every replica down"
	evOutageOver = "replicas restarting"
	evBlip       = "ledger blip"
	evPoisonKill = "SIGKILL by a poison trigger"
	evPanic      = "consumer died of a panic"
	evCrash      = "consumer died"
)

type event struct {
	at      time.Time
	kind    string
	replica int
	detail  string
}

type events struct {
	mu      sync.Mutex
	list    []event
	t0      time.Time
	verbose bool
}

func (e *events) add(ev event) {
	if ev.at.IsZero() {
		ev.at = time.Now()
	}
	e.mu.Lock()
	e.list = append(e.list, ev)
	t0 := e.t0
	e.mu.Unlock()
	if e.verbose {
		who := ""
		if ev.kind != evServerTerm && ev.kind != evServerKill && ev.kind != evServerUp {
			who = fmt.Sprintf(" replica-%d", ev.replica)
		}
		fmt.Printf("  %7.2fs  %s%s %s\n", ev.at.Sub(t0).Seconds(), ev.kind, who, ev.detail)
	}
}

func (e *events) snapshot() []event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]event(nil), e.list...)
}

func (e *events) count(kind string) int {
	n := 0
	for _, ev := range e.snapshot() {
		if ev.kind == kind {
			n++
		}
	}
	return n
}

// countDetail counts server events whose detail contains s.
func (e *events) countDetail(s string) int {
	n := 0
	for _, ev := range e.snapshot() {
		if (ev.kind == evServerTerm || ev.kind == evServerKill) && strings.Contains(ev.detail, s) {
			n++
		}
	}
	return n
}

// inject runs the schedule from t0, each fault on its own goroutine at its
// time, and returns when all are done.
func (h *harness) inject(ctx context.Context, t0 time.Time, schedule []fault) {
	var wg sync.WaitGroup
	for _, f := range schedule {
		wg.Go(func() {
			if d := time.Until(t0.Add(f.at)); d > 0 && !sleepCtx(ctx, d) {
				return
			}
			h.apply(ctx, f)
		})
	}
	wg.Wait()
}

func (h *harness) apply(ctx context.Context, f fault) {
	// A replica that is down (restarting, or unable to start while the
	// server is down) or paused is waited for: every fault on a replica
	// lands on a running process. missed records one that could not.
	running := func(what string) *child {
		c := h.replicas[f.replica].waitRunning(ctx, 300*time.Millisecond, 60*time.Second)
		if c == nil {
			h.missed(f, what+": the replica was not running for 60s")
		}
		return c
	}
	switch f.kind {
	case fPartition:
		h.cutNode(ctx, f)
	case fOutage:
		h.outage(ctx, f)
	case fBlip:
		h.blip(ctx, f)
	case fKill:
		r := h.replicas[f.replica]
		c := running("kill")
		if c == nil {
			return
		}
		if f.crashAt != "" {
			r.arm(f.crashAt)
		}
		if err := c.kill(); err != nil {
			h.missed(f, "kill: "+err.Error())
			return
		}
		detail := ""
		if f.crashAt != "" {
			detail = "(restart armed: " + f.crashAt + ")"
		}
		h.events.add(event{kind: evKill, replica: f.replica, detail: detail})
	case fZombie:
		c := running("pause")
		if c == nil {
			return
		}
		c.paused.Store(true)
		if err := c.signal(syscall.SIGSTOP); err != nil {
			c.paused.Store(false)
			h.missed(f, "pause: "+err.Error())
			return
		}
		h.events.add(event{kind: evPause, replica: f.replica, detail: fmt.Sprintf("for %v", f.pause.Round(time.Millisecond))})
		sleepCtx(ctx, f.pause)
		c.signal(syscall.SIGCONT)
		c.paused.Store(false)
		h.events.add(event{kind: evResume, replica: f.replica})
	case fClock:
		// The replica's ledger clock runs ahead by twice the lease more:
		// it sees healthy holders' leases as expired and takes their work
		// over; fencing must turn their late commits away.
		c := running("clock jump")
		if c == nil {
			return
		}
		if err := c.signal(syscall.SIGUSR1); err != nil {
			h.missed(f, "clock jump: "+err.Error())
			return
		}
		h.events.add(event{kind: evClock, replica: f.replica, detail: fmt.Sprintf("+%v", 2*h.o.lease)})
	case fServerTerm, fServerKill:
		if len(h.nodes) > 0 {
			h.restartNode(ctx, f)
			return
		}
		h.serverMu.Lock() // one restart at a time
		defer h.serverMu.Unlock()
		sig, kind := syscall.SIGTERM, evServerTerm
		if f.kind == fServerKill {
			sig, kind = syscall.SIGKILL, evServerKill
		}
		h.events.add(event{kind: kind, detail: fmt.Sprintf("down %v", f.down.Round(time.Millisecond))})
		if err := h.server.restart(ctx, sig, f.down); err != nil {
			if ctx.Err() == nil {
				h.fatal(fmt.Errorf("restarting nats-server: %w", err))
			}
			return
		}
		h.events.add(event{kind: evServerUp})
	}
}

// restartNode stops a cluster node with SIGTERM or SIGKILL (the leader of
// a stream when the fault names one), keeps it down, restarts it on its
// store, and waits until every node is healthy again: one node down at a
// time, so the replicated streams keep their quorum.
func (h *harness) restartNode(ctx context.Context, f fault) {
	h.serverMu.Lock()
	defer h.serverMu.Unlock()
	sig, kind := syscall.SIGTERM, evServerTerm
	if f.kind == fServerKill {
		sig, kind = syscall.SIGKILL, evServerKill
	}
	nd, why := h.nodes[max(0, f.replica)%len(h.nodes)], ""
	if f.target != "" {
		stream := "ONCEGATE"
		if f.target == tLedgerLeader {
			stream = "KV_oncegate-ledger"
		}
		l, err := h.leaderOf(ctx, stream)
		if err != nil {
			h.missed(f, fmt.Sprintf("no %s: %v", f.target, err))
			return
		}
		nd, why = l, " ("+f.target+")"
	}
	h.events.add(event{kind: kind, replica: nd.idx, detail: fmt.Sprintf("%s%s, down %v", nd.name, why, f.down.Round(time.Millisecond))})
	if err := nd.restart(ctx, sig, f.down); err != nil {
		if ctx.Err() == nil {
			h.fatal(fmt.Errorf("restarting %s: %w", nd.name, err))
		}
		return
	}
	if err := h.healCluster(ctx); err != nil && ctx.Err() == nil {
		h.fatal(fmt.Errorf("after restarting %s: %w", nd.name, err))
		return
	}
	h.events.add(event{kind: evServerUp, replica: nd.idx, detail: nd.name})
}

// healCluster waits until every node is healthy again after a node fault. A
// node still unhealthy after 2 minutes (its JetStream assets not current:
// a stream or consumer replica that does not catch up) is restarted on its
// store with SIGTERM, as an operator would, once; the report counts these
// restarts, and the soak fails if the cluster is still not whole 2 minutes
// later. The caller holds h.serverMu.
func (h *harness) healCluster(ctx context.Context) error {
	wait := cmp.Or(h.healWait, 2*time.Minute)
	err := h.waitHealthy(ctx, wait)
	if err == nil || ctx.Err() != nil {
		return err
	}
	sick := h.sickNodes()
	if len(sick) == 0 {
		return err // streams behind, every node answering 200: no node to restart
	}
	for _, nd := range sick {
		h.events.add(event{kind: evSickNode, replica: nd.idx, detail: nd.name + ": " + err.Error()})
		fmt.Printf("soak: %v; restarting %s\n", err, nd.name)
		if rerr := nd.restart(ctx, syscall.SIGTERM, 300*time.Millisecond); rerr != nil {
			return fmt.Errorf("%w; restarting %s: %w", err, nd.name, rerr)
		}
		h.events.add(event{kind: evServerUp, replica: nd.idx, detail: nd.name})
	}
	if err2 := h.waitHealthy(ctx, wait); err2 != nil {
		return fmt.Errorf("%w; and after restarting them: %w", err, err2)
	}
	return nil
}

// cutNode partitions a node from the others for f.pause, then waits until
// every node is healthy again.
func (h *harness) cutNode(ctx context.Context, f fault) {
	h.serverMu.Lock()
	defer h.serverMu.Unlock()
	nd := h.nodes[f.replica%len(h.nodes)]
	h.events.add(event{kind: evPartition, replica: nd.idx, detail: fmt.Sprintf("%s for %v", nd.name, f.pause.Round(time.Millisecond))})
	h.partition(ctx, nd.idx, f.pause)
	if err := h.healCluster(ctx); err != nil && ctx.Err() == nil {
		h.fatal(fmt.Errorf("after the partition of %s: %w", nd.name, err))
		return
	}
	h.events.add(event{kind: evHealed, replica: nd.idx, detail: nd.name})
}

// outage SIGKILLs every replica at once and keeps them all down for
// f.down: longer than the duplicate window of the stream the hooks
// pipeline's effects land in, so that a redo of work whose holder died
// after its effect would land past it.
func (h *harness) outage(ctx context.Context, f fault) {
	until := time.Now().Add(f.down)
	for _, r := range h.replicas {
		r.hold(until)
	}
	n := 0
	for _, r := range h.replicas {
		if c := r.current(); c != nil && c.running() {
			if c.kill() == nil {
				n++
			}
			c.signal(syscall.SIGCONT)
		}
	}
	h.outageKills.Add(int64(n))
	h.events.add(event{kind: evOutage, replica: -1, detail: fmt.Sprintf("%d processes killed, all down for %v", n, f.down.Round(time.Millisecond))})
	sleepCtx(ctx, time.Until(until))
	h.events.add(event{kind: evOutageOver, replica: -1})
}

// blip makes the ledger unavailable for a moment: on a cluster, the ledger
// bucket's stream leader steps down (an election follows); on one server,
// every running replica's ledger refuses writes for f.down (SIGUSR2 to an
// oncegate_faults build, as a full disk would).
func (h *harness) blip(ctx context.Context, f fault) {
	if len(h.nodes) > 0 {
		h.serverMu.Lock() // not while a node is down: the election needs a quorum
		defer h.serverMu.Unlock()
		if err := h.stepDown(ctx, ledgerStream); err != nil {
			h.missed(f, "ledger leader step-down: "+err.Error())
			return
		}
		h.events.add(event{kind: evBlip, replica: -1, detail: "step-down of the leader of " + ledgerStream})
		if err := h.healCluster(ctx); err != nil && ctx.Err() == nil {
			h.fatal(fmt.Errorf("after the step-down of the leader of %s: %w", ledgerStream, err))
		}
		return
	}
	// Wait for a replica to be up (not during an outage, say).
	deadline := time.Now().Add(60 * time.Second)
	n := 0
	for n == 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		for _, r := range h.replicas {
			// Only a process that is consuming has its ledger wrapped: a
			// SIGUSR2 before that would end it.
			if c := r.current(); c != nil && c.running() && !c.paused.Load() && strings.Contains(c.output(), "msg=consuming") && c.signal(syscall.SIGUSR2) == nil {
				n++
			}
		}
		if n == 0 {
			sleepCtx(ctx, 100*time.Millisecond)
		}
	}
	if n == 0 {
		h.missed(f, "ledger blip: no replica running")
		return
	}
	h.events.add(event{kind: evBlip, replica: -1, detail: fmt.Sprintf("ledger writes refused for %v on %d replicas", f.down.Round(time.Millisecond), n)})
}

// missed records that fault f could not be applied, and why.
func (h *harness) missed(f fault, why string) {
	h.events.add(event{kind: evMissed, replica: f.replica, detail: why})
}
