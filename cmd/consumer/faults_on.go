//go:build oncegate_faults

package main

import (
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/history"
)

// The fault switches this build reads, for the soak harness: configuration
// leaves them alone here, and refuses them in a normal build.
func init() {
	config.EnvAllowlist = append(config.EnvAllowlist,
		"ONCEGATE_BROKEN",   // a deliberate bug (internal/consumer, internal/ledger/ledgerproto)
		"ONCEGATE_CLOCK_*",  // the ledger clock jump (faultClock)
		"ONCEGATE_FAULTS_*", // the ledger history and outage switches (faultLedger)
	)
}

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

// faultLedger, in oncegate_faults builds, wraps the ledger for the soak
// harness:
//
//	ONCEGATE_FAULTS_LEDGER_HISTORY=path  append every ledger operation's invocation and response to path (package history)
//	ONCEGATE_FAULTS_LEDGER_OUTAGE=d      on each SIGUSR2, refuse every ledger write for d (a ledger blip)
//
// The outage sits in front of the recorder: a refused write never reaches
// the store, and is not in the history.
func faultLedger() func(ledger.Ledger) (ledger.Ledger, error) {
	path := os.Getenv("ONCEGATE_FAULTS_LEDGER_HISTORY")
	outage, err := time.ParseDuration(os.Getenv("ONCEGATE_FAULTS_LEDGER_OUTAGE"))
	if err != nil {
		outage = 0
	}
	if path == "" && outage <= 0 {
		return nil
	}
	return func(l ledger.Ledger) (ledger.Ledger, error) {
		if path != "" {
			var err error
			if l, err = history.Open(path, l, history.Options{}); err != nil {
				return nil, err
			}
		}
		if outage > 0 {
			var start func(time.Duration)
			l, start = history.NewOutage(l, nil)
			ch := make(chan os.Signal, 1)
			signal.Notify(ch, syscall.SIGUSR2)
			go func() {
				for range ch {
					start(outage)
					fmt.Fprintf(os.Stderr, "oncegate_faults: ledger writes refused for %v\n", outage)
				}
			}()
		}
		return l, nil
	}
}
