package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ingress"
)

var (
	ingressAddrRE = regexp.MustCompile(`webhook ingress at http://([0-9.:]+)/hooks/`)
	natsAddrRE    = regexp.MustCompile(`embedded NATS at (nats://[0-9.:]+)`)
)

// TestIngressSurvivesKill runs the real consumer, embedded NATS and
// webhook ingress in one process, posts signed GitHub deliveries to it
// from concurrent clients that retry as GitHub would (on an error or a
// non-2xx), SIGKILLs the process twice while they post, restarts it each
// time, and then reads the trigger stream: every delivery that got a 2xx
// is there, and no delivery is there twice.
func TestIngressSurvivesKill(t *testing.T) {
	consumerBinary(t)
	dir := t.TempDir()
	const secret = "kill-test-secret"
	// The trigger stream keeps acked triggers (limits, not the default work
	// queue), so that the test can read back every delivery stored.
	env := append([]string{"GITHUB_WEBHOOK_SECRET=" + secret, "ALERTMANAGER_WEBHOOK_TOKEN=kill-test-token", "ONCEGATE_STREAM_RETENTION=limits", "ONCEGATE_STREAM_MAX_AGE=1h"}, standinEnv...)
	args := []string{"run", "-data", filepath.Join(dir, "data"), "-listen", "127.0.0.1:0", "-metrics", "off", "-ingress", "127.0.0.1:0"}
	payload, err := os.ReadFile("../../examples/github-push.json")
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var addr string // the ingress of the running process
	start := func() *child {
		c := startChild(t, env, args...)
		waitFor(t, 30*time.Second, "the ingress to listen", func() bool {
			m := ingressAddrRE.FindStringSubmatch(c.stdout.String())
			if m == nil {
				return false
			}
			mu.Lock()
			addr = m[1]
			mu.Unlock()
			return true
		})
		return c
	}
	kill := func(c *child) {
		c.cmd.Process.Kill()
		err := <-c.done
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("consumer ended with %v; want SIGKILL", err)
		}
	}
	t0 := time.Now()
	proc := start()

	const clients, perClient = 4, 40
	var (
		okCount atomic.Int64
		acked   sync.Map // delivery id → true once it got a 2xx
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		failure atomic.Value
	)
	src := config.Source{Name: "github", Kind: config.KindGitHub}
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Timeout: 10 * time.Second}
			for i := range perClient {
				id := fmt.Sprintf("delivery-%d-%03d", c, i)
				body := bytes.Replace(payload, []byte(`"after": "0000000000000000000000000000000000000000"`),
					fmt.Appendf(nil, `"after": "%040d"`, c*1000+i), 1)
				h, err := ingress.Sign(src, []byte(secret), body, time.Now(), id, "push")
				if err != nil {
					failure.Store(err.Error())
					return
				}
				for {
					select {
					case <-stop:
						return
					default:
					}
					mu.Lock()
					url := "http://" + addr + "/hooks/github"
					mu.Unlock()
					req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
					req.Header = h.Clone()
					resp, err := hc.Do(req)
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode/100 == 2 {
							acked.Store(id, true)
							okCount.Add(1)
							break
						}
						if resp.StatusCode != http.StatusServiceUnavailable {
							failure.Store(fmt.Sprintf("%s answered %d", id, resp.StatusCode))
							return
						}
					}
					time.Sleep(20 * time.Millisecond) // the provider's retry
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	defer func() {
		close(stop)
		<-done
	}()

	for round, at := range []int64{40, 90} {
		waitFor(t, 60*time.Second, fmt.Sprintf("%d acknowledged deliveries", at), func() bool { return okCount.Load() >= at })
		kill(proc)
		t.Logf("kill %d after %d acknowledged deliveries (%s)", round+1, okCount.Load(), time.Since(t0).Round(time.Millisecond))
		proc = start()
	}
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatalf("the clients did not finish; %d acknowledged", okCount.Load())
	}
	if f := failure.Load(); f != nil {
		t.Fatal(f)
	}
	if got := okCount.Load(); got != clients*perClient {
		t.Fatalf("%d deliveries acknowledged; want %d", got, clients*perClient)
	}

	m := natsAddrRE.FindStringSubmatch(proc.stdout.String())
	if m == nil {
		t.Fatalf("no embedded NATS address in:\n%s", proc.stdout.String())
	}
	nc, err := nats.Connect(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	msgs := streamSubject(t, js, "ONCEGATE", "triggers.webhooks")
	seen := map[string]int{}
	for _, msg := range msgs {
		seen[msg.Headers().Get(ingress.HeaderDelivery)]++
	}
	missing, twice := 0, 0
	acked.Range(func(k, _ any) bool {
		if seen[k.(string)] == 0 {
			missing++
		}
		return true
	})
	for id, n := range seen {
		if n > 1 {
			twice++
			t.Errorf("delivery %s is in the stream %d times", id, n)
		}
	}
	if missing > 0 || len(msgs) != clients*perClient {
		t.Errorf("%d acknowledged deliveries missing; the stream holds %d triggers for %d deliveries", missing, len(msgs), clients*perClient)
	}
	t.Logf("(%s) %d deliveries acknowledged across 2 kills; stream holds %d, none missing, %d twice", time.Since(t0).Round(time.Millisecond), okCount.Load(), len(msgs), twice)
	proc.stop(t)
	if strings.Contains(proc.stderr.String(), "panic") {
		t.Errorf("the consumer panicked:\n%s", proc.stderr.String())
	}
}
