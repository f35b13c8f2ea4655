package ledgerproto

import (
	"fmt"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Cleared returns cur cleared (ledger.StateCleared), with note before its
// failure's reason, if cur is still failed with token; write is false, and
// err nil, if cur is already cleared at token. Otherwise err wraps
// ledger.ErrNotFound (no live record), ledger.ErrNotFailed (committed or
// pending) or ledger.ErrStaleToken (failed, or cleared, at another token).
func Cleared(o *ledger.Options, key dedupe.Key, cur *ledger.Record, token uint64, note string, now time.Time) (rec ledger.Record, write bool, err error) {
	cur = Live(cur, now)
	switch {
	case cur == nil:
		return ledger.Record{}, false, fmt.Errorf("%w: %v", ledger.ErrNotFound, key)
	case cur.State == ledger.StateCommitted || cur.State == ledger.StatePending:
		return ledger.Record{}, false, fmt.Errorf("%w: key %v is %v", ledger.ErrNotFailed, key, cur.State)
	case cur.Token != token:
		return ledger.Record{}, false, fmt.Errorf("%w: key %v is %v with token %d; caller has %d", ledger.ErrStaleToken, key, cur.State, cur.Token, token)
	case cur.State == ledger.StateCleared:
		return *cur, false, nil
	}
	rec = *cur
	reason := cutReason(o, note+"; the failure was: "+cur.Reason)
	rec.State, rec.Reason, rec.LeaseUntil = ledger.StateCleared, reason, time.Time{}
	rec.Updated, rec.Expires = now, now.Add(o.Retention)
	return rec, true, nil
}
