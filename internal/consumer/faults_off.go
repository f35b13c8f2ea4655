//go:build !oncegate_faults

package consumer

// faultAt is the crash stage at p, which only builds with the
// oncegate_faults tag have.
func faultAt(Point, *settler) Middleware { return nil }

// poison is the poison-trigger fault, which only builds with the
// oncegate_faults tag have.
func poison(*Trigger) {}
