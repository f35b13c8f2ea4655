package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/oncegate/oncegate/internal/freeport"
)

// child is one child process: its output goes to a log file shared by its
// restarts.
type child struct {
	name    string
	cmd     *exec.Cmd
	started time.Time
	ended   time.Time     // when it was reaped; set before done is closed
	done    chan struct{} // closed once the process is reaped
	state   *os.ProcessState
	logPath string
	logOff  int64 // where this start's output begins in the log

	killed   atomic.Bool  // we sent SIGKILL
	killedAt atomic.Int64 // when we first sent it (Unix nanoseconds), or 0
	paused   atomic.Bool  // we sent SIGSTOP and no SIGCONT yet
}

// kill sends SIGKILL and records that the soak sent it, and when (the
// first time): the process runs none of its code after that, though it may
// be reaped later (a thread in a system call, on a slow disk, holds up its
// exit).
func (c *child) kill() error {
	c.killed.Store(true)
	c.killedAt.CompareAndSwap(0, time.Now().UnixNano())
	return c.signal(syscall.SIGKILL)
}

// died returns when the process stopped running its code: when the soak
// sent it SIGKILL, if it did before the process was reaped, or else when it
// was reaped. Call once done is closed.
func (c *child) died() time.Time {
	if ns := c.killedAt.Load(); ns != 0 {
		if k := time.Unix(0, ns); k.Before(c.ended) {
			return k
		}
	}
	return c.ended
}

// reapLag returns how long after the soak's SIGKILL the process was
// reaped, if the soak killed it. Call once done is closed.
func (c *child) reapLag() (time.Duration, bool) {
	ns := c.killedAt.Load()
	if ns == 0 {
		return 0, false
	}
	return max(c.ended.Sub(time.Unix(0, ns)), 0), true
}

func (c *child) running() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

func (c *child) signal(sig syscall.Signal) error { return c.cmd.Process.Signal(sig) }

// output returns what this start of the process wrote to its log.
func (c *child) output() string {
	f, err := os.Open(c.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(c.logOff, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, 16<<20))
	return string(b)
}

// lastLine returns the last non-empty line the process wrote.
func (c *child) lastLine() string {
	lines := strings.Split(strings.TrimSpace(c.output()), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// exitSignal returns the signal that ended the process, or 0.
func (c *child) exitSignal() syscall.Signal {
	if c.state == nil {
		return 0
	}
	if ws, ok := c.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}

// procs tracks every live child, so that none outlives the harness.
type procs struct {
	mu   sync.Mutex
	live map[*child]struct{}
	env  []string
}

func newProcs() *procs {
	// The children get our environment less any ONCEGATE_* variable: the
	// consumer treats unknown ones as configuration errors, and known
	// ones would change the configuration under test.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ONCEGATE_") {
			env = append(env, kv)
		}
	}
	return &procs{live: map[*child]struct{}{}, env: env}
}

func (ps *procs) start(name, bin string, args, extraEnv []string, logPath string) (*child, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own copy of the descriptor
	fmt.Fprintf(f, "=== soak: %s starting at %s: %s %s %s\n", name, time.Now().Format(time.RFC3339Nano),
		strings.Join(extraEnv, " "), filepath.Base(bin), strings.Join(args, " "))
	off, _ := f.Seek(0, io.SeekEnd)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append([]string(nil), ps.env...), extraEnv...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	c := &child{name: name, cmd: cmd, done: make(chan struct{}), logPath: logPath, logOff: off}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.live == nil {
		return nil, errors.New("soak: shutting down")
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c.started = time.Now()
	ps.live[c] = struct{}{}
	go func() {
		cmd.Wait()
		c.ended = time.Now()
		c.state = cmd.ProcessState
		ps.mu.Lock()
		delete(ps.live, c)
		ps.mu.Unlock()
		close(c.done)
	}()
	return c, nil
}

// killAll kills every live child and waits for them, and refuses new ones.
func (ps *procs) killAll() {
	ps.mu.Lock()
	var cs []*child
	for c := range ps.live {
		cs = append(cs, c)
	}
	ps.live = nil
	ps.mu.Unlock()
	for _, c := range cs {
		c.signal(syscall.SIGKILL)
		c.signal(syscall.SIGCONT)
	}
	for _, c := range cs {
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			fmt.Fprintf(os.Stderr, "soak: %s (pid %d) did not exit after SIGKILL\n", c.name, c.cmd.Process.Pid)
		}
	}
}

// stopChild sends SIGTERM and waits up to grace for the exit, then kills.
func stopChild(c *child, grace time.Duration) {
	if c == nil {
		return
	}
	c.signal(syscall.SIGCONT)
	c.signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		c.kill()
		<-c.done
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// freePort returns a loopback port nobody listens on right now, for a
// process that binds it later and again at each restart: outside the
// kernel's ephemeral range, never twice (freeport; seed 68500087: a node
// that could not start, "can't listen to the monitor port … address
// already in use").
func freePort() (int, error) { return freeport.Port() }

// natsServer is the nats-server child process, restarted on its store.
type natsServer struct {
	h    *harness
	name string // of the process; "nats-server" when empty
	bin  string
	args []string
	port int
	log  string
	mu   sync.Mutex
	cur  *child
}

func (s *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

func (s *natsServer) current() *child {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// start starts the server and waits until it accepts connections.
func (s *natsServer) start(ctx context.Context) error {
	name := s.name
	if name == "" {
		name = "nats-server"
	}
	c, err := s.h.procs.start(name, s.bin, s.args, nil, s.log)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.cur = c
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		if !c.running() {
			return fmt.Errorf("nats-server exited at start: %s", c.lastLine())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats-server does not accept connections on port %d after 60s", s.port)
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// restart stops the server with sig, keeps it down for down, and starts it
// again on the same store and port.
func (s *natsServer) restart(ctx context.Context, sig syscall.Signal, down time.Duration) error {
	c := s.current()
	if sig == syscall.SIGKILL {
		c.kill()
	} else {
		c.signal(sig)
	}
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.kill()
		<-c.done
	}
	if !sleepCtx(ctx, down) {
		return ctx.Err()
	}
	var err error
	for range 5 { // the port may linger for a moment after a kill
		if err = s.start(ctx); err == nil || ctx.Err() != nil {
			return err
		}
		sleepCtx(ctx, time.Second)
	}
	return err
}

// replica is one consumer replica: a supervisor restarts its process
// whenever it dies, until stop.
type replica struct {
	h       *harness
	idx     int
	dataDir string
	log     string

	mu       sync.Mutex
	cur      *child
	lives    []*child  // every process started, in order
	armed    string    // ONCEGATE_CRASH_AT for the next start
	holdTill time.Time // no start before then (an outage)
	holds    int       // calls of hold: a start they overlap is killed
	stopping bool

	starts       atomic.Int64
	failedStarts atomic.Int64 // exits with an error status
	crashKills   atomic.Int64 // deaths at an armed crash point
	poisonKills  atomic.Int64 // deaths by a poison trigger's SIGKILL
	panics       atomic.Int64 // deaths of a panic
	crashes      atomic.Int64 // other deaths after it was consuming, not of the soak's doing
	lastFailure  atomic.Value // string
	done         chan struct{}
}

func (r *replica) name() string { return fmt.Sprintf("replica-%d", r.idx) }

// diedAfter returns when the process of the replica that was running at t
// died (see child.died), and how (see cause), if it ended; ok is false if
// it has not ended. If no process of the replica ran at t, between two
// lives, it returns the death of the last one before t, which is then
// before t: an answer that came then was made for a process already gone
// (the model answers a call whose caller died), and nobody received it.
func (r *replica) diedAfter(t time.Time) (ended time.Time, how string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last *child // the last process started at or before t
	for _, c := range r.lives {
		if c.started.After(t) {
			break
		}
		last = c
		select {
		case <-c.done:
		default:
			continue // still running: it did not end
		}
		if !c.ended.Before(t) {
			return c.died(), c.cause(), true
		}
	}
	if last != nil {
		select {
		case <-last.done: // it ended before t, and none ran at t
			return last.died(), last.cause(), true
		default:
		}
	}
	return time.Time{}, "", false
}

// cause says how an ended process of a replica died: killed by the soak
// (a scheduled SIGKILL, an outage), at an armed crash point, by a poison
// trigger, or otherwise (a drain, a panic).
func (c *child) cause() string {
	out := c.output()
	switch {
	case c.killed.Load():
		return "killed by the soak"
	case strings.Contains(out, string(crashMarker)):
		return "crash point"
	case strings.Contains(out, string(poisonMarker)):
		return "poison trigger"
	}
	return "other"
}

func (r *replica) current() *child {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// hold keeps the replica from starting again before t.
func (r *replica) hold(t time.Time) {
	r.mu.Lock()
	r.holdTill = t
	r.holds++
	r.mu.Unlock()
}

// arm makes the next start die at a point of the flow.
func (r *replica) arm(spec string) {
	r.mu.Lock()
	r.armed = spec
	r.mu.Unlock()
}

func (r *replica) supervise(ctx context.Context) {
	defer close(r.done)
	for {
		r.mu.Lock()
		if r.stopping || ctx.Err() != nil {
			r.mu.Unlock()
			return
		}
		if wait := time.Until(r.holdTill); wait > 0 {
			r.mu.Unlock()
			if !sleepCtx(ctx, wait) {
				return
			}
			continue
		}
		holds := r.holds
		env := r.h.consumerEnv(r.idx)
		if r.armed != "" {
			env = append(env, "ONCEGATE_CRASH_AT="+r.armed)
			r.armed = ""
		}
		r.mu.Unlock()
		args := []string{"run", "-config", r.h.configPath, "-data", r.dataDir, "-nats-url", r.h.natsURL(), "-metrics", "off"}
		c, err := r.h.procs.start(r.name(), r.h.consumerBin, args, env, r.log)
		if err != nil {
			r.lastFailure.Store(err.Error())
			if !sleepCtx(ctx, time.Second) {
				return
			}
			continue
		}
		r.starts.Add(1)
		r.mu.Lock()
		r.cur = c
		r.lives = append(r.lives, c)
		// An outage that began while this process was starting found no
		// process to kill: this one must not outlive it.
		if r.holds != holds && time.Now().Before(r.holdTill) {
			c.kill()
			c.signal(syscall.SIGCONT)
		}
		r.mu.Unlock()
		<-c.done
		r.mu.Lock()
		r.cur = nil
		stopping := r.stopping
		r.mu.Unlock()
		r.classifyExit(c)
		if stopping {
			return
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return
		}
	}
}

var (
	crashMarker  = []byte("oncegate_faults: SIGKILL at ")
	poisonMarker = []byte("oncegate_faults: SIGKILL by poison trigger")
)

// classifyExit records why a process of the replica ended. A death the
// soak did not cause, once the process was consuming, counts against the
// crash-loop bound: a poison trigger's SIGKILL is allowed for (up to
// max_deliver times per trigger), a panic or any other death is not.
func (r *replica) classifyExit(c *child) {
	out := c.output()
	consuming := strings.Contains(out, "msg=consuming")
	switch sig := c.exitSignal(); {
	case c.killed.Load():
		// A kill of ours, recorded when it was sent.
	case sig == syscall.SIGKILL && bytes.Contains([]byte(out), crashMarker):
		i := bytes.Index([]byte(out), crashMarker)
		line := out[i+len(crashMarker):]
		if j := strings.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		point, _, _ := strings.Cut(line, " ")
		r.crashKills.Add(1)
		r.h.events.add(event{kind: evCrashPoint, replica: r.idx, detail: point})
	case sig == syscall.SIGKILL && bytes.Contains([]byte(out), poisonMarker):
		r.poisonKills.Add(1)
		r.h.events.add(event{kind: evPoisonKill, replica: r.idx, detail: lineWith(out, poisonMarker)})
	case !consuming && (sig != 0 || c.state != nil && c.state.ExitCode() != 0):
		// It did not start (the server was down, say): it is started again.
		r.failedStarts.Add(1)
		if sig != 0 {
			r.lastFailure.Store("died of " + sig.String())
		} else {
			r.lastFailure.Store(c.lastLine())
		}
	case strings.Contains(out, "\npanic: ") || strings.HasPrefix(out, "panic: "):
		r.panics.Add(1)
		r.lastFailure.Store("panicked: " + lineWith(out, []byte("panic: ")))
		r.h.events.add(event{kind: evPanic, replica: r.idx, detail: lineWith(out, []byte("panic: "))})
	case sig != 0 || c.state != nil && c.state.ExitCode() != 0:
		r.crashes.Add(1)
		why := c.lastLine()
		if sig != 0 {
			why = "died of " + sig.String()
		}
		r.lastFailure.Store(why)
		r.h.events.add(event{kind: evCrash, replica: r.idx, detail: why})
	}
}

// lineWith returns the first line of out that contains marker.
func lineWith(out string, marker []byte) string {
	i := strings.Index(out, string(marker))
	if i < 0 {
		return ""
	}
	line := out[i:]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	return strings.TrimSpace(line)
}

// waitRunning returns the replica's process once it has been up for at
// least minUp and is not paused, or nil after timeout.
func (r *replica) waitRunning(ctx context.Context, minUp, timeout time.Duration) *child {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if c := r.current(); c != nil && c.running() && !c.paused.Load() && time.Since(c.started) >= minUp {
			return c
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return nil
		}
	}
	return nil
}

// stop drains the replica with SIGTERM and ends its supervisor.
func (r *replica) stop() {
	r.mu.Lock()
	r.stopping = true
	c := r.cur
	r.mu.Unlock()
	stopChild(c, 40*time.Second)
	<-r.done
}
