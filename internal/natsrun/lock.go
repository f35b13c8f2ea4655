package natsrun

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/oncegate/oncegate/internal/dirlock"
)

// lockDir locks dir for one embedded server (dirlock.Lock on lockFile):
// another server on dir, in this process or another, is ErrStoreInUse.
// Where flock is not available it returns nil and two servers on one store
// directory are not detected.
func lockDir(dir string) (*os.File, error) {
	f, err := dirlock.Lock(dir, lockFile)
	if he, ok := errors.AsType[*dirlock.HeldError](err); ok {
		who := he.Holder()
		if rest, ok := strings.CutPrefix(who, "another holder"); ok {
			who = "another embedded server" + rest
		}
		return nil, fmt.Errorf("%w: %s uses %s", ErrStoreInUse, who, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("natsrun: locking store directory: %w", err)
	}
	return f, nil
}
