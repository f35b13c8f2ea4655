//go:build oncegate_faults

package main

import (
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// faultClock, in oncegate_faults builds with ONCEGATE_CLOCK_JUMP set to a
// duration, is the ledger's clock: the system clock plus an offset that
// grows by that duration on every SIGUSR1. The soak harness jumps a
// replica's clock so that it sees live leases as expired and takes work
// over from healthy holders: the fencing tokens must keep that harmless.
func faultClock() ledger.Clock {
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
