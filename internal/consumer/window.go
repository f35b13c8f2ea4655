package consumer

import (
	"context"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/window"
)

// windowKey is t's key in the window. Under a mismatch policy of reject it
// includes the payload fingerprint, so that a reused key with another
// payload misses the window and reaches the ledger, which refuses it.
func (s *windowStage) key(t *Trigger) uint64 {
	k := ledger.WindowKey(t.key)
	if s.fp {
		k ^= ledger.WindowKey(dedupe.Key(t.fp))*0x9e3779b97f4a7c15 | 1
	}
	return k
}

// windowStage drops the triggers whose key the window has seen.
type windowStage struct {
	g    *gate
	w    *window.Window
	only bool // the window alone decides (gate-window mode)
	fp   bool // the window remembers key and payload (mismatch reject)
}

func (s *windowStage) name() string { return "window" }

func (s *windowStage) wrap(next Handler) Handler {
	g := s.g
	if s.only {
		// The window alone decides: it remembers a key once its effect is
		// out (Add after the effect, not SeenOrAdd before it). A key still
		// at work is not yet a duplicate: acking on its word would trust a
		// delivery that may have stalled past its ack wait and whose message
		// the server delivered again (and this stage may be about to ack
		// that redelivery). Two triggers of one key at work at once both
		// publish, under one Nats-Msg-Id: the effect stream keeps one.
		return func(ctx context.Context, ts []*Trigger) {
			keys := make([]uint64, len(ts))
			seen := make([]bool, len(ts))
			for i, t := range ts {
				keys[i] = s.key(t)
				seen[i] = s.w.Contains(keys[i])
				g.traceWindow(t, seen[i])
				switch {
				case seen[i]:
					g.pol.duplicate(t, outcome.GuardWindow)
					t.decide(ack(t.keyRef(), nil))
				case g.exhausted(t):
					t.decide(dead(t.keyRef(), outcome.ReasonExhausted, g.exhaustedErr(t)))
				}
			}
			pass(ctx, next, ts)
			for i, t := range ts {
				if !seen[i] && t.effected {
					s.w.Add(keys[i])
					g.pol.done(t)
					if !t.decided {
						t.decide(ack(t.keyRef(), nil))
					}
				}
			}
		}
	}
	return func(ctx context.Context, ts []*Trigger) {
		for _, t := range ts {
			seen := s.w.Contains(s.key(t))
			g.traceWindow(t, seen)
			if seen {
				g.pol.duplicate(t, outcome.GuardWindow)
				t.decide(ack(t.keyRef(), nil))
			}
		}
		for _, t := range pass(ctx, next, ts) {
			if t.committed {
				s.w.Add(s.key(t))
			}
		}
	}
}
