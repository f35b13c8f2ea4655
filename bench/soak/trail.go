package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/ledger/history"
)

// maxTrails bounds the intents a failing run traces, and maxTrailOps and
// maxTrailLogs the ledger operations and log lines shown for each.
const (
	maxTrails    = 3
	maxTrailOps  = 24
	maxTrailLogs = 16
)

// printTrails writes, for a few of the intents a failed check names, what
// the ledger was asked about each (every replica's ledger history) and what
// the replicas logged about it, one line each, so that a failing run is
// read from its own output: CI keeps no run directory.
func (h *harness) printTrails(w io.Writer, r *report) {
	var ids []int
	for _, id := range append(slices.Clone(r.repaidAliveIDs), r.alerts.sentAfterDropIDs()...) {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if len(ids) > maxTrails {
		ids = ids[:maxTrails]
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = h.intentKeys([]int{id})
	}
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = fmt.Sprintf("intent %d", id)
	}
	if r.lin != nil {
		// A key whose history is not linearizable may be no intent's
		// (a route's, a dispatch's record): traced by its key.
		for _, k := range r.lin.illegal[:min(maxTrails, len(r.lin.illegal))] {
			keys, names = append(keys, k), append(names, "ledger key")
		}
	}
	ops := h.ledgerOps(keys)
	logs := h.logLines(keys)
	for i, k := range keys {
		fmt.Fprintf(w, "trail of %s (key %s), ledger: %s\n", names[i], k, strings.Join(ops[k], "; "))
		fmt.Fprintf(w, "trail of %s, logs: %s\n", names[i], strings.Join(logs[k], "; "))
	}
}

// ledgerOps reads the replicas' ledger histories for the operations on
// keys, and formats each as "r<replica> <time since the start> <op>
// <what it presented> → <what it returned> (<how long it took>)", in the
// order they were asked, up to maxTrailOps per key.
func (h *harness) ledgerOps(keys []string) map[string][]string {
	type timed struct {
		at   int64
		text string
	}
	found := map[string][]timed{}
	for i := range h.replicas {
		all, _, err := history.ReadFile(h.historyPath(i))
		if err != nil {
			continue
		}
		for _, o := range all {
			if !slices.Contains(keys, o.Call.Key) {
				continue
			}
			c, ret := o.Call, o.Return
			var b strings.Builder
			fmt.Fprintf(&b, "r%d %+.3fs %s", i, time.Unix(0, c.Time).Sub(h.t0).Seconds(), c.Op)
			if c.Token != 0 {
				fmt.Fprintf(&b, " t%d", c.Token)
			}
			if c.Note != "" {
				b.WriteString(" note")
			}
			if c.Reason != "" {
				fmt.Fprintf(&b, " %q", c.Reason)
			}
			switch {
			case !o.Answered():
				b.WriteString(" → no answer (its process died)")
			case ret.Err != "":
				fmt.Fprintf(&b, " → %s %q", ret.Err, cut(ret.Msg, 80))
			default:
				b.WriteString(" →")
				for _, s := range []string{ret.Status, ret.State} {
					if s != "" {
						b.WriteString(" " + s)
					}
				}
				if ret.Token != 0 {
					fmt.Fprintf(&b, " t%d", ret.Token)
				}
				if ret.RecToken != 0 {
					fmt.Fprintf(&b, " rec t%d", ret.RecToken)
				}
				if ret.Note != "" {
					b.WriteString(" with note")
				}
			}
			if o.Answered() {
				fmt.Fprintf(&b, " (%v)", time.Duration(ret.Time-c.Time).Round(time.Millisecond))
			}
			found[c.Key] = append(found[c.Key], timed{c.Time, b.String()})
		}
	}
	out := map[string][]string{}
	for k, ts := range found {
		slices.SortStableFunc(ts, func(a, b timed) int { return cmp.Compare(a.at, b.at) })
		for _, t := range ts[:min(len(ts), maxTrailOps)] {
			out[k] = append(out[k], t.text)
		}
		if len(ts) > maxTrailOps {
			out[k] = append(out[k], fmt.Sprintf("… %d more", len(ts)-maxTrailOps))
		}
	}
	return out
}

// logLines are the replicas' log lines that name one of keys, each cut to
// "r<replica> <time since the start> <level> <message> <err>", up to
// maxTrailLogs per key, in each replica's order.
func (h *harness) logLines(keys []string) map[string][]string {
	out := map[string][]string{}
	for i := range h.replicas {
		f, err := os.Open(filepath.Join(h.dir, "logs", fmt.Sprintf("replica-%d.log", i)))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			for _, k := range keys {
				if k == "?" || !strings.Contains(line, k) || len(out[k]) >= maxTrailLogs {
					continue
				}
				at := "?"
				if t, err := time.Parse(time.RFC3339Nano, field(line, "time")); err == nil {
					at = fmt.Sprintf("%+.3fs", t.Sub(h.t0).Seconds())
				}
				s := fmt.Sprintf("r%d %s %s %s", i, at, field(line, "level"), cut(field(line, "msg"), 100))
				if e := field(line, "err"); e != "" {
					s += " err=" + cut(e, 120)
				}
				out[k] = append(out[k], s)
			}
		}
		f.Close()
	}
	return out
}

// field is the value of name in a log line of the text handler
// (name=value, or name="quoted value"), or "".
func field(line, name string) string {
	i := strings.Index(line, " "+name+"=")
	if i < 0 {
		if !strings.HasPrefix(line, name+"=") {
			return ""
		}
		i = -1
	}
	v := line[i+len(name)+2:]
	if strings.HasPrefix(v, `"`) {
		for j := 1; j < len(v); j++ {
			switch v[j] {
			case '\\':
				j++
			case '"':
				return v[1:j]
			}
		}
		return v[1:]
	}
	v, _, _ = strings.Cut(v, " ")
	return v
}

// cut shortens s to n bytes, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
