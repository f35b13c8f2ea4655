//go:build oncegate_faults

package faults

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/history"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Enabled reports whether this build reads the fault switches: true.
const Enabled = true

// Env lists the ONCEGATE_* variables this build reads as fault switches
// (an entry ending in '*' names a prefix), for the configuration to leave
// alone (config.EnvAllowlist); a normal build refuses them.
var Env = []string{
	"ONCEGATE_CRASH_*",  // the crash points (Armed, Crash)
	"ONCEGATE_BROKEN",   // a deliberate bug (AckEarly, CommitTokenCheck)
	"ONCEGATE_CLOCK_*",  // the ledger clock jump (Clock)
	"ONCEGATE_FAULTS_*", // the ledger history and outage switches (WrapLedger)
}

var (
	crashPoint Point
	crashNth   int64
	crashHits  atomic.Int64
	broken     = os.Getenv("ONCEGATE_BROKEN")
)

func init() {
	spec := os.Getenv("ONCEGATE_CRASH_AT")
	if spec == "" {
		return
	}
	point, nth, _ := strings.Cut(spec, ":")
	n, err := strconv.ParseInt(nth, 10, 64)
	if err != nil || n < 1 {
		n = 1
	}
	crashPoint, crashNth = Point(point), n
}

// Armed reports whether ONCEGATE_CRASH_AT names p.
func Armed(p Point) bool { return p == crashPoint }

// Crash counts a trigger, whose intent key is key, passing p, and SIGKILLs
// the process if p is armed and this is its Nth pass.
func Crash(p Point, key string) {
	if p == crashPoint && crashHits.Add(1) == crashNth {
		fmt.Fprintf(os.Stderr, "oncegate_faults: SIGKILL at %s (hit %d), key %s\n", p, crashNth, key)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// AckEarly reports whether ONCEGATE_BROKEN=ack-early asks the consumer to
// ack each trigger right after its claim, before the effect: a deliberate
// bug, so that the soak can show its checker notices lost work.
func AckEarly() bool { return broken == "ack-early" }

// Poison acts out fault, the poison a trigger carries in its HeaderFault
// header (ref and key name it), in its work at the effect: a panic, which
// the gate must recover and settle as the trigger's failure, or the
// process's death, after which the ledger must count the try.
func Poison(fault, ref, key string) {
	switch fault {
	case "panic":
		panic("oncegate_faults: poison trigger " + ref)
	case "kill":
		fmt.Fprintf(os.Stderr, "oncegate_faults: SIGKILL by poison trigger %s, key %s\n", ref, key)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// CommitTokenCheck returns check, the ledger stores' check of a Commit's
// token, or with ONCEGATE_BROKEN=commit-skips-token one broken on purpose:
// it commits without checking the fencing token, over a record another
// holder has taken over, committed or failed (it still refuses a key with
// no record). The soak's linearizability check of the ledger histories
// must fail the run.
func CommitTokenCheck(check func(dedupe.Key, *ledger.Record, uint64) error) func(dedupe.Key, *ledger.Record, uint64) error {
	if broken != "commit-skips-token" {
		return check
	}
	return func(key dedupe.Key, cur *ledger.Record, _ uint64) error {
		if cur == nil {
			return fmt.Errorf("%w: %v", ledger.ErrNotFound, key)
		}
		return nil
	}
}

// Clock, with ONCEGATE_CLOCK_JUMP set to a duration, is the ledger's
// clock: the system clock plus an offset that grows by that duration on
// every SIGUSR1. The soak harness jumps a replica's clock so that it sees
// live leases as expired and takes work over from healthy holders: the
// fencing tokens must keep that harmless. Without the switch it is nil.
func Clock() ledger.Clock {
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

// WrapLedger wraps the ledger for the soak harness:
//
//	ONCEGATE_FAULTS_LEDGER_HISTORY=path  append every ledger operation's invocation and response to path (package history)
//	ONCEGATE_FAULTS_LEDGER_OUTAGE=d      on each SIGUSR2, refuse every ledger write for d (a ledger blip)
//
// The outage sits in front of the recorder: a refused write never reaches
// the store, and is not in the history. Without either switch it is nil.
func WrapLedger() func(ledger.Ledger) (ledger.Ledger, error) {
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
