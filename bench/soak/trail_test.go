package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestField(t *testing.T) {
	line := `time=2026-12-04T21:18:09.306Z level=INFO msg="a held answer is kept in its intent's record" component=consumer key=b7c2 err="x: \"y\" z"`
	for name, want := range map[string]string{
		"time": "2026-12-04T21:18:09.306Z", "level": "INFO", "msg": "a held answer is kept in its intent's record",
		"key": "b7c2", "err": `x: \"y\" z`, "component": "consumer", "missing": "",
	} {
		if got := field(line, name); got != want {
			t.Errorf("field(%s) = %q, want %q", name, got, want)
		}
	}
}

// TestTrails reads a ledger history and a replica's log as a soak run
// leaves them, and traces one key through both.
func TestTrails(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 4, 21, 0, 0, 0, time.UTC)
	h := &harness{dir: dir, t0: t0}
	h.replicas = []*replica{{h: h, idx: 0}}
	at := func(ms int) int64 { return t0.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	hist := strings.Join([]string{
		`{"ev":"open","process":"host:1"}`,
		fmt.Sprintf(`{"ev":"call","id":"host:1/1","t":%d,"op":"begin","key":"aa11","owner":"host:1","lease":3000000000}`, at(1000)),
		fmt.Sprintf(`{"ev":"call","id":"host:1/2","t":%d,"op":"begin","key":"bb22","owner":"host:1","lease":3000000000}`, at(1001)),
		fmt.Sprintf(`{"ev":"return","id":"host:1/1","t":%d,"status":"acquired","token":7}`, at(1005)),
		fmt.Sprintf(`{"ev":"call","id":"host:1/3","t":%d,"op":"note","key":"aa11","token":7,"note":"9f"}`, at(1500)),
		fmt.Sprintf(`{"ev":"return","id":"host:1/3","t":%d,"err":"other","msg":"nats: timeout"}`, at(3500)),
		fmt.Sprintf(`{"ev":"call","id":"host:1/4","t":%d,"op":"commit","key":"aa11","token":7}`, at(4000)),
	}, "\n") + "\n"
	if err := os.WriteFile(h.historyPath(0), []byte(hist), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := `time=2026-12-04T21:00:01.600Z level=WARN msg="the model's answer was not kept in the intent's record" component=consumer key=aa11 err="nats: timeout"
time=2026-12-04T21:00:01.700Z level=INFO msg=other component=consumer key=bb22
`
	if err := os.WriteFile(filepath.Join(dir, "logs", "replica-0.log"), []byte(logs), 0o644); err != nil {
		t.Fatal(err)
	}
	ops := h.ledgerOps([]string{"aa11"})["aa11"]
	want := []string{
		"r0 +1.000s begin → acquired t7 (5ms)",
		`r0 +1.500s note t7 note → other "nats: timeout" (2s)`,
		"r0 +4.000s commit t7 → no answer (its process died)",
	}
	if strings.Join(ops, "\n") != strings.Join(want, "\n") {
		t.Errorf("ledger trail:\n%s\nwant:\n%s", strings.Join(ops, "\n"), strings.Join(want, "\n"))
	}
	lines := h.logLines([]string{"aa11"})["aa11"]
	if len(lines) != 1 || lines[0] != `r0 +1.600s WARN the model's answer was not kept in the intent's record err=nats: timeout` {
		t.Errorf("log trail: %q", lines)
	}
}
