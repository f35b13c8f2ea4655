package consumer

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// A gate's chain and what runs through it: the Trigger, the stages that
// decide its verdict, and the verdict that settle.go carries out. The
// chain's diagram is in doc.go.

// Trigger is one delivery on its way through a gate.
type Trigger struct {
	msg    jetstream.Msg
	meta   *jetstream.MsgMetadata // parsed on first use; nil when the message has none
	parsed bool

	key    dedupe.Key // the ledger's key
	intent dedupe.Key // the intent key the effect carries: key, or for an outbox entry the key it dispatches
	fp     dedupe.Fingerprint
	keyed  bool

	claim    ledger.Claim
	token    atomic.Uint64 // the lease's fencing token, renewed while the work runs
	lost     atomic.Bool   // the lease was taken over while the work ran
	leaseEnd atomic.Int64  // when the lease may run out, on mono's clock; 0 without a lease

	body     []byte // what the effect sends: the trigger, or the step's effect body
	modelRef string // the LLM cache entry the body was built from

	pend      *sink.Pending // an async JetStream publish in flight
	res       sink.Result
	effected  bool // the effect is known to exist at its target
	sent      bool // the effect was handed to its sink: it may exist, whatever the sink said
	committed bool // the ledger holds the result
	dropped   bool // effected by not sending: its resolve went first (lifecycle.go)

	v       verdict
	decided bool

	flight *flight // the work in this process that holds the intent, for a duplicate of it
	// call is t's entry on the board of model calls (answers.go), from its
	// claim to its end, for a replica that takes the intent over and asks
	// for the answer; stepNote is the step's note, what it tells one.
	call     *inFlight
	stepNote []byte

	lm *mileState // the last mile's (render.go); nil on pipelines without it

	tctx context.Context // carries span; nil when tracing is off
	span trace.Span      // the trigger's root span (trace.go); nil when off
	esp  trace.Span      // the effect's span, from send to outcome
}

func newTrigger(m jetstream.Msg) *Trigger {
	return &Trigger{msg: m, body: m.Data()}
}

// metadata returns the message's JetStream metadata, or nil if it has none.
func (t *Trigger) metadata() *jetstream.MsgMetadata {
	if !t.parsed {
		t.meta, _ = t.msg.Metadata()
		t.parsed = true
	}
	return t.meta
}

// ref names the message: its stream and stream sequence, or "?".
func (t *Trigger) ref() string {
	if meta := t.metadata(); meta != nil {
		return meta.Stream + ":" + strconv.FormatUint(meta.Sequence.Stream, 10)
	}
	return "?"
}

// deliveries is the trigger's delivery count, 1 for the first.
func (t *Trigger) deliveries() uint64 {
	if meta := t.metadata(); meta != nil {
		return meta.NumDelivered
	}
	return 1
}

func (t *Trigger) decide(v verdict) {
	t.v = v
	t.decided = true
}

// keyRef returns the trigger's key for a verdict, or nil if it has none.
func (t *Trigger) keyRef() *dedupe.Key {
	if !t.keyed {
		return nil
	}
	k := t.intent
	return &k
}

// Handler runs a stage of the gate, and the rest of the chain after it, on
// a batch of triggers. It decides triggers' verdicts; it never settles them.
type Handler func(ctx context.Context, ts []*Trigger)

// stage is one link of a gate's chain, as a middleware is of a Watermill
// router's: a value with its own fields that wraps the rest of the chain.
// Its name is the one the chain's diagram gives it (doc.go).
type stage interface {
	name() string
	wrap(next Handler) Handler
}

// chain builds the handler that runs stages, the first outermost, around
// last.
func chain(last Handler, stages []stage) Handler {
	h := last
	for i := len(stages) - 1; i >= 0; i-- {
		h = stages[i].wrap(h)
	}
	return h
}

// open returns the triggers not yet decided, reusing ts's array.
func open(ts []*Trigger) []*Trigger {
	out := ts[:0:0]
	for _, t := range ts {
		if !t.decided {
			out = append(out, t)
		}
	}
	return out
}

// verdict is how a trigger is settled: the one decision the gate makes.
type verdict struct {
	kind   settleKind
	delay  time.Duration  // for nak; 0 leaves it to the retry schedule
	reason outcome.Reason // for dead
	err    error          // for dead and nak, for the logs and the dead letter
	key    *dedupe.Key
	reply  []byte // the stored result, for HeaderReply
	token  uint64 // the lease the work held, for a nak after a claim
	// attempts is how many times the work has been claimed, this claim
	// included, for a nak after a claim: the last one is dead-lettered.
	attempts uint32
	// waits marks a nak of a message that waits on work another holds (a
	// duplicate of held work, or work taken over from it): it is not
	// failing, and is never dead-lettered as exhausted.
	waits bool
	// last is the reason a nak on the last try is dead-lettered with; the
	// default is exhausted.
	last outcome.Reason
	// schedule, for a nak of a failed effect, is the effect's own retry
	// schedule (config.EffectRetry) by the intent's tries, in place of the
	// pipeline's.
	schedule func(n int) time.Duration
}

type settleKind uint8

const (
	settleAck settleKind = iota
	settleNak
	settleDead
)

func (k settleKind) String() string {
	switch k {
	case settleAck:
		return "ack"
	case settleNak:
		return "nak"
	case settleDead:
		return "dead"
	}
	return "settleKind(" + strconv.Itoa(int(k)) + ")"
}

func ack(k *dedupe.Key, reply []byte) verdict { return verdict{kind: settleAck, key: k, reply: reply} }

func nak(k *dedupe.Key, delay time.Duration, err error) verdict {
	return verdict{kind: settleNak, key: k, delay: delay, err: err}
}

// wait is the verdict on a message whose intent another message's work
// holds: it comes back after delay, to find the work committed, failed, or
// abandoned (then it takes the work over). It is never acked while the work
// is held: the holder's message may be a stale delivery whose message was
// acked already, and then this one is all that carries the intent.
func wait(k *dedupe.Key, delay time.Duration, err error) verdict {
	return verdict{kind: settleNak, key: k, delay: delay, err: err, waits: true}
}

func dead(k *dedupe.Key, r outcome.Reason, err error) verdict {
	return verdict{kind: settleDead, key: k, reason: r, err: err}
}
