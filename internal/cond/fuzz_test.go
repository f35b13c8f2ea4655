package cond_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/cond"
	"github.com/oncegate/oncegate/internal/tmpl"
)

// fuzzExprs are conditions an operator may write, over the trigger
// FuzzCondition builds: realistic ones, and the (a concatenation,
// a membership, an equality in a loop).
var fuzzExprs = []string{
	`status == "resolved"`,
	`trigger.doc.labels.severity in ["critical", "page"]`,
	`has(trigger.doc.labels) && trigger.doc.labels.team == "db"`,
	`trigger.alerts.exists(a, a.labels.severity == "critical")`,
	`trigger.alerts.filter(a, a.status == "firing").size() > 2`,
	`trigger.alerts.map(a, a.labels.team + trigger.groupLabels.alertname).size() > 0`,
	`trigger.alerts.map(a, a + trigger.doc).exists(x, x == trigger.s)`,
	`trigger.alerts.all(a, !(a in trigger.alerts))`,
	`trigger.alerts.all(a, a == trigger.doc || a != trigger.groupLabels)`,
	`trigger.alerts.exists(a, a.labels.exists(k, k.startsWith("team")))`,
	`trigger.alerts.exists_one(a, string(a).contains(trigger.s))`,
	`size(trigger.s) > 10 && trigger.s.matches("^(disk|fs) .*full$") && trigger.s.contains(trigger.s)`,
	`trigger.alerts.map(a, trigger.alerts.map(b, [a, b, trigger.doc])).size() > 0`,
	`trigger.doc.map(k, trigger.doc[k]).exists(v, v in trigger.alerts)`,
	`int(trigger.doc) > 1 || double(trigger.s) > 0.5 || bytes(trigger.s).size() > 3`,
	`headers.exists(k, headers[k] + trigger.s == answer)`,
}

var fuzzConds = sync.OnceValues(func() ([]*cond.Condition, error) {
	cs := make([]*cond.Condition, len(fuzzExprs))
	for i, expr := range fuzzExprs {
		c, err := cond.Compile(expr)
		if err != nil {
			return nil, err
		}
		cs[i] = c
	}
	return cs, nil
})

// FuzzCondition: whatever a trigger holds, an evaluation of any condition
// of fuzzExprs ends — by its deadline at the latest — having allocated at
// most maxAlloc, with a bool or an *cond.Error matching ErrEval (ErrLimit
// when stopped at a limit), never a panic (which CEL would turn into an
// "internal error"). The input doc is a JSON document; the trigger holds
// it as doc, copies of it (n of them) as alerts, it again as groupLabels,
// and s, its text repeated (m times): so that small inputs reach large
// triggers, as large as a pipeline accepts.
func FuzzCondition(f *testing.F) {
	f.Add([]byte(`{"labels":{"severity":"critical","team":"db","alertname":"DiskFull"},"status":"firing"}`), uint16(50), uint16(10), uint8(3))
	f.Add([]byte(`{"labels":{"team":"t1"},"alertname":"`+strings.Repeat("A", 4096)+`"}`), uint16(1000), uint16(32), uint8(5))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]`), uint16(500), uint16(100), uint8(7))
	f.Add([]byte(`{"a":1,"b":[1,2,3,4,5,6,7,8,9,10],"c":{"d":"e"}}`), uint16(2000), uint16(1), uint8(12))
	f.Add([]byte(`"disk almost full"`), uint16(3), uint16(1000), uint8(11))
	f.Add([]byte(`12345678901234567890`), uint16(0), uint16(0), uint8(14))
	f.Fuzz(func(t *testing.T, doc []byte, n, m uint16, which uint8) {
		d, err := tmpl.DecodeJSON(doc)
		if err != nil || len(doc) > 4096 {
			return
		}
		// As a pipeline's limits would: at most 1 MiB of alerts, 256 KiB
		// of text.
		n, m = min(n, uint16((1<<20)/(len(doc)+1))), min(m, uint16((256<<10)/(len(doc)+1)))
		alerts := make([]any, n)
		for i := range alerts {
			alerts[i] = d
		}
		trig := map[string]any{"doc": d, "alerts": alerts, "groupLabels": d, "s": strings.Repeat(string(doc), int(m))}
		cs, err := fuzzConds()
		if err != nil {
			t.Fatal(err)
		}
		c := cs[int(which)%len(cs)]
		v := cond.NewVars(tmpl.Input{Trigger: trig, Headers: map[string]string{"X": string(doc)}, Status: "firing",
			Answer: &tmpl.Answer{Text: string(doc)}})
		type result struct {
			ok  bool
			err error
		}
		done := make(chan result, 1)
		var bytes uint64
		go func() {
			var r result
			bytes = allocated(func() { r.ok, r.err = c.Eval(v) })
			done <- r
		}()
		var r result
		select {
		case r = <-done:
		case <-time.After(cond.DefaultTimeout + 10*time.Second):
			t.Fatalf("Eval(%s) has not returned 10s after its deadline", c)
		}
		if bytes > maxAlloc {
			t.Errorf("Eval(%s) allocated %d MiB; want at most %d MiB", c, bytes>>20, maxAlloc>>20)
		}
		var ce *cond.Error
		if r.err != nil && (!errors.As(r.err, &ce) || !errors.Is(r.err, cond.ErrEval) || strings.Contains(r.err.Error(), "internal error")) {
			t.Errorf("Eval(%s) = %v, %v; want a bool or a *cond.Error matching ErrEval", c, r.ok, r.err)
		}
	})
}
