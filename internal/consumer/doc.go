// Package consumer takes triggers off JetStream and runs each pipeline's
// gate: key → window → ledger claim → model step → effect → commit, then
// one settle that acks, naks or dead-letters.
//
// # The gate
//
// Every path — a trigger on its own, a batch of triggers on a gate pipeline,
// an outbox entry on its way to a one-shot sink — runs a chain of stages
// over a batch of triggers (gate.go). Each stage is a value with its own
// fields that wraps the rest of the chain, as a Watermill middleware wraps
// a handler. A pipeline's gate and its dispatcher's (outbox.go) run these
// chains, each stage in the file of what it does:
//
//	pipeline:   key → [before-ack] → filter → window → order → [after-commit] → claim → [after-claim] → recall → step → [after-answer] → route → [after-route] → [after-effect] → effect
//	dispatcher: key → [before-ack] → approval → [after-commit] → claim → [after-dispatch-claim] → order-entries → [after-effect] → effect
//
// The stages:
//
//   - key (gate.go): the intent key, and the status with key.status.
//   - filter (render.go): the when: condition; a trigger filtered out is acked.
//   - window (window.go): the in-memory window of keys seen; in gate-window
//     mode, the only guard.
//   - order (lifecycle.go): a resolve waits for its firing.
//   - claim (claim.go, lease.go): the ledger claim, the leases held while the
//     rest runs, and the commit of what the effect delivered.
//   - recall (routes.go): a route decision recorded before, and skip_when.
//   - step (effect.go, step.go): the model step.
//   - route (routes.go, render.go): the route chosen and recorded, and its
//     effects rendered.
//   - approval (approval.go): an outbox entry's delay and approval.
//   - order-entries (lifecycle.go): a firing's and its resolve's outbox
//     entries kept in order.
//   - effect (effect.go, fanout.go): the effect sent; the end of the chain.
//
// A stage a pipeline does not need is not in its chain: filter without
// when:, order without key.status and a ledger, claim in gate-window mode,
// recall without routes or skip_when, step without a model step, route
// without the last mile (render.go), order-entries for a dispatcher of a
// pipeline without key.status. The bracketed stages are the fault points
// (package faults): only builds with the oncegate_faults tag have them, and
// only where a switch arms them. TestChainDiagram builds every kind of
// pipeline and holds their chains to these two lines.
//
// A stage decides the triggers it can (a duplicate, a failure) and passes
// the rest on; the claim stage holds the leases of what it passed on,
// renewing them and marking the messages in progress, and commits what the
// effect stage delivered when the chain returns. The policy (policy.go)
// says what the outcomes mean for the effect the gate guards, and counts
// them (counts.go). settle.go then carries out the one verdict of each
// trigger; it is the only code in the package that acks, naks or terms a
// message.
//
// # Deliveries and dead letters
//
// A message is acked only once its intent is settled: its effect committed
// (by this message or another), or its work failed and dead-lettered. A
// duplicate that finds the work held by another message is not acked: it
// waits (a nak with a delay) and comes back to find the work committed, or
// abandoned, and then takes it over. Acking it would trust the holder's
// message to come back if the work fails, and that message may already be
// acked: a delivery that stalls in a process past its ack wait is
// delivered again, and the redelivery can be acked while the stale one
// goes on to claim the work.
//
// The server's consumers deliver without limit. The package counts the
// tries itself: with a ledger, the intent's claims (whichever message made
// them); without one, a message's deliveries. A failure on a pipeline's
// last try dead-letters the trigger, and an intent whose last try died with
// its process is dead-lettered with reason exhausted when it comes back.
// A message that only waits on work another holds is never exhausted.
// Nothing is dropped without a dead letter.
//
// # Lifecycles
//
// With key.status, a firing and its resolve share an identity, and the
// ledger orders them (lifecycle.go): a resolve waits for its firing's
// outcome up to key.resolve_wait, takes its firing's recorded route, and
// a firing whose resolve went out first sends nothing more. A failed
// effect is retried on the effect's own schedule (config.EffectRetry),
// not the pipeline's redelivery backoff.
//
// # Streams
//
// [Consumer.Setup] creates the trigger stream (kept until a max age, or a
// work queue that drops each trigger once acked), the effect, dead-letter and
// outbox streams, and each pipeline's durable consumer. It refuses, with
// [ErrIncompatibleStream], a stream whose retention differs from the
// configuration's, and an effect stream whose duplicate window is shorter
// than its pipeline's redelivery horizon.
//
// # Faults
//
// Builds with the oncegate_faults tag have a stage at each faults.Point
// that can kill the process there (ONCEGATE_CRASH_AT), for the crash tests
// and the soak (crash.go); other builds have no such stage. Package faults
// owns the switches.
package consumer
