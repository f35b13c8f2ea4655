package jskvstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/kvlast"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgerproto"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Reads come in two kinds. KeyValue.Get uses direct gets, which any replica
// of a replicated bucket may answer (and any mirror of it), including one
// that has not caught up. The stream's message-get API is answered by the
// stream leader only, which has every acknowledged write.
//
// A stale read can never make two claims: a write is stored only if the
// revision it expects is still the latest, and a stale read's is not. It can
// give a wrong verdict, though: right after a Begin, a Commit that read "no
// record" would return ErrNotFound. So Extend, Commit, Fail and Get read
// from the leader. Begin's first read may be stale, because every verdict it
// can lead to is safe: "held" or "done" from an older revision only delays a
// retry (done is final, and a lease seen live was live), and a claim made on
// it fails its revision check; after that Begin reads from the leader. A
// "failed" is not final (Clear makes the key new again), so Begin confirms
// it with the leader before it answers it.

// readAny returns the record of key as some replica has it, possibly out of
// date, and its revision. cur is nil if the key has no record, or its
// latest message is a tombstone; rev is then 0.
func (l *Ledger) readAny(ctx context.Context, key dedupe.Key) (cur *ledger.Record, rev uint64, err error) {
	e, err := l.kv.Get(ctx, key.String())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	rec, err := ledgerproto.Decode(key, e.Value())
	if err != nil {
		return nil, 0, err
	}
	return &rec, e.Revision(), nil
}

// read returns the record of key as the stream leader has it, and its
// revision: the stream sequence a write must expect. cur is nil if the key
// has no record; rev is then 0, or the sequence of a tombstone (a delete
// marker, or the marker a bucket with LimitMarkerTTL leaves when a record
// expires), which a write must expect just the same. cur is returned even if
// it has expired on the ledger's clock: the deciding functions treat it as
// absent.
func (l *Ledger) read(ctx context.Context, key dedupe.Key) (cur *ledger.Record, rev uint64, err error) {
	e, err := l.last.Get(ctx, key.String())
	switch {
	case errors.Is(err, kvlast.ErrHeaders):
		return nil, 0, fmt.Errorf("%w: %w", ledger.ErrCorruptRecord, err)
	case err != nil:
		return nil, 0, err
	case !e.Found:
		return nil, e.Revision, nil
	}
	rec, err := ledgerproto.Decode(key, e.Value)
	if err != nil {
		return nil, 0, err
	}
	return &rec, e.Revision, nil
}
