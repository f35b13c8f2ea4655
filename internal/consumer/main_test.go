package consumer_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if they leave goroutines behind.
// Badger's and the NATS client's background goroutines are stopped by the
// fixtures' cleanups.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
