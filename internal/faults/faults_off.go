//go:build !oncegate_faults

package faults

import (
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Enabled reports whether this build reads the fault switches: false.
const Enabled = false

// Env lists the ONCEGATE_* variables this build reads as fault switches:
// none.
var Env []string

// Armed reports whether a crash is armed at p: never in this build.
func Armed(Point) bool { return false }

// Crash counts a trigger passing p: nothing in this build.
func Crash(Point, string) {}

// AckEarly reports whether triggers are acked right after their claim:
// never in this build.
func AckEarly() bool { return false }

// Poison acts out a trigger's poison: nothing in this build.
func Poison(fault, ref, key string) {}

// CommitTokenCheck returns check: this build's ledger stores check a
// Commit's token.
func CommitTokenCheck(check func(dedupe.Key, *ledger.Record, uint64) error) func(dedupe.Key, *ledger.Record, uint64) error {
	return check
}

// Clock is nil in this build: the ledger uses the system clock.
func Clock() ledger.Clock { return nil }

// WrapLedger is nil in this build: the ledger is not wrapped.
func WrapLedger() func(ledger.Ledger) (ledger.Ledger, error) { return nil }
