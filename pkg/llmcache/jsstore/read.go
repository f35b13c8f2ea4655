package jsstore

import (
	"context"

	"github.com/oncegate/oncegate/internal/kvlast"
)

// A KeyValue.Get is a direct get, which any replica of a bucket may answer,
// including one that has not caught up (a node just restarted, or cut off):
// it may miss an answer that is stored. A hit from such a replica is still
// the answer, but a miss that would send the call to the model, and a
// budget read that a compare-and-set depends on, are read from the stream
// leader, which has every acknowledged write (package kvlast).

// leaderRead reads key from the stream leader of r's bucket, retrying what
// may pass by itself. found is false when the key has no value (never
// written, expired, or its last message a delete marker); rev is then that
// marker's sequence, or 0.
func (s *Store) leaderRead(ctx context.Context, r *kvlast.Reader, key string) (v []byte, rev uint64, found bool, err error) {
	err = retry(ctx, func(ctx context.Context) error {
		e, err := r.Get(ctx, key)
		v, rev, found = e.Value, e.Revision, e.Found
		return err
	})
	return v, rev, found, err
}
