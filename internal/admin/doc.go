// Package admin is what a person does about Oncegate's work: look up a
// key's ledger record, list pending leases, list and read dead letters,
// redrive them and forget a failed record, and the outbox's approvals.
//
// [Admin] carries the operations out on the stores it is given. A running
// consumer serves it on NATS as a micro service ([Serve]; `nats micro ls`
// lists it), so that the ledger a process owns (Badger) is reached through
// that process and a shared one (JetStream KV) through any replica; the
// command line's inspect, dead, redrive and forget use it through a
// [Client] while a consumer runs, and an Admin on the stores they open
// themselves when none does. Both are an [API], and give the same answers.
//
// # Redrive
//
// A redrive republishes a dead letter to the subject its trigger came on,
// with the trigger's payload and headers and Oncegate-Redrive naming the
// dead letter, after clearing the intent's failed record with
// ledger.Ledger.Clear, which succeeds only while the record is still that
// failure: a concurrent success is never undone, and a committed intent is
// never redone (the redriven trigger finds it committed and is acked as a
// duplicate). It is a dry run unless asked otherwise. A dead letter
// redriven once is marked so (in the KV bucket [MarksBucket], shared by
// every replica and kept across restarts) and is not redriven again unless
// insisted on; its republished trigger has a Nats-Msg-Id of its own per
// redrive, so a redrive retried after a lost answer publishes once. A dead
// letter whose effect's outcome is unknown (outcome.ReasonUnknownOutcome)
// is refused unless the caller states that the effect did not happen, and
// the mark keeps the statement and who made it.
//
// # Forget
//
// Forget clears one failed ledger record, fenced as a redrive's clear is,
// so that the intent's next trigger runs its work anew; it refuses a
// committed or pending record. It holds redrive's guard: a record that
// failed with reason unknown_outcome (a holder stopped mid-effect, and the
// effect may have happened) is refused unless the caller states that the
// effect did not happen ([StatementNotSent]); the cleared record's reason,
// the log line and the reply keep the statement and who made it.
//
// # Who may ask
//
// The service answers whoever can publish to its subjects: with the
// embedded server, the clients that hold its secret; in a deployment, the
// users whose NATS permissions allow its subject prefix
// (config.Admin.Subject). Callers name themselves (their NATS connection's
// name and user, and the OS user); the service logs every change with that
// name, which is what the caller says, not a proof.
package admin
