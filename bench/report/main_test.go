package main

import (
	"strings"
	"testing"
)

// TestRestartAndStormPlots: the report draws bench/restart's timings and
// bench/storm's table from their printed output.
func TestRestartAndStormPlots(t *testing.T) {
	restart := `
crash with 200 replayable effects and one one-shot send in flight (Badger ledger, lease 30s, ack wait 15s)
  ready                   620ms after the new process started
  first effect           -166ms after ready (target ≤ 2s)  ok
  all settled            14.2s after ready (target ≤ ack wait + 5s = 20s)  ok
  replayable           200 intents, 200 with an effect (260 calls, the dead process's included)  ok

readiness: from ` + "`consumer run`" + ` to /readyz (embedded NATS, Badger ledger)
          0 records        410ms
      20000 records        352ms
`
	p := restartPlot(restart)
	if p == nil {
		t.Fatal("no restart plot")
	}
	var n int
	for _, l := range strings.Split(restart, "\n") {
		if restartLine.MatchString(l) {
			n++
		}
	}
	if n != 5 {
		t.Errorf("%d timing lines matched; want 5 (ready, first effect, all settled, two readiness cells)", n)
	}

	storm := `
        run  Oncegate limit/min  intents  answered  model calls  429s  429 % of calls  dead letters  effects  per intent  re-sent  deliveries  naks  elapsed  vs ideal
    unpaced                 off     1000      1000         1342   342           25.48             0     1000       1.000        0        1342   342    21.3s     1.02×
      paced                1080     1000      1000         1000     0            0.00             0     1000       1.000        0        1000     0    56.1s     1.01×
`
	h, rows := table(storm, "run")
	if len(rows) != 2 || col(h, "elapsed") < 0 {
		t.Fatalf("storm table: header %q, %d rows; want the elapsed column and 2 rows", h, len(rows))
	}
	if v, ok := num(rows[1][col(h, "elapsed")]); !ok || v != 56.1 {
		t.Errorf("elapsed %q read as %v, %v; want 56.1", rows[1][col(h, "elapsed")], v, ok)
	}
	if v, ok := num(rows[0][col(h, "vs ideal")]); !ok || v != 1.02 {
		t.Errorf("vs ideal read as %v, %v; want 1.02", v, ok)
	}
	if bars(storm, "run", "elapsed", "t") == nil {
		t.Error("no storm plot")
	}
}
