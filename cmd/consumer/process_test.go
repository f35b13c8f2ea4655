package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/faults"
	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/internal/outcome"
)

// These tests run the real consumer binary as a child process, built with
// the oncegate_faults tag so that ONCEGATE_CRASH_AT makes it SIGKILL itself
// at a chosen point of the flow.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func consumerBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the consumer binary")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "oncegate-consumer-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "consumer")
		out, err := exec.Command("go", "build", "-tags", "oncegate_faults", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// child is one consumer process.
type child struct {
	cmd    *exec.Cmd
	stdout *lockedBuffer
	stderr *lockedBuffer
	done   chan error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startChild(t *testing.T, env []string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(consumerBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	c := &child{cmd: cmd, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = c.stdout, c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

// stop sends SIGTERM and waits for a clean exit.
func (c *child) stop(t *testing.T) {
	t.Helper()
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		if err != nil {
			t.Errorf("consumer exited with %v after SIGTERM; stderr:\n%s", err, c.stderr.String())
		}
	case <-time.After(20 * time.Second):
		c.cmd.Process.Kill()
		t.Fatalf("consumer did not drain within 20s of SIGTERM; stderr:\n%s", c.stderr.String())
	}
}

// recorder is an HTTP effect target that honours Idempotency-Key the way
// payment providers do, and records every call.
type recorder struct {
	mu    sync.Mutex
	calls map[string]int // per key
	first map[string][]byte
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	key := req.Header.Get("Idempotency-Key")
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[key]++
	if prev, ok := r.first[key]; ok {
		w.Header().Set("Idempotent-Replayed", "true")
		w.Write(prev)
		return
	}
	resp := []byte(fmt.Sprintf(`{"id":"tkt_%d"}`, len(r.first)+1))
	r.first[key] = resp
	_ = body
	w.Write(resp)
}

func (r *recorder) performed() (effects, calls int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.calls {
		calls += n
	}
	return len(r.first), calls
}

const crashConfig = `
data_dir: %s
metrics: {listen: ""}
log: {level: debug, format: text}
llm: {standin: true}        # the triage, offline
ledger: {lease: 2s}
stream: {duplicates: 30m}  # covers the redelivery horizon of max_deliver 50
pipelines:
  - name: alerts
    subject: triggers.alerts
    key: {fields: [/alert/fingerprint]}
    step:
      name: triage
      prompt: "Triage {{.alert.fingerprint}}"
    effect: {sink: jetstream, subject: effects.alerts}
    ack_wait: 1s
    max_deliver: 50
  - name: tickets
    subject: triggers.tickets
    key: {fields: [/ticket]}
    effect: {sink: http, url: "%s"}
    ack_wait: 1s
    max_deliver: 50
  - name: hooks
    subject: triggers.hooks
    key: {fields: [/hook]}
    effect: {sink: jetstream, subject: effects.hooks}
    ack_wait: 1s
    max_deliver: 50
  - name: messages
    subject: triggers.messages
    key: {fields: [/msg]}
    effect: {sink: http, url: "%s", class: one-shot}
    ack_wait: 1s
    max_deliver: 50
`

// TestCrashAtEachPoint kills the consumer with SIGKILL at each point of the
// flow, restarts it, and checks that every intent has exactly one effect at
// the sinks that honour the key, with no trigger lost.
func TestCrashAtEachPoint(t *testing.T) {
	consumerBinary(t)
	for _, point := range append(faults.Points, faults.AfterDispatchClaim) {
		t.Run(string(point), func(t *testing.T) {
			srv := natstest.RunServer(t)
			_, js := natstest.Connect(t, srv)
			rec := &recorder{calls: map[string]int{}, first: map[string][]byte{}}
			hs := httptest.NewServer(rec)
			t.Cleanup(hs.Close)
			shots := &recorder{calls: map[string]int{}, first: map[string][]byte{}} // one-shot: every call counts
			hs2 := httptest.NewServer(shots)
			t.Cleanup(hs2.Close)
			dir := t.TempDir()
			cfgFile := filepath.Join(dir, "oncegate.yaml")
			if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf(crashConfig, filepath.Join(dir, "data"), hs.URL, hs2.URL)), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"run", "-config", cfgFile, "-nats-url", srv.ClientURL()}

			// The first process sets up the streams, then dies at the 5th
			// time the flow reaches the point.
			first := startChild(t, []string{"ONCEGATE_CRASH_AT=" + string(point) + ":5"}, args...)
			waitFor(t, 20*time.Second, "the consumer's durable consumers", func() bool {
				_, err := js.Consumer(context.Background(), "ONCEGATE", consumer.Durable("tickets"))
				return err == nil
			})
			const n = 20
			for i := range n {
				for d := range 2 { // each intent twice
					publishJSON(t, js, "triggers.alerts", map[string]any{"delivery": d, "alert": map[string]any{"fingerprint": fmt.Sprintf("fp-%02d", i)}})
					publishJSON(t, js, "triggers.tickets", map[string]any{"delivery": d, "ticket": fmt.Sprintf("T-%02d", i), "title": "Disk full"})
					publishJSON(t, js, "triggers.messages", map[string]any{"delivery": d, "msg": fmt.Sprintf("M-%02d", i), "text": "Your order shipped"})
					publishJSON(t, js, "triggers.hooks", map[string]any{"delivery": d, "hook": fmt.Sprintf("H-%02d", i)})
				}
			}
			select {
			case err := <-first.done:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("first consumer ended with %v; want SIGKILL at %s; stderr:\n%s", err, point, first.stderr.String())
				}
				if !strings.Contains(first.stderr.String(), "SIGKILL at "+string(point)) {
					t.Fatalf("first consumer died elsewhere; stderr:\n%s", first.stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("the consumer did not reach %s 5 times; stderr:\n%s", point, first.stderr.String())
			}

			second := startChild(t, nil, args...)
			waitFor(t, 60*time.Second, "every trigger settled", func() bool {
				return settledAll(t, js, "alerts", "tickets", "hooks", "messages") && settledDispatch(t, js, "messages")
			})
			second.stop(t)

			// Exactly one effect per intent where the key is honoured.
			msgs := streamSubject(t, js, "ONCEGATE_EFFECTS", "effects.alerts")
			keys := map[string]bool{}
			for _, m := range msgs {
				keys[m.Headers().Get(nats.MsgIdHdr)] = true
			}
			if len(msgs) != n || len(keys) != n {
				t.Errorf("effects.alerts holds %d effects with %d keys; want %d and %d", len(msgs), len(keys), n, n)
			}
			// The batched gate (claims and commits in one write per batch).
			hooks := streamSubject(t, js, "ONCEGATE_EFFECTS", "effects.hooks")
			hookKeys := map[string]bool{}
			for _, m := range hooks {
				hookKeys[m.Headers().Get(nats.MsgIdHdr)] = true
			}
			if len(hooks) != n || len(hookKeys) != n {
				t.Errorf("effects.hooks holds %d effects with %d keys; want %d and %d", len(hooks), len(hookKeys), n, n)
			}
			effects, calls := rec.performed()
			if effects != n {
				t.Errorf("HTTP sink performed %d effects (%d calls); want %d", effects, calls, n)
			}
			// At most one call per one-shot effect; an effect whose dispatch
			// was cut short is reported (unknown_outcome), never resent and
			// never lost.
			unknown := map[string]bool{}
			if streamCount(t, js, "ONCEGATE_DEAD") > 0 {
				for _, m := range streamSubject(t, js, "ONCEGATE_DEAD", "oncegate.dead.messages") {
					if r := m.Headers().Get(consumer.HeaderReason); r != string(outcome.ReasonUnknownOutcome) {
						t.Errorf("one-shot dead letter with reason %s", r)
					}
					unknown[m.Headers().Get(consumer.HeaderKey)] = true
				}
				if n := streamCount(t, js, "ONCEGATE_DEAD"); n != uint64(len(unknown)) {
					t.Errorf("%d dead letters, %d of them one-shot effects of unknown outcome; want no others", n, len(unknown))
				}
			}
			shots.mu.Lock()
			sent := len(shots.calls)
			for k, c := range shots.calls {
				if c > 1 {
					t.Errorf("one-shot effect %s sent %d times", k, c)
				}
			}
			for k := range unknown {
				if _, ok := shots.calls[k]; !ok {
					sent++ // reported, not sent: accounted for
				}
			}
			shots.mu.Unlock()
			if sent != n {
				t.Errorf("one-shot effects sent or reported: %d; want %d", sent, n)
			}
			t.Logf("crash at %s: %d alert effects, %d ticket effects from %d HTTP calls, %d one-shot sent, %d unknown", point, len(msgs), effects, calls, len(shots.calls), len(unknown))
		})
	}
}

func publishJSON(t *testing.T, js jetstream.JetStream, subject string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), subject, b); err != nil {
		t.Fatal(err)
	}
}

func settledAll(t *testing.T, js jetstream.JetStream, pipelines ...string) bool {
	t.Helper()
	for _, p := range pipelines {
		c, err := js.Consumer(context.Background(), "ONCEGATE", consumer.Durable(p))
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		if err != nil || info.NumPending != 0 || info.NumAckPending != 0 {
			return false
		}
	}
	return true
}

func settledDispatch(t *testing.T, js jetstream.JetStream, pipeline string) bool {
	t.Helper()
	c, err := js.Consumer(context.Background(), "ONCEGATE_OUTBOX", consumer.Durable(pipeline)+"-dispatch")
	if err != nil {
		return false
	}
	info, err := c.Info(context.Background())
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}

func streamCount(t *testing.T, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func streamSubject(t *testing.T, js jetstream.JetStream, stream, subject string) []jetstream.Msg {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	want := int(info.State.Subjects[subject])
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for len(out) < want {
		b, err := cons.Fetch(want-len(out), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range b.Messages() {
			out = append(out, m)
			got++
		}
		if got == 0 {
			t.Fatalf("reading %s: %v", subject, b.Error())
		}
	}
	return out
}

// TestPlainNATSPublish runs the consumer with its embedded server, then
// acts as `nats pub` and `nats sub` would: a core NATS publish of a trigger
// and a plain subscription to the effects.
func TestPlainNATSPublish(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, standinEnv, "run", "-data", filepath.Join(dir, "data"), "-listen", "127.0.0.1:0", "-metrics", "off")
	var url string
	waitFor(t, 20*time.Second, "the embedded server's URL", func() bool {
		m := regexp.MustCompile(`embedded NATS at (nats://\S+);`).FindStringSubmatch(c.stdout.String())
		if m != nil {
			url = m[1]
		}
		return url != ""
	})
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	effects := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe("effects.>", effects) // nats sub 'effects.>'
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	payload, err := os.ReadFile("../../examples/alert.json")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the consumer to be consuming", func() bool {
		return strings.Contains(c.stderr.String(), "msg=consuming")
	})
	if err := nc.Publish("triggers.alerts", payload); err != nil { // nats pub triggers.alerts "$(cat examples/alert.json)"
		t.Fatal(err)
	}
	select {
	case m := <-effects:
		var e struct{ Key, Answer string }
		if err := json.Unmarshal(m.Data, &e); err != nil || m.Subject != "effects.alerts" || !strings.Contains(e.Answer, "[stand-in model]") {
			t.Errorf("effect on %s: %s (%v)", m.Subject, m.Data, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no effect within 20s; consumer stderr:\n%s", c.stderr.String())
	}
	c.stop(t)
}

// TestSecondProcessOnOneDataDir: a second consumer on the same data
// directory refuses to start, and says what to do instead.
func TestSecondProcessOnOneDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	args := []string{"run", "-data", dir, "-listen", "127.0.0.1:0", "-metrics", "off"}
	first := startChild(t, standinEnv, args...)
	waitFor(t, 20*time.Second, "the first consumer", func() bool { return strings.Contains(first.stderr.String(), "msg=consuming") })
	second := startChild(t, standinEnv, args...)
	select {
	case err := <-second.done:
		if err == nil || !strings.Contains(second.stderr.String(), "ledger.store: kv") {
			t.Errorf("second consumer: %v; stderr:\n%s", err, second.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the second consumer on one data directory is still running")
	}
	first.stop(t)
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
