package consumer

import (
	"context"

	"github.com/oncegate/oncegate/internal/faults"
)

// crashStage is the stage at a fault point (package faults): it SIGKILLs
// the process the Nth time a trigger passes its point (ONCEGATE_CRASH_AT),
// or, at faults.AfterClaim, acks each trigger before its effect
// (ONCEGATE_BROKEN=ack-early).
type crashStage struct {
	p        faults.Point
	ackEarly bool
	out      bool                  // hit on the way back out of the stages after it
	on       func(t *Trigger) bool // the triggers that pass p
}

// crashAt is the stage at fault point p, or nil when no switch arms p:
// always in builds without the oncegate_faults tag.
func crashAt(p faults.Point) stage {
	ackEarlyHere := faults.AckEarly() && p == faults.AfterClaim
	if !faults.Armed(p) && !ackEarlyHere {
		return nil
	}
	out, on := reaches(p)
	return &crashStage{p: p, ackEarly: ackEarlyHere, out: out, on: on}
}

func (s *crashStage) name() string { return string(s.p) }

func (s *crashStage) hit(ts []*Trigger) {
	for _, t := range ts {
		if !s.on(t) {
			continue
		}
		if s.ackEarly {
			ackEarly(t.msg)
		}
		faults.Crash(s.p, t.intent.String())
	}
}

func (s *crashStage) wrap(next Handler) Handler {
	return func(ctx context.Context, ts []*Trigger) {
		if !s.out {
			s.hit(ts)
		}
		next(ctx, ts)
		if s.out {
			s.hit(ts)
		}
	}
}

// reaches reports which triggers pass p, and whether they do on the way
// in to the stages after it (false) or on the way back out of the stages
// before it (true).
func reaches(p faults.Point) (out bool, on func(t *Trigger) bool) {
	all := func(*Trigger) bool { return true }
	switch p {
	case faults.AfterEffect:
		return true, func(t *Trigger) bool { return t.effected }
	case faults.AfterCommit:
		return true, func(t *Trigger) bool { return t.committed && t.claim.Lease.Token != 0 }
	case faults.BeforeAck:
		return true, func(t *Trigger) bool { return t.decided && t.v.kind == settleAck && t.keyed }
	}
	return false, all
}

// poison acts out the fault t carries, if any (faults.Poison), in t's
// work at the effect; only builds with the oncegate_faults tag do.
func poison(t *Trigger) {
	if faults.Enabled {
		faults.Poison(t.msg.Headers().Get(faults.HeaderFault), t.ref(), t.intent.String())
	}
}
