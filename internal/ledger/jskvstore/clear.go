package jskvstore

import (
	"context"
	"fmt"

	"github.com/oncegate/oncegate/internal/kvbucket"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgerproto"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Clear implements ledger.Ledger. It never deletes the key (a create racing
// a delete marker is not atomic): it writes the cleared record over the
// failed one with a revision-checked update, so a Begin or another Clear
// that wrote the key since the read makes it read again and decide anew.
func (l *Ledger) Clear(ctx context.Context, key dedupe.Key, token uint64, note string) error {
	if l.closed.Load() {
		return ledger.ErrClosed
	}
	ctx, cancel := kvbucket.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	fail := func(err error) error { return wrapErr(fmt.Sprint("clear ", key), err) }
	for range maxConflictRetries {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		cur, rev, err := l.read(ctx, key)
		if err != nil {
			return fail(err)
		}
		rec, write, err := ledgerproto.Cleared(&l.opts.Options, key, cur, token, note, l.opts.Clock.Now())
		if err != nil || !write {
			return err
		}
		_, ok, err := l.write(ctx, &rec, rev)
		if err != nil {
			return fail(err)
		}
		if ok {
			return nil
		}
	}
	return errConflicts("clear", key)
}
