//go:build !oncegate_faults

package main

import (
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// faultClock is nil in normal builds: the ledger uses the system clock.
func faultClock() dedupe.Clock { return nil }
