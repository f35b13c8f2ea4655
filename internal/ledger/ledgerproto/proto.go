// Package ledgerproto is the ledger's protocol and record encoding, shared
// by every store (the Badger ledger and the JetStream KV ledger) so that
// stores cannot disagree on it. It is internal: users see the protocol
// only through the ledger.Ledger contract.
//
// A store reads the current record (nil if absent), calls one of Decide,
// Extended, Noted, Committed or Failed with the ledger's clock reading, and writes
// the returned record back atomically: in the transaction it read in, or by
// compare-and-set on the revision it read. If the write loses a race, the
// store reads again and calls again.
package ledgerproto

import (
	"bytes"
	"fmt"
	"time"

	"github.com/oncegate/oncegate/internal/faults"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Normalize validates o and fills in its defaults. Ledger implementations
// call it once, in their constructor.
func Normalize(o *ledger.Options) error {
	if o.Retention < 0 || o.MaxResultBytes < 0 || o.ClockSkew < 0 {
		return fmt.Errorf("%w: negative retention, result size or clock skew", ledger.ErrInvalidLedger)
	}
	if o.Mismatch > ledger.MismatchReject {
		return fmt.Errorf("%w: unknown mismatch policy %d", ledger.ErrInvalidLedger, o.Mismatch)
	}
	if o.Retention == 0 {
		o.Retention = ledger.DefaultRetention
	}
	if o.MaxResultBytes == 0 {
		o.MaxResultBytes = ledger.DefaultMaxResultBytes
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	return nil
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Decide decides Begin's verdict on cur, the record the store read. write
// reports whether c.Record must be written back. An expired cur counts as
// absent.
func Decide(o *ledger.Options, key dedupe.Key, cur *ledger.Record, opts ledger.BeginOptions, now time.Time) (c ledger.Claim, write bool, err error) {
	if err := ValidBegin(opts); err != nil {
		return ledger.Claim{}, false, err
	}
	cur = Live(cur, now)
	var token uint64 = 1
	var note []byte
	if cur != nil && cur.State == ledger.StateCleared {
		// A failure a person cleared is new work, fenced above every
		// holder the failed work had: a stalled one of them must not
		// commit over the new holder. What the failed work noted (a
		// model's answer, paid for) is the new work's to reuse.
		token, note, cur = cur.Token+1, cur.Note, nil
	}
	if cur == nil {
		rec := ledger.Record{Key: key, State: ledger.StatePending, Owner: opts.Owner, Token: token, LeaseUntil: now.Add(opts.Lease),
			Attempts: 1, Fingerprint: opts.Fingerprint, Created: now, Updated: now, Expires: now.Add(o.Retention), Note: note}
		return ledger.Claim{Status: ledger.StatusNew, Lease: ledger.Lease{Token: token, Until: rec.LeaseUntil}, Record: rec}, true, nil
	}
	rec := *cur
	mismatch := rec.Fingerprint != opts.Fingerprint
	if mismatch && o.Mismatch == ledger.MismatchReject {
		return ledger.Claim{Record: rec, Mismatch: true}, false,
			fmt.Errorf("%w: key %v was begun with payload %v, now %v", ledger.ErrFingerprintMismatch, key, rec.Fingerprint, opts.Fingerprint)
	}
	switch rec.State {
	case ledger.StateCommitted:
		return ledger.Claim{Status: ledger.StatusCommitted, Mismatch: mismatch, Record: rec}, false, nil
	case ledger.StateFailed:
		return ledger.Claim{Status: ledger.StatusFailed, Mismatch: mismatch, Record: rec}, false, nil
	}
	released, previous := rec.Reason == ledger.ReasonReleased, rec.Owner
	until := rec.LeaseUntil
	if !released {
		// The holder may be sending until its lease ends by its own
		// clock, which may be behind this one by ClockSkew.
		until = until.Add(o.ClockSkew)
	}
	if now.Before(until) {
		return ledger.Claim{Status: ledger.StatusHeld, RetryAfter: until.Sub(now), Mismatch: mismatch, Record: rec}, false, nil
	}
	// The holder's lease ran out, or it released the claim: take the work
	// over with a higher token.
	rec.Reason = ""
	rec.Token++
	rec.Owner = opts.Owner
	rec.LeaseUntil = now.Add(opts.Lease)
	rec.Attempts++
	rec.Updated = now
	rec.Expires = now.Add(o.Retention)
	if mismatch {
		rec.Mismatches++
	}
	return ledger.Claim{Status: ledger.StatusTakenOver, Lease: ledger.Lease{Token: rec.Token, Until: rec.LeaseUntil}, Mismatch: mismatch, Released: released, Previous: previous, Record: rec}, true, nil
}

// Extended returns cur with its lease renewed for d from now, if token is
// current; with d = 0, released (ledger.ReasonReleased).
func Extended(o *ledger.Options, key dedupe.Key, cur *ledger.Record, token uint64, d time.Duration, now time.Time) (ledger.Record, ledger.Lease, error) {
	if d < 0 {
		return ledger.Record{}, ledger.Lease{}, fmt.Errorf("%w: lease %v must not be negative", ledger.ErrInvalidLedger, d)
	}
	if err := CheckToken(key, Live(cur, now), token); err != nil {
		return ledger.Record{}, ledger.Lease{}, err
	}
	rec := *cur
	rec.LeaseUntil, rec.Updated, rec.Expires = now.Add(d), now, now.Add(o.Retention)
	rec.Reason = ""
	if d == 0 {
		rec.Reason = ledger.ReasonReleased
	}
	return rec, ledger.Lease{Token: token, Until: rec.LeaseUntil}, nil
}

// Noted returns cur with note in place of its note and its lease renewed
// for d from now (with d = 0, the lease as it was), if token is current.
func Noted(o *ledger.Options, key dedupe.Key, cur *ledger.Record, token uint64, note []byte, d time.Duration, now time.Time) (ledger.Record, ledger.Lease, error) {
	if d < 0 {
		return ledger.Record{}, ledger.Lease{}, fmt.Errorf("%w: lease %v must not be negative", ledger.ErrInvalidLedger, d)
	}
	if len(note) > o.MaxResultBytes {
		return ledger.Record{}, ledger.Lease{}, fmt.Errorf("%w: a note of %d bytes, limit %d", ledger.ErrResultTooLarge, len(note), o.MaxResultBytes)
	}
	if err := CheckToken(key, Live(cur, now), token); err != nil {
		return ledger.Record{}, ledger.Lease{}, err
	}
	rec := *cur
	if d > 0 {
		rec.LeaseUntil, rec.Reason = now.Add(d), ""
	}
	rec.Updated, rec.Expires = now, now.Add(o.Retention)
	rec.Note = append([]byte(nil), note...)
	return rec, ledger.Lease{Token: token, Until: rec.LeaseUntil}, nil
}

// Committed returns cur committed with result, if token is current.
func Committed(o *ledger.Options, key dedupe.Key, cur *ledger.Record, token uint64, result ledger.Result, now time.Time) (ledger.Record, error) {
	if err := checkResult(o, result); err != nil {
		return ledger.Record{}, err
	}
	if err := checkCommitToken(key, Live(cur, now), token); err != nil {
		return ledger.Record{}, err
	}
	rec := *cur
	result.Committed = now
	rec.State, rec.Result, rec.LeaseUntil, rec.Reason = ledger.StateCommitted, result, time.Time{}, ""
	rec.Updated, rec.Expires = now, now.Add(o.Retention)
	return rec, nil
}

// CommitLanded reports whether cur is the record a Commit with token and
// result leaves: that commit took effect already. A store whose write can
// land while its caller is told otherwise (a replicated write whose
// acknowledgement was lost, or reported as a conflict, in a leader change)
// reads the record again to decide, and must then answer the commit as
// done, not as stale: the token is the caller's own claim, which only its
// holder commits, and the result is the one it asked to store.
func CommitLanded(cur *ledger.Record, token uint64, result ledger.Result) bool {
	return cur != nil && cur.State == ledger.StateCommitted && cur.Token == token &&
		cur.Result.DownstreamID == result.DownstreamID && cur.Result.ModelRef == result.ModelRef &&
		bytes.Equal(cur.Result.Response, result.Response)
}

// FailLanded is CommitLanded for a Fail with token and reason (cut as
// Failed cuts it).
func FailLanded(o *ledger.Options, cur *ledger.Record, token uint64, reason string) bool {
	return cur != nil && cur.State == ledger.StateFailed && cur.Token == token && cur.Reason == cutReason(o, reason)
}

// cutReason cuts a record's reason to MaxResultBytes.
func cutReason(o *ledger.Options, reason string) string {
	if len(reason) > o.MaxResultBytes {
		return reason[:o.MaxResultBytes]
	}
	return reason
}

// Failed returns cur failed for reason (cut to MaxResultBytes), if token is
// current.
func Failed(o *ledger.Options, key dedupe.Key, cur *ledger.Record, token uint64, reason string, now time.Time) (ledger.Record, error) {
	if err := CheckToken(key, Live(cur, now), token); err != nil {
		return ledger.Record{}, err
	}
	rec := *cur
	rec.State, rec.Reason, rec.LeaseUntil = ledger.StateFailed, cutReason(o, reason), time.Time{}
	rec.Updated, rec.Expires = now, now.Add(o.Retention)
	return rec, nil
}

// Live returns cur, or nil if cur is nil or has expired at now: a store that
// deletes expired records lazily must not let them count.
func Live(cur *ledger.Record, now time.Time) *ledger.Record {
	if cur != nil && !cur.Expires.IsZero() && !now.Before(cur.Expires) {
		return nil
	}
	return cur
}

// checkCommitToken is the check of a Commit's token: CheckToken, except in
// an oncegate_faults build asked for a broken ledger (faults.CommitTokenCheck).
var checkCommitToken = faults.CommitTokenCheck(CheckToken)

// CheckToken checks a Commit, Fail or Extend with token against cur, the
// record the store read (nil if absent): it returns an error wrapping
// ledger.ErrNotFound or ledger.ErrStaleToken, or nil.
func CheckToken(key dedupe.Key, cur *ledger.Record, token uint64) error {
	if cur == nil {
		return fmt.Errorf("%w: %v", ledger.ErrNotFound, key)
	}
	if cur.State != ledger.StatePending || cur.Token != token {
		return fmt.Errorf("%w: key %v is %v with token %d; caller has %d", ledger.ErrStaleToken, key, cur.State, cur.Token, token)
	}
	return nil
}

// ValidBegin checks the options of a Begin before anything is read.
func ValidBegin(opts ledger.BeginOptions) error {
	if opts.Lease <= 0 {
		return fmt.Errorf("%w: lease %v must be positive", ledger.ErrInvalidLedger, opts.Lease)
	}
	return nil
}

func checkResult(o *ledger.Options, r ledger.Result) error {
	if n := len(r.Response) + len(r.DownstreamID) + len(r.ModelRef); n > o.MaxResultBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ledger.ErrResultTooLarge, n, o.MaxResultBytes)
	}
	return nil
}
