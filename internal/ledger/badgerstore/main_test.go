package badgerstore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if they leave goroutines behind.
//
// Badger itself leaves two goroutines running when Open fails after it has
// started its caches (TestBadgerEncryption opens with a wrong key on
// purpose): they have no owner to stop them. Those are ignored; any other
// goroutine left over fails the run.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/dgraph-io/badger/v4.(*DB).monitorCache"),
		goleak.IgnoreTopFunction("github.com/dgraph-io/ristretto/v2/z.(*AllocatorPool).freeupAllocators"),
	)
}
