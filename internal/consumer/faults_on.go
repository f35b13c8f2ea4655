//go:build oncegate_faults

package consumer

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// In builds with the oncegate_faults tag (tests and the soak only), the
// gate has a stage at each Point that can crash the process:
//
//	ONCEGATE_CRASH_AT=point:N   SIGKILL the Nth time a trigger passes point (N defaults to 1)
//	ONCEGATE_BROKEN=ack-early   ack each trigger right after its claim, before the effect:
//	                            a deliberate bug, so that the soak can show its checker notices lost work
//
// and a trigger can carry a poison (poison):
//
//	Oncegate-Fault: panic       its work panics when it reaches the effect
//	Oncegate-Fault: kill        the process SIGKILLs itself when the trigger's work reaches the effect
var (
	crashPoint     Point
	crashNth       int64
	crashHits      atomic.Int64
	brokenAckEarly = os.Getenv("ONCEGATE_BROKEN") == "ack-early"
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

func faultAt(p Point, s *settler) Middleware {
	ackEarlyHere := brokenAckEarly && p == AfterClaim
	if p != crashPoint && !ackEarlyHere {
		return nil
	}
	out, on := reaches(p)
	hit := func(ts []*Trigger) {
		for _, t := range ts {
			if !on(t) {
				continue
			}
			if ackEarlyHere {
				ackEarly(t.msg)
			}
			if p == crashPoint && crashHits.Add(1) == crashNth {
				fmt.Fprintf(os.Stderr, "oncegate_faults: SIGKILL at %s (hit %d), key %s\n", p, crashNth, t.intent)
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is on its way
			}
		}
	}
	return func(next Handler) Handler {
		return func(ctx context.Context, ts []*Trigger) {
			if !out {
				hit(ts)
			}
			next(ctx, ts)
			if out {
				hit(ts)
			}
		}
	}
}

// poison acts out the fault t carries, if any, in t's work at the effect:
// a panic, which the gate must recover and settle as t's failure, or the
// process's death, after which the ledger must count the try.
func poison(t *Trigger) {
	switch t.msg.Headers().Get(HeaderFault) {
	case "panic":
		panic("oncegate_faults: poison trigger " + t.ref())
	case "kill":
		fmt.Fprintf(os.Stderr, "oncegate_faults: SIGKILL by poison trigger %s, key %s\n", t.ref(), t.intent)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
