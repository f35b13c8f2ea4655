package consumer_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if they leave goroutines behind.
// Badger's and the NATS client's background goroutines are stopped by the
// fixtures' cleanups.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// slowTest skips a test of a few seconds or more (a lease run out, an
// outage waited through) in the fast tier, go test -short; the full tier
// runs it.
func slowTest(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("slow: run without -short")
	}
}
