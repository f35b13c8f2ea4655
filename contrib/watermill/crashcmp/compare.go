package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/contrib/watermill/internal/wmtest"
)

// Middlewares the child can run.
const (
	ModeWatermill = "watermill-deduplicator" // middleware.Deduplicator, in-memory repository
	ModeOncegate  = "oncegate"               // wmonce on a Badger ledger
	ModeReconcile = "oncegate+reconcile"     // the same, and the handler reconciles a taken-over intent
)

// Kill points.
const (
	KillAfterEffect = "after-effect"
	KillBeforeAck   = "before-ack"
)

// Scenario is one middleware and one kill point.
type Scenario struct {
	Mode, Kill string
}

// Scenarios are the ones Compare runs.
var Scenarios = []Scenario{
	{ModeWatermill, KillAfterEffect},
	{ModeWatermill, KillBeforeAck},
	{ModeOncegate, KillAfterEffect},
	{ModeOncegate, KillBeforeAck},
	{ModeReconcile, KillAfterEffect},
}

// Result is what one scenario did: the effects per intent.
type Result struct {
	Scenario Scenario
	Keys     int
	Killed   []string       // the intents a child was killed at
	Effects  map[string]int // effects per intent (payload)
}

// PerKilled returns the effects of each killed intent.
func (r Result) PerKilled() []int {
	var out []int
	for _, k := range r.Killed {
		out = append(out, r.Effects[k])
	}
	return out
}

// PerOther returns the effects of each intent no child was killed at.
func (r Result) PerOther() []int {
	var out []int
	for i := range r.Keys {
		if p := payload(i); !slices.Contains(r.Killed, p) {
			out = append(out, r.Effects[p])
		}
	}
	return out
}

// Total is the number of effects.
func (r Result) Total() int {
	n := 0
	for _, v := range r.Effects {
		n += v
	}
	return n
}

// spread prints counts as "1" when they agree and "min-max" otherwise.
func spread(xs []int) string {
	if len(xs) == 0 {
		return "-"
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}

func payload(i int) string { return fmt.Sprintf(`{"order":%d}`, i) }

// Compare runs every scenario: keys intents, kills of them (spread out)
// each killing one child. The child is exe with args, run with the
// environment that makes it a child.
func Compare(ctx context.Context, exe string, args []string, keys, kills int) ([]Result, error) {
	if kills < 1 || kills > keys {
		return nil, fmt.Errorf("kills %d must be between 1 and keys %d", kills, keys)
	}
	var out []Result
	for _, sc := range Scenarios {
		r, err := runScenario(ctx, exe, args, sc, keys, kills)
		if err != nil {
			return out, fmt.Errorf("%s, %s: %w", sc.Mode, sc.Kill, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func runScenario(ctx context.Context, exe string, args []string, sc Scenario, keys, kills int) (Result, error) {
	dir, err := os.MkdirTemp("", "crashcmp")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	s, stop, err := wmtest.StartServer(filepath.Join(dir, "nats"))
	if err != nil {
		return Result{}, err
	}
	defer stop()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		return Result{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return Result{}, err
	}
	if err := wmtest.Setup(ctx, js, topic, ackWait); err != nil {
		return Result{}, err
	}
	pub, err := wmtest.Publisher(nc)
	if err != nil {
		return Result{}, err
	}
	for i := range keys {
		if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(payload(i)))); err != nil {
			return Result{}, err
		}
	}

	res := Result{Scenario: sc, Keys: keys}
	effects := filepath.Join(dir, "effects")
	env := []string{
		childEnv + "=1",
		envURL + "=" + s.ClientURL(),
		envMode + "=" + sc.Mode,
		envLedger + "=" + filepath.Join(dir, "ledger"),
		envEffects + "=" + effects,
	}
	for j := range kills {
		key := payload((j*keys)/kills + keys/(2*kills))
		res.Killed = append(res.Killed, key)
		cmd := exec.CommandContext(ctx, exe, args...)
		cmd.Env = append(os.Environ(), append(env, envKill+"="+sc.Kill, envKillKey+"="+key)...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			return res, err
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err = <-done:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-done
			return res, fmt.Errorf("the child to be killed at %s still ran after 60s", key)
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			return res, fmt.Errorf("the child to be killed at %s ended otherwise: %v", key, err)
		}
	}

	// The last child runs until every message is acked and every intent
	// has had its effect.
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return res, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	err = wmtest.WaitFor(2*time.Minute, "every message acked", func() (bool, error) {
		select {
		case err := <-done:
			done <- err
			return false, fmt.Errorf("the last child exited: %v", err)
		default:
		}
		res.Effects, err = countEffects(effects)
		if err != nil || len(res.Effects) < keys {
			return false, err
		}
		return wmtest.Settled(ctx, js, topic)
	})
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
	}
	if err != nil {
		return res, err
	}
	res.Effects, err = countEffects(effects)
	return res, err
}

// countEffects counts the lines of the effects file per payload.
func countEffects(path string) (map[string]int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]int{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for line := range strings.Lines(string(b)) {
		out[strings.TrimSuffix(line, "\n")]++
	}
	return out, nil
}
