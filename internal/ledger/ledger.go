package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Ledger errors. Store-specific failures (a closed store, a disk that refuses
// writes, an unreachable server) are wrapped with %w and returned as they
// are; the sentinels below are the ledger's own verdicts.
var (
	// ErrNotFound is returned by Get, Commit, Fail and Extend for a key the
	// ledger has no record of (never begun, or expired after Retention).
	ErrNotFound = errors.New("dedupe: no ledger record for key")
	// ErrStaleToken is returned by Commit, Fail and Extend when the caller's
	// fencing token is no longer current: its lease expired and another
	// worker took the work over, or the work was already committed or
	// failed. The caller must not report its effect as the result.
	ErrStaleToken = errors.New("dedupe: fencing token is stale")
	// ErrFingerprintMismatch is returned by Begin under MismatchReject when a
	// key comes back with a different payload fingerprint.
	ErrFingerprintMismatch = errors.New("dedupe: key reused with a different payload")
	// ErrResultTooLarge is returned by Commit for a result larger than the
	// ledger's MaxResultBytes.
	ErrResultTooLarge = errors.New("dedupe: result too large for the ledger")
	// ErrInvalidLedger is wrapped by the error a ledger constructor returns
	// for options it cannot honour.
	ErrInvalidLedger = errors.New("dedupe: invalid ledger options")
	// ErrCorruptRecord is returned when a stored record cannot be decoded.
	ErrCorruptRecord = errors.New("dedupe: corrupt ledger record")
	// ErrClosed is returned by every method of a ledger after Close. It is
	// dedupe.ErrClosed, so that users of the public packages can test for
	// it with errors.Is.
	ErrClosed = dedupe.ErrClosed
	// ErrNotFailed is returned by Clear for a record that is not failed:
	// committed work, which clearing would let happen again, or work in
	// progress, whose holder may be performing its effect.
	ErrNotFailed = errors.New("dedupe: ledger record is not failed")
)

// Ledger is the durable record of each intent: "being done by an owner until
// a deadline", then "done, with this result" or "given up, for this reason".
// It is what makes a side effect happen at most once when everything else
// fails.
//
// The protocol for one unit of work:
//
//	c, err := l.Begin(ctx, key, ledger.BeginOptions{Owner: id, Fingerprint: fp, Lease: 30 * time.Second})
//	switch c.Status {
//	case ledger.StatusCommitted: // done before: return c.Record.Result, ack
//	case ledger.StatusFailed:    // given up before: dead-letter, ack
//	case ledger.StatusHeld:      // another worker is on it: retry after c.RetryAfter
//	case ledger.StatusTakenOver: // its previous holder died: reconcile one-shot effects, then as New
//	case ledger.StatusNew:       // ours: do the effect, keep the lease alive with Extend, then
//		err = l.Commit(ctx, key, c.Lease.Token, result)
//	}
//
// Commit, Fail and Extend succeed only with the current fencing token, so a
// worker that stalled past its lease and woke after another took over cannot
// overwrite the new holder's outcome: it gets ErrStaleToken.
//
// Implementations are safe for concurrent use by multiple goroutines and,
// where the store allows it, by multiple processes. Package ledgertest holds
// the conformance suite every implementation passes.
type Ledger interface {
	// Begin claims key for the caller, or reports why it cannot.
	Begin(ctx context.Context, key dedupe.Key, opts BeginOptions) (Claim, error)
	// Extend renews a lease held with token for d from now, and returns the
	// lease to use from then on (its token may differ). With d = 0 it
	// releases the claim: the holder gives the work back undone, the lease
	// ends now, and the next Begin takes the work over at once with
	// Claim.Released set (ReasonReleased on the pending record says so).
	// A holder whose work may have happened, or half happened, must not
	// release it so: it ends its lease with a positive d (a nanosecond)
	// instead, and the next Begin is a plain takeover, told to reconcile.
	Extend(ctx context.Context, key dedupe.Key, token uint64, d time.Duration) (Lease, error)
	// Note stores note in the pending record of key held with token, in
	// place of the note it had, and renews the lease for d from now, as
	// Extend does; the returned lease is the one to use from then on. A
	// note is what the work produced on its way to its effect that a
	// retry, a takeover or a redrive must find instead of producing it
	// again: a model's answer, paid for. It survives the process's crash
	// once Note returns (a store that one process owns may not wait for
	// the disk: a power loss may lose it, and the work produces it
	// again), and is kept with the record through
	// takeovers, Commit, Fail and Clear, until the record expires. With
	// d = 0 the lease is left as it is (and a release stays a release):
	// what a process that no longer holds the claim uses to leave what it
	// paid for where the holder will find it. note is at most
	// MaxResultBytes (ErrResultTooLarge).
	Note(ctx context.Context, key dedupe.Key, token uint64, note []byte, d time.Duration) (Lease, error)
	// Commit records the work as done with result. It is durable when
	// Commit returns.
	Commit(ctx context.Context, key dedupe.Key, token uint64, result Result) error
	// Fail records the work as given up, for reason. Later Begins return
	// StatusFailed.
	Fail(ctx context.Context, key dedupe.Key, token uint64, reason string) error
	// Get returns the record of key.
	Get(ctx context.Context, key dedupe.Key) (Record, error)
	// Pending lists the records whose work is in progress, or was when its
	// holder stopped renewing it.
	Pending(ctx context.Context) iter.Seq2[Record, error]
	// Clear is a person's control over work given up: it turns key's
	// failed record into a cleared one, which Begin treats as absent (the
	// next Begin is StatusNew, with a fencing token above every token the
	// key had), provided the record is still the failure the caller read:
	// failed, with fencing token token. So a concurrent success is never
	// undone and committed work is never redone: a committed or pending
	// record is ErrNotFailed, a failure with another token ErrStaleToken,
	// no record ErrNotFound. Clearing a record that is already cleared
	// at token does nothing and returns nil, so a retried Clear succeeds.
	// note (who cleared it, and why) is kept in the cleared record's
	// Reason, before the failure's own. A store that may not delete keys
	// (the JetStream KV ledger) writes the cleared record in place of the
	// failed one.
	Clear(ctx context.Context, key dedupe.Key, token uint64, note string) error
	// Close releases the ledger. It does not close a store the caller
	// passed in.
	Close() error
}

// BeginOptions are the caller's side of a claim.
type BeginOptions struct {
	// Owner names the worker, for inspection: a host and process, a pod.
	Owner string
	// Fingerprint is the payload's fingerprint, compared with the one the
	// record was begun with.
	Fingerprint dedupe.Fingerprint
	// Lease is how long the claim holds without Extend. It must be positive.
	Lease time.Duration
	// Volatile says the claim need not survive a power loss: the effect it
	// guards is replayable at a sink that dedupes by the key, so if the
	// claim is lost, doing the effect again is harmless while the sink's
	// duplicate window lasts. A ledger that one process owns (the Badger
	// ledger) then writes the claim, and its renewals, without waiting for
	// the disk, saving an fsync per claim: the claim survives the process's
	// crash, with its attempt count and creation time, so that a retry
	// still counts the try and can still tell whether a redo would land
	// past the sink's window. A ledger shared by processes (the JetStream
	// KV ledger) treats every claim alike. Never set it for a one-shot
	// effect: its retry must find the claim to know to reconcile, whatever
	// failed.
	Volatile bool
}

// Status is Begin's verdict.
type Status uint8

const (
	// StatusNew means the caller holds a new lease on work nobody began.
	StatusNew Status = iota + 1
	// StatusCommitted means the work was done; Claim.Record.Result has the
	// stored result. Do nothing else.
	StatusCommitted
	// StatusHeld means another worker holds a live lease; retry after
	// Claim.RetryAfter.
	StatusHeld
	// StatusTakenOver means a previous holder's lease expired without a
	// commit: it died or stalled. The caller now holds the work with a
	// higher fencing token. The effect may or may not have happened: a
	// one-shot effect must be reconciled (ask the world) before it is sent.
	StatusTakenOver
	// StatusFailed means the work was given up; Claim.Record.Reason says why.
	StatusFailed
)

func (s Status) String() string {
	switch s {
	case StatusNew:
		return "new"
	case StatusCommitted:
		return "committed"
	case StatusHeld:
		return "held"
	case StatusTakenOver:
		return "taken-over"
	case StatusFailed:
		return "failed"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Claim is the result of Begin.
type Claim struct {
	// Status is Begin's verdict.
	Status Status
	// Lease is the caller's lease, for StatusNew and StatusTakenOver.
	Lease Lease
	// RetryAfter is the time left on the other holder's lease, for
	// StatusHeld.
	RetryAfter time.Duration
	// Mismatch reports that the record was begun with a different payload
	// fingerprint: the same intent, reworded.
	Mismatch bool
	// Released reports, for StatusTakenOver, that the previous holder
	// released its claim (Extend with d = 0), saying that the work was not
	// done, rather than stopping or letting its lease run out: there is
	// nothing to reconcile.
	Released bool
	// Previous is, for StatusTakenOver, the owner whose claim was taken
	// over (the record's Owner before the takeover): a caller may ask it
	// for what it did before it was taken over.
	Previous string
	// Record is the record as Begin left it.
	Record Record
}

// Lease is a claim's fencing token and deadline.
type Lease struct {
	Token uint64    // the fencing token Commit, Fail and Extend must present
	Until time.Time // when the lease runs out without Extend
}

// State is where a record stands.
type State uint8

const (
	// StatePending is work begun and not finished.
	StatePending State = iota + 1
	// StateCommitted is work done, with its result.
	StateCommitted
	// StateFailed is work given up, with the reason.
	StateFailed
	// StateCleared is a failure a person cleared (Ledger.Clear): Begin
	// treats it as absent, and fences the new work above its token.
	StateCleared
)

func (s State) String() string {
	switch s {
	case StatePending:
		return "pending"
	case StateCommitted:
		return "committed"
	case StateFailed:
		return "failed"
	case StateCleared:
		return "cleared"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Record is what the ledger stores for one key.
type Record struct {
	Key   dedupe.Key // the intent's key
	State State      // where the work stands
	// Owner is the worker that holds or last held the lease.
	Owner string
	// Token is the current fencing token. It only grows.
	Token uint64
	// LeaseUntil is the holder's deadline, while pending.
	LeaseUntil time.Time
	// Attempts counts the claims: 1 for the first, one more per takeover.
	Attempts uint32
	// Fingerprint is the payload fingerprint the work was begun with.
	Fingerprint dedupe.Fingerprint
	// Mismatches counts the takeovers that came with a different payload
	// fingerprint. (A Begin that finds the work held or done reports a
	// mismatch in Claim.Mismatch and writes nothing.)
	Mismatches uint32
	// Created and Updated are when the record was first written and last
	// changed.
	Created, Updated time.Time
	// Expires is when the record is forgotten: Retention after Updated.
	Expires time.Time
	// Result is the outcome of committed work.
	Result Result
	// Reason is why failed work was given up; for a cleared record, who
	// cleared it and why, then the failure's reason; for a pending record
	// its holder released undone, ReasonReleased.
	Reason string
	// Note is what the work stored on its way (Ledger.Note), kept
	// through takeovers, the commit, a failure and its clearing.
	Note []byte
}

// Result is what committed work produced: enough for a retry to answer as
// the first attempt did, without doing anything.
type Result struct {
	// DownstreamID is the id the side effect's target gave the work: a
	// ticket number, a message id, a charge id.
	DownstreamID string
	// ModelRef refers to the model output the effect was built from (an LLM
	// cache key).
	ModelRef string
	// Response is the response to return to later retries.
	Response []byte
	// Committed is when the work was committed; the ledger sets it.
	Committed time.Time
}

// MismatchPolicy says what Begin does when a key returns with a different
// payload fingerprint.
type MismatchPolicy uint8

const (
	// MismatchAccept treats the new payload as the same work, counts it on
	// the record and reports it in Claim.Mismatch. It is right for agents,
	// whose retries regenerate their requests in other words.
	MismatchAccept MismatchPolicy = iota
	// MismatchReject makes Begin fail with ErrFingerprintMismatch, as a
	// payment API rejects an idempotency key reused with other parameters.
	MismatchReject
)

// ReasonReleased is the Reason of a pending record whose holder released
// its claim (Extend with d = 0): the work was not done. A takeover, a
// renewal and a commit clear it.
const ReasonReleased = "released by its holder, undone"

// Ledger defaults.
const (
	// DefaultRetention is how long a record is kept when Options
	// leaves Retention zero. It must outlive the longest retry or re-plan:
	// a record that expires before a late retry arrives lets the effect
	// happen again.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultMaxResultBytes bounds Result.Response and the other result
	// fields together when Options leaves MaxResultBytes zero.
	DefaultMaxResultBytes = 64 << 10
)

// Options configures a ledger. The zero value means the defaults.
type Options struct {
	// Retention is how long a record lives after its last change. The
	// default is DefaultRetention.
	Retention time.Duration
	// MaxResultBytes bounds a committed result. The default is
	// DefaultMaxResultBytes.
	MaxResultBytes int
	// Mismatch is the policy for a key reused with another payload. The
	// default is MismatchAccept.
	Mismatch MismatchPolicy
	// Clock supplies the time for leases and records. The default is the
	// system clock. Leases compare wall-clock times, so workers sharing a
	// ledger need clocks that agree to well within a lease.
	Clock Clock
	// ClockSkew is how far apart the clocks of the workers sharing the
	// ledger may be: a claim is taken over only once its lease has been
	// out for ClockSkew by the taker's clock (a claim its holder released
	// at once). A holder stops sending when its lease ends by its own
	// clock; a taker whose clock runs ahead of it would otherwise take the
	// work over while the holder may still send. Fencing by token does not
	// need it (a stale holder's writes are refused whatever the clocks
	// say), but a taker's decisions about what the holder did do: that it
	// sent nothing more. The default is 0.
	ClockSkew time.Duration
}

// Clock tells the time. A ledger reads time only through its Clock, so
// tests can move it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// WindowKey returns the 64 bits of k that a window (package window) keeps:
// its first 8 bytes, little endian. Distinct keys may share them; the
// ledger, which compares all 128 bits, stays authoritative.
func WindowKey(k dedupe.Key) uint64 { return binary.LittleEndian.Uint64(k[:8]) }
