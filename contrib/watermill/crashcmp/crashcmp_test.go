package main

import (
	"context"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// TestCrashComparison kills a consumer between its handler's effect and
// the ack, at each kill point, under Watermill's deduplicator and under
// Oncegate's middleware, and checks the effects per intent:
//
//   - Watermill's deduplicator forgets with the process: every killed
//     intent's effect runs twice, whatever the kill point;
//   - Oncegate's middleware runs a killed intent's effect once when the
//     kill came after the commit; after the effect and before the commit it
//     runs it again (as a taken-over intent) unless the handler reconciles,
//     and then once.
//
// Intents no child was killed at have their effect once under both.
func TestCrashComparison(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts consumer processes")
	}
	results, err := Compare(context.Background(), os.Args[0], []string{"-test.run=^$"}, 6, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := map[Scenario]int{
		{ModeWatermill, KillAfterEffect}: 2,
		{ModeWatermill, KillBeforeAck}:   2,
		{ModeOncegate, KillAfterEffect}:  2,
		{ModeOncegate, KillBeforeAck}:    1,
		{ModeReconcile, KillAfterEffect}: 1,
	}
	for _, r := range results {
		w := want[r.Scenario]
		for i, n := range r.PerKilled() {
			if n != w {
				t.Errorf("%s, %s: killed intent %s had %d effects; want %d", r.Scenario.Mode, r.Scenario.Kill, r.Killed[i], n, w)
			}
		}
		for _, n := range r.PerOther() {
			if n != 1 {
				t.Errorf("%s, %s: an intent no child was killed at had %d effects; want 1 (%v)", r.Scenario.Mode, r.Scenario.Kill, n, r.Effects)
				break
			}
		}
		t.Logf("%-22s %-12s killed %d of %d intents: effects per killed intent %v, per other %s, total %d",
			r.Scenario.Mode, r.Scenario.Kill, len(r.Killed), r.Keys, r.PerKilled(), spread(r.PerOther()), r.Total())
	}
	if len(results) != len(want) {
		t.Errorf("%d scenarios ran; want %d", len(results), len(want))
	}
}
