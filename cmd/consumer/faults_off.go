//go:build !oncegate_faults

package main

import (
	"github.com/oncegate/oncegate/internal/ledger"
)

// faultClock is nil in normal builds: the ledger uses the system clock.
func faultClock() ledger.Clock { return nil }

// faultLedger is nil in normal builds: the ledger is not wrapped.
func faultLedger() func(ledger.Ledger) (ledger.Ledger, error) { return nil }
