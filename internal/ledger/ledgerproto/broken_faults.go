//go:build oncegate_faults

package ledgerproto

import (
	"fmt"
	"os"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// In builds with the oncegate_faults tag (tests and the soak only),
// ONCEGATE_BROKEN=commit-skips-token breaks every store's Commit on
// purpose: it commits without checking the fencing token, over a record
// another holder has taken over, committed or failed (it still refuses a
// key with no record). The soak's linearizability check of the ledger
// histories must fail the run.
func init() {
	if os.Getenv("ONCEGATE_BROKEN") == "commit-skips-token" {
		checkCommitToken = func(key dedupe.Key, cur *ledger.Record, _ uint64) error {
			if cur == nil {
				return fmt.Errorf("%w: %v", ledger.ErrNotFound, key)
			}
			return nil
		}
	}
}
