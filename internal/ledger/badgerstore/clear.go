package badgerstore

import (
	"context"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgerproto"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Clear implements [ledger.Ledger]. The cleared record is written, and
// synced, in the key's transaction: a Begin of the key in this process
// waits for it, and one that came first leaves a record that is not the
// failure, which Clear then refuses.
func (l *Ledger) Clear(ctx context.Context, key dedupe.Key, token uint64, note string) error {
	return l.update(ctx, key, durableClaim, func(cur *ledger.Record, now time.Time) (*ledger.Record, bool, error) {
		rec, write, err := ledgerproto.Cleared(&l.opts, key, cur, token, note, now)
		if err != nil || !write {
			return nil, false, err
		}
		return &rec, true, nil
	})
}
