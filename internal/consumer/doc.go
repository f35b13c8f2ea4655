// Package consumer takes triggers off JetStream and runs each pipeline's
// gate: key → window → ledger claim → model step → effect → commit, then
// one settle that acks, naks or dead-letters.
//
// # The gate
//
// Every path — a trigger on its own, a batch of triggers on a gate pipeline,
// an outbox entry on its way to a one-shot sink — runs the same chain of
// stages (gate.go), each a [Middleware] over a batch of triggers. A stage
// decides the triggers it can (a duplicate, a failure) and passes the rest
// on; the claim stage holds the leases of what it passed on, renewing them
// and marking the messages in progress, and commits what the effect stage
// delivered when the chain returns. settle.go then carries out the one
// verdict of each trigger; it is the only code in the package that acks,
// naks or terms a message.
//
// # Deliveries and dead letters
//
// The server's consumers deliver without limit. The package counts
// deliveries itself: a failure on a pipeline's last delivery dead-letters
// the trigger, and a trigger whose last delivery died with its process comes
// back once more to be dead-lettered with reason exhausted, or acked if its
// work was committed. Nothing is dropped without a dead letter.
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
// Builds with the oncegate_faults tag have a stage at each [Point] that can
// kill the process there (ONCEGATE_CRASH_AT), for the crash tests and the
// soak; other builds have no such stage.
package consumer
