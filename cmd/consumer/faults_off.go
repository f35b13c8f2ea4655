//go:build !oncegate_faults

package main

import (
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// faultHook is nil in normal builds: no crash points.
func faultHook() func(consumer.Point, dedupe.Key) { return nil }

// brokenAckEarly is false in normal builds.
func brokenAckEarly() bool { return false }

// faultClock is nil in normal builds: the ledger uses the system clock.
func faultClock() dedupe.Clock { return nil }
