//go:build oncegate_faults

package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// faultHook, in builds with the oncegate_faults tag (tests only), kills the
// process with SIGKILL the Nth time the flow reaches a point, as told by
// ONCEGATE_CRASH_AT=point:N (N defaults to 1).
func faultHook() func(consumer.Point, dedupe.Key) {
	spec := os.Getenv("ONCEGATE_CRASH_AT")
	if spec == "" {
		return nil
	}
	point, nth, _ := strings.Cut(spec, ":")
	n, err := strconv.Atoi(nth)
	if err != nil || n < 1 {
		n = 1
	}
	var hits atomic.Int64
	return func(p consumer.Point, k dedupe.Key) {
		if string(p) != point || hits.Add(1) != int64(n) {
			return
		}
		fmt.Fprintf(os.Stderr, "oncegate_faults: SIGKILL at %s (hit %d), key %s\n", p, n, k)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// brokenAckEarly, in oncegate_faults builds, turns on the deliberate
// ack-before-effect bug when ONCEGATE_BROKEN=ack-early, so that the soak
// harness can show that its checker catches lost work.
func brokenAckEarly() bool { return os.Getenv("ONCEGATE_BROKEN") == "ack-early" }

// faultClock, in oncegate_faults builds with ONCEGATE_CLOCK_JUMP set to a
// duration, is the ledger's clock: the system clock plus an offset that
// grows by that duration on every SIGUSR1. The soak harness jumps a
// replica's clock so that it sees live leases as expired and takes work
// over from healthy holders: the fencing tokens must keep that harmless.
func faultClock() dedupe.Clock {
	jump, err := time.ParseDuration(os.Getenv("ONCEGATE_CLOCK_JUMP"))
	if err != nil || jump <= 0 {
		return nil
	}
	c := &jumpClock{}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	go func() {
		for range ch {
			off := time.Duration(c.off.Add(int64(jump)))
			fmt.Fprintf(os.Stderr, "oncegate_faults: ledger clock jumped by %v (now %v ahead)\n", jump, off)
		}
	}()
	return c
}

type jumpClock struct{ off atomic.Int64 }

func (c *jumpClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }
