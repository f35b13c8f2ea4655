package cond_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/cond"
	"github.com/oncegate/oncegate/internal/tmpl"
)

// maxAlloc bounds what one evaluation may allocate at the default cost
// limit (the package's doc says about 160 bytes a unit).
const maxAlloc = 16 << 20

// hostileGroup is a 260 KB Alertmanager-like notification, the shape the
// issue found: a group label of 128 KiB and 5,400 small alerts.
func hostileGroup(t testing.TB) any {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"groupLabels":{"alertname":"` + strings.Repeat("A", 128<<10) + `"},"alerts":[`)
	for i := 0; b.Len() < 260<<10; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"labels":{"team":"t%d"}}`, i%10)
	}
	b.WriteString("]}")
	return decode(t, b.String())
}

// hostileLists is a 140 KB trigger of lists that compare equal until
// their last element: A, n small elements to iterate over; probe and M's
// 60 rows, 1,000 elements each; P and Q, a row each in a list of one
// (which CEL sized 1); s, 100 KiB of text.
func hostileLists(t testing.TB, n int) any {
	t.Helper()
	row := func(last int) string { return "[" + strings.Repeat("0,", 999) + fmt.Sprint(last) + "]" }
	rows := make([]string, 60)
	for i := range rows {
		rows[i] = row(1)
	}
	return decode(t, `{"A":[`+strings.TrimSuffix(strings.Repeat("0,", n), ",")+`],"probe":`+row(9)+
		`,"M":[`+strings.Join(rows, ",")+`],"P":[`+row(9)+`],"Q":[`+row(1)+`],"s":"`+strings.Repeat("x", 100<<10)+`"}`)
}

func decode(t testing.TB, s string) any {
	t.Helper()
	v, err := tmpl.DecodeJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// allocated returns what f allocated, in bytes.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestHostileConditionsStop: conditions an operator may well write, on
// triggers anyone who can reach the ingress may send, are stopped at the
// cost limit, having allocated at most maxAlloc: each call is charged by
// the size of what it reads and makes (CEL charged a call on a dyn value
// one unit whatever its size), each comprehension by the elements it may
// visit (CEL charged l.filter(x, false) nothing per element).
func TestHostileConditionsStop(t *testing.T) {
	group, lists, few := hostileGroup(t), hostileLists(t, 2000), hostileLists(t, 300)
	for _, tt := range []struct {
		name, expr string
		trigger    any
	}{
		// 703 MiB in 6.6 s before.
		{"concatenation in a loop", `trigger.alerts.map(a, a.labels.team + trigger.groupLabels.alertname).size() > 0`, group},
		// 18 s before, then true.
		{"membership of long lists", `trigger.A.all(x, !(trigger.probe in trigger.M))`, lists},
		{"equality of deep lists", `trigger.A.all(x, trigger.P != trigger.Q)`, lists},
		{"size of a long string", `trigger.A.all(x, size(trigger.s) > 0)`, lists},
		{"iterations that cost nothing", `trigger.A.filter(x, trigger.A.filter(y, false).size() == 0).size() > 0`, few},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := cond.Compile(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			v := cond.NewVars(tmpl.Input{Trigger: tt.trigger})
			var got bool
			n := allocated(func() { got, err = c.Eval(v) })
			if !errors.Is(err, cond.ErrEval) || !strings.Contains(fmt.Sprint(err), "cost limit") {
				t.Errorf("Eval(%s) = %v, %v; want the cost limit", tt.expr, got, err)
			}
			if n > maxAlloc {
				t.Errorf("Eval(%s) allocated %d MiB; want at most %d MiB", tt.expr, n>>20, maxAlloc>>20)
			}
		})
	}
}

// TestDeadlineStopsEvaluation: with the cost limit out of the way, the
// membership bomb (90 s on a 140 KB trigger before) is interrupted at its
// deadline with ErrLimit.
func TestDeadlineStopsEvaluation(t *testing.T) {
	const expr = `trigger.A.all(x, !(trigger.probe in trigger.M))`
	c, err := cond.CompileWith(expr, cond.Options{CostLimit: 1 << 62, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	v := cond.NewVars(tmpl.Input{Trigger: hostileLists(t, 10000)})
	done := make(chan error, 1)
	go func() {
		_, err := c.Eval(v)
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("Eval(%s) has not returned a minute after its 50ms deadline", expr)
	}
	if !errors.Is(err, cond.ErrLimit) || !errors.Is(err, cond.ErrEval) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("Eval(%s) = %v; want ErrLimit at the deadline", expr, err)
	}
}

// TestMemoryBoundWithoutDeadline: the memory bound is the cost limit's,
// not the deadline's: with an hour to run, the concatenation bomb is
// still stopped at the cost limit within maxAlloc.
func TestMemoryBoundWithoutDeadline(t *testing.T) {
	const expr = `trigger.alerts.map(a, a.labels.team + trigger.groupLabels.alertname).size() > 0`
	c, err := cond.CompileWith(expr, cond.Options{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	v := cond.NewVars(tmpl.Input{Trigger: hostileGroup(t)})
	n := allocated(func() { _, err = c.Eval(v) })
	if !errors.Is(err, cond.ErrLimit) || !strings.Contains(err.Error(), "cost limit") {
		t.Errorf("Eval(%s) = %v; want ErrLimit at the cost limit", expr, err)
	}
	if n > maxAlloc {
		t.Errorf("Eval(%s) allocated %d MiB; want at most %d MiB", expr, n>>20, maxAlloc>>20)
	}
}

// TestCheck: the conditions of the recipes and docs, and loops whose
// work grows with the trigger only once, are bounded; a loop that does,
// for each element, work as large as the trigger is refused with
// ErrUnbounded.
func TestCheck(t *testing.T) {
	for _, expr := range []string{
		`status == "resolved"`,
		`trigger.alert.labels.severity != "info"`,
		`trigger.alert.labels.severity in ["critical", "page"]`,
		`(has(trigger.issue) || has(trigger.pull_request)) && trigger.action in ["opened", "reopened"]`,
		`answer.severity == "critical"`,
		`headers["Oncegate-Event"] == "firing"`,
		`trigger.alerts.exists(a, a.labels.severity == "critical")`,
		`trigger.alerts.filter(a, a.status == "firing").size() > 2`,
		`trigger.alerts.map(a, a.labels.team).exists(t, t == "db")`,
		`trigger.message.matches("^(disk|filesystem) (almost )?full") && trigger.message.contains("db")`,
		`"db" in trigger.teams && trigger.a == trigger.b`,
		`["db", "web"].exists(v, trigger.message.contains(v))`,
	} {
		c, err := cond.Compile(expr)
		if err != nil {
			t.Fatalf("Compile(%s): %v", expr, err)
		}
		if err := c.Check(); err != nil {
			t.Errorf("Check(%s) = %v; want nil", expr, err)
		}
	}
	for _, expr := range []string{
		`trigger.alerts.map(a, a.labels.team + trigger.groupLabels.alertname).size() > 0`,
		`trigger.A.all(x, !(trigger.probe in trigger.M))`,
		`trigger.A.all(x, size(trigger.s) > 0)`,
		`trigger.A.all(x, trigger.B.all(y, true))`,
		`trigger.A.filter(x, trigger.A.filter(y, false).size() == 0).size() > 0`,
		`trigger.s.contains(trigger.t)`,
		`headers.exists(k, answer.contains(k))`,
	} {
		c, err := cond.Compile(expr)
		if err != nil {
			t.Fatalf("Compile(%s): %v", expr, err)
		}
		err = c.Check()
		if !errors.Is(err, cond.ErrUnbounded) || errors.Is(err, cond.ErrCompile) || !strings.Contains(err.Error(), "grows faster than the trigger") {
			t.Errorf("Check(%s) = %v; want ErrUnbounded", expr, err)
		}
	}
}

// TestMatchesTakesALiteralPattern: a pattern read from the trigger could
// take hours in one call, which neither the cost limit (charged after the
// call) nor the deadline (checked between iterations) would stop: Compile
// refuses it, where it is.
func TestMatchesTakesALiteralPattern(t *testing.T) {
	for _, tt := range []struct{ expr, at string }{
		{`trigger.alert.labels.instance.matches(trigger.pattern)`, "at 1:46"},
		{`matches(trigger.alert.labels.instance, trigger.pattern)`, "at 1:47"},
	} {
		_, err := cond.Compile(tt.expr)
		if !errors.Is(err, cond.ErrCompile) || !strings.Contains(fmt.Sprint(err), "literal pattern") || !strings.Contains(fmt.Sprint(err), tt.at) {
			t.Errorf("Compile(%s) = %v; want ErrCompile %s, the pattern", tt.expr, err, tt.at)
		}
	}
	if _, err := cond.Compile(`trigger.alert.labels.instance.matches("^db-[0-9]+$")`); err != nil {
		t.Errorf("Compile(matches with a literal pattern) = %v", err)
	}
}

// TestOrdinaryLargeTriggerPasses: the limits leave room for what
// conditions do with ordinary triggers: a group of 2,000 alerts (200 KB)
// is gone through, compared and counted well within them.
func TestOrdinaryLargeTriggerPasses(t *testing.T) {
	alerts := make([]string, 2000)
	for i := range alerts {
		alerts[i] = fmt.Sprintf(`{"status":"firing","labels":{"alertname":"DiskAlmostFull","instance":"db-%d:9100","severity":"warning","team":"db"}}`, i)
	}
	trig := decode(t, `{"status":"firing","commonLabels":{"team":"db"},"alerts":[`+strings.Join(alerts, ",")+`]}`)
	for _, tt := range []struct {
		expr string
		want bool
	}{
		{`trigger.alerts.exists(a, a.labels.severity == "critical")`, false},
		{`trigger.alerts.filter(a, a.status == "firing").size() == 2000`, true},
		{`trigger.alerts.all(a, a.labels.team in ["db", "web"] && a.labels.instance.startsWith("db-"))`, true},
		{`trigger.commonLabels == {"team": "db"} && trigger.alerts.size() > 100`, true},
	} {
		c, err := cond.Compile(tt.expr)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.Eval(cond.NewVars(tmpl.Input{Trigger: trig})); got != tt.want || err != nil {
			t.Errorf("Eval(%s) = %v, %v; want %v", tt.expr, got, err, tt.want)
		}
		if err := c.Check(); err != nil {
			t.Errorf("Check(%s) = %v", tt.expr, err)
		}
	}
}
