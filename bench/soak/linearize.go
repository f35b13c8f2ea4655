package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/history"
)

// The ledger histories of the consumer replicas (each replica's process
// records every ledger operation it makes, with ONCEGATE_FAULTS_LEDGER_HISTORY)
// are checked for linearizability with Porcupine against ledgerModel, a
// sequential model of the ledger, partitioned by key: the operations on
// each key, from every process, must be explainable as happening one at a
// time, each at some instant between its invocation and its response, in an
// order that the model allows.
//
// The model is time-agnostic: the real ledger decides by its clock whether
// a pending record's lease has run out (and the soak jumps replicas'
// clocks), so for a pending record the model lets Begin answer held or
// taken-over alike. What it holds to:
//
//   - a key that was never begun answers Begin with new; one that was,
//     never again;
//   - tokens only grow: a taken-over claim gets a higher token than the
//     record had;
//   - Extend, Commit and Fail succeed only with the record's current token
//     on a pending record, and fail with a stale token otherwise (not found
//     on a key with no record);
//   - a committed record answers every later Begin and Get with committed,
//     the result committed and the token that committed it; a failed one
//     with failed and its reason;
//   - Note succeeds only as Extend does, and sets the record's note, which
//     every later Begin and Get that shows the record returns (held
//     excepted: it may come from a replica behind), through a takeover,
//     the commit, a failure and its clearing, and into the claim that
//     follows a Clear;
//   - a record keeps the fingerprint it was begun with; Begin reports a
//     mismatch exactly when the caller's differs, and under MismatchReject
//     fails instead.
//
// One allowance follows jskvstore's documented design: Begin's first read
// may come from a replica that is behind, and a verdict of held drawn from
// an older revision only delays a retry. So Begin may answer held on a
// committed or failed record, with a token the record had (no higher than
// its current one); it may never answer new, taken-over, or another result.
//
// An operation without a response (its process was killed) or that failed
// with an error that is not one of the ledger's own verdicts (a timeout, a
// lost connection) may or may not have taken effect, at any time after its
// invocation: its return time is +inf, and the model lets it apply or not.
//
// The model assumes durable claims, as the KV ledger the soak runs keeps:
// a Badger ledger's volatile claims die with their process, after which a
// Begin answering new is right.

// ledgerState is the model's record of one key. The zero value is a key
// with no record.
type ledgerState struct {
	State  string // "", or ledger.State's names: pending, committed, failed
	Token  uint64
	FP     string // the fingerprint it was begun with
	Result string // hash of the committed result
	Reason string // the failure reason (cut as the history cuts it)
	Note   string // hash of the record's note (history.NoteHash), kept through every state
}

func (s ledgerState) String() string {
	switch s.State {
	case "":
		return "no record"
	case "committed":
		return fmt.Sprintf("committed t%d %s", s.Token, short(s.Result))
	case "failed":
		return fmt.Sprintf("failed t%d %q", s.Token, short(s.Reason))
	}
	if s.Note != "" {
		return fmt.Sprintf("%s t%d note %s", s.State, s.Token, short(s.Note))
	}
	return fmt.Sprintf("%s t%d", s.State, s.Token)
}

func short(s string) string {
	if len(s) > 24 {
		return s[:24] + "…"
	}
	return s
}

// ledgerOp is an operation as the model sees it: the invocation, and the
// response unless unknown.
type ledgerOp struct {
	call    history.Event
	ret     history.Event
	unknown bool // no response, or an error that says nothing
}

// ledgerModel returns the sequential model of the ledger under mismatch
// policy pol.
func ledgerModel(pol ledger.MismatchPolicy) porcupine.Model {
	m := porcupine.NondeterministicModel{
		Init: func() []any { return []any{ledgerState{}} },
		Step: func(state, in, _ any) []any {
			return stepLedger(pol, state.(ledgerState), in.(ledgerOp))
		},
		DescribeOperation: func(in, _ any) string { return describeOp(in.(ledgerOp)) },
		DescribeState:     func(s any) string { return s.(ledgerState).String() },
	}
	return m.ToModel()
}

// stepLedger returns the states the ledger may be in after op, from s:
// none if op's response is impossible there.
func stepLedger(pol ledger.MismatchPolicy, s ledgerState, op ledgerOp) []any {
	c, r := op.call, op.ret
	pendingWith := func(token uint64) bool { return s.State == "pending" && s.Token == token }
	if op.unknown {
		// It may have taken effect, or not.
		out := []any{s}
		switch c.Op {
		case history.OpBegin:
			switch {
			case s.State == "":
				out = append(out, ledgerState{State: "pending", Token: 1, FP: c.Fingerprint})
			case s.State == "cleared":
				// A cleared failure is new work, fenced above its holders,
				// with the failed work's note.
				out = append(out, ledgerState{State: "pending", Token: s.Token + 1, FP: c.Fingerprint, Note: s.Note})
			case s.State == "pending" && (pol == ledger.MismatchAccept || s.FP == c.Fingerprint):
				n := s
				n.Token++
				out = append(out, n)
			}
		case history.OpNote:
			if pendingWith(c.Token) {
				n := s
				n.Note = c.Note
				out = append(out, n)
			}
		case history.OpCommit:
			if pendingWith(c.Token) {
				out = append(out, ledgerState{State: "committed", Token: s.Token, FP: s.FP, Result: c.Result, Note: s.Note})
			}
		case history.OpFail:
			if pendingWith(c.Token) {
				out = append(out, ledgerState{State: "failed", Token: s.Token, FP: s.FP, Reason: c.Reason, Note: s.Note})
			}
		case history.OpClear:
			if s.State == "failed" && s.Token == c.Token {
				out = append(out, ledgerState{State: "cleared", Token: s.Token, FP: s.FP, Note: s.Note})
			}
		}
		return out
	}
	ok := func(next ledgerState, legal bool) []any {
		if legal {
			return []any{next}
		}
		return nil
	}
	// The ledger's own verdicts: nothing was written.
	switch r.Err {
	case "":
	case history.ErrStale:
		return ok(s, s.State != "" && !pendingWith(c.Token))
	case history.ErrNotFound:
		return ok(s, s.State == "")
	case history.ErrNotFail:
		return ok(s, c.Op == history.OpClear && (s.State == "pending" || s.State == "committed"))
	case history.ErrMismatch:
		return ok(s, c.Op == history.OpBegin && pol == ledger.MismatchReject && s.State != "" && s.FP != c.Fingerprint)
	default: // too large, invalid, closed, corrupt: refused before any write
		return ok(s, true)
	}
	switch c.Op {
	case history.OpBegin:
		if s.State == "" {
			return ok(ledgerState{State: "pending", Token: r.Token, FP: c.Fingerprint},
				r.Status == "new" && r.Token > 0 && !r.Mismatch && r.State == "pending" && r.RecToken == r.Token && r.Note == "")
		}
		if s.State == "cleared" && r.Status == "new" {
			// A cleared failure is new work, fenced above its holders,
			// with the failed work's note.
			return ok(ledgerState{State: "pending", Token: r.Token, FP: c.Fingerprint, Note: s.Note},
				r.Token == s.Token+1 && !r.Mismatch && r.State == "pending" && r.RecToken == r.Token && r.Note == s.Note)
		}
		mismatch := s.FP != c.Fingerprint
		if r.Mismatch != mismatch || mismatch && pol == ledger.MismatchReject {
			return nil
		}
		switch r.Status {
		case "taken-over":
			return ok(ledgerState{State: "pending", Token: r.Token, FP: s.FP, Note: s.Note},
				s.State == "pending" && r.Token > s.Token && r.State == "pending" && r.RecToken == r.Token && r.Note == s.Note)
		case "held":
			// From the record as it is, or (a stale first read) as it was.
			return ok(s, r.State == "pending" && r.RecToken > 0 && r.RecToken <= s.Token)
		case "committed":
			return ok(s, s.State == "committed" && r.State == "committed" && r.Result == s.Result && r.RecToken == s.Token && r.Note == s.Note)
		case "failed":
			return ok(s, s.State == "failed" && r.State == "failed" && r.Reason == s.Reason && r.RecToken == s.Token && r.Note == s.Note)
		}
		return nil // new on a key that has a record, or a status unknown here
	case history.OpExtend:
		return ok(s, pendingWith(c.Token) && r.Token == c.Token)
	case history.OpNote:
		n := s
		n.Note = c.Note
		return ok(n, pendingWith(c.Token) && r.Token == c.Token)
	case history.OpCommit:
		return ok(ledgerState{State: "committed", Token: s.Token, FP: s.FP, Result: c.Result, Note: s.Note}, pendingWith(c.Token))
	case history.OpFail:
		return ok(ledgerState{State: "failed", Token: s.Token, FP: s.FP, Reason: c.Reason, Note: s.Note}, pendingWith(c.Token))
	case history.OpClear:
		return ok(ledgerState{State: "cleared", Token: s.Token, FP: s.FP, Note: s.Note},
			(s.State == "failed" || s.State == "cleared") && s.Token == c.Token)
	case history.OpGet:
		legal := s.State != "" && r.State == s.State && r.RecToken == s.Token && r.Note == s.Note &&
			(s.State != "committed" || r.Result == s.Result) && (s.State != "failed" || r.Reason == s.Reason)
		return ok(s, legal)
	}
	return ok(s, true)
}

func describeOp(op ledgerOp) string {
	c, r := op.call, op.ret
	var in string
	switch c.Op {
	case history.OpBegin:
		in = fmt.Sprintf("begin(fp %s, %s)", short(c.Fingerprint), c.Owner)
	case history.OpExtend:
		in = fmt.Sprintf("extend(t%d, %v)", c.Token, time.Duration(c.Lease))
	case history.OpNote:
		in = fmt.Sprintf("note(t%d, %s, %v)", c.Token, short(c.Note), time.Duration(c.Lease))
	case history.OpCommit:
		in = fmt.Sprintf("commit(t%d, %s)", c.Token, short(c.Result))
	case history.OpFail:
		in = fmt.Sprintf("fail(t%d, %q)", c.Token, short(c.Reason))
	default:
		in = c.Op + "()"
	}
	var out string
	switch {
	case op.unknown && r.Kind == "":
		out = "? (no response: its process died)"
	case op.unknown:
		out = "? (" + short(r.Msg) + ")"
	case r.Err != "":
		out = "error " + r.Err
	case c.Op == history.OpBegin:
		out = fmt.Sprintf("%s t%d (record %s t%d", r.Status, r.Token, r.State, r.RecToken)
		if r.Mismatch {
			out += ", mismatch"
		}
		out += ")"
	case c.Op == history.OpGet:
		out = fmt.Sprintf("%s t%d", r.State, r.RecToken)
	case c.Op == history.OpExtend || c.Op == history.OpNote:
		out = fmt.Sprintf("ok t%d", r.Token)
	default:
		out = "ok"
	}
	return fmt.Sprintf("%s %s → %s", c.ID, in, out)
}

// keyedOps turns the operations of a history into Porcupine's, grouped by
// key; operations without a key (Pending, Close) are left out.
func keyedOps(ops []history.Op) map[string][]porcupine.Operation {
	out := map[string][]porcupine.Operation{}
	for _, o := range ops {
		if o.Call.Key == "" {
			continue
		}
		lo := ledgerOp{call: o.Call, ret: o.Return, unknown: !o.Known()}
		ret := o.ReturnTime()
		if lo.unknown {
			ret = math.MaxInt64
		}
		out[o.Call.Key] = append(out[o.Call.Key], porcupine.Operation{Input: lo, Call: o.Call.Time, Output: nil, Return: ret})
	}
	return out
}

// linResult is the outcome of checking the histories.
type linResult struct {
	files      int
	processes  int
	ops        int // operations with a key, checked
	unknown    int // of them, of unknown outcome
	keys       int
	illegal    []string // keys whose history is not linearizable
	timedOut   []string // keys the checker gave up on
	torn       int
	took       time.Duration
	visualized string // the HTML file showing the illegal keys' histories
	err        error  // the histories could not be read
}

func (r *linResult) ok() bool { return r.err == nil && len(r.illegal) == 0 }

func (r *linResult) String() string {
	if r.err != nil {
		return fmt.Sprintf("ledger histories unreadable: %v", r.err)
	}
	verdict := "linearizable"
	if len(r.illegal) > 0 {
		verdict = fmt.Sprintf("NOT linearizable on %d keys, e.g. %s", len(r.illegal), strings.Join(r.illegal[:min(3, len(r.illegal))], ", "))
	}
	s := fmt.Sprintf("%d operations (%d of unknown outcome) on %d keys, from %d processes: %s (checked in %.1fs)",
		r.ops, r.unknown, r.keys, r.processes, verdict, r.took.Seconds())
	if len(r.timedOut) > 0 {
		s += fmt.Sprintf("; the checker gave up on %d keys after %v each, e.g. %s", len(r.timedOut), perKeyTimeout, r.timedOut[0])
	}
	if r.torn > 0 {
		s += fmt.Sprintf("; %d torn lines skipped", r.torn)
	}
	return s
}

// perKeyTimeout bounds the check of one key's history.
const perKeyTimeout = 10 * time.Second

// maxVisualized bounds how many illegal keys the visualization shows.
const maxVisualized = 8

// checkHistories reads the history files, checks every key's operations,
// and, if some key's are not linearizable, writes Porcupine's visualization
// of (up to maxVisualized of) them to htmlPath.
func checkHistories(ctx context.Context, files []string, pol ledger.MismatchPolicy, htmlPath string) *linResult {
	t0 := time.Now()
	res := &linResult{files: len(files)}
	var all []history.Op
	for _, f := range files {
		ops, st, err := history.ReadFile(f)
		if err != nil {
			res.err = err
			return res
		}
		res.processes += st.Processes
		res.torn += st.Torn
		all = append(all, ops...)
	}
	byKey := keyedOps(all)
	keys := make([]string, 0, len(byKey))
	for k, ops := range byKey {
		keys = append(keys, k)
		res.ops += len(ops)
		for _, o := range ops {
			if o.Input.(ledgerOp).unknown {
				res.unknown++
			}
		}
	}
	sort.Strings(keys)
	res.keys = len(keys)
	model := ledgerModel(pol)
	var mu sync.Mutex
	work := make(chan string)
	var wg sync.WaitGroup
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for k := range work {
				r := porcupine.CheckOperationsTimeout(model, byKey[k], perKeyTimeout)
				mu.Lock()
				switch r {
				case porcupine.Illegal:
					res.illegal = append(res.illegal, k)
				case porcupine.Unknown:
					res.timedOut = append(res.timedOut, k)
				}
				mu.Unlock()
			}
		})
	}
	for _, k := range keys {
		if ctx.Err() != nil {
			break
		}
		work <- k
	}
	close(work)
	wg.Wait()
	slices.Sort(res.illegal)
	slices.Sort(res.timedOut)
	if len(res.illegal) > 0 && htmlPath != "" {
		if err := visualize(model, byKey, res.illegal[:min(maxVisualized, len(res.illegal))], htmlPath); err != nil {
			fmt.Fprintln(os.Stderr, "soak: visualizing the ledger history:", err)
		} else {
			res.visualized = htmlPath
		}
	}
	res.took = time.Since(t0)
	return res
}

// visualize writes Porcupine's visualization of the histories of keys, one
// partition per key, each operation on the lowest row free at its
// invocation (Porcupine draws a client's operations on one row).
func visualize(model porcupine.Model, byKey map[string][]porcupine.Operation, keys []string, path string) error {
	var ops []porcupine.Operation
	var parts [][]porcupine.Operation
	for _, k := range keys {
		part := slices.Clone(byKey[k])
		slices.SortStableFunc(part, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		var rowFree []int64 // the time each row is free from
		for i := range part {
			row := -1
			for j, free := range rowFree {
				if free < part[i].Call {
					row = j
					break
				}
			}
			if row < 0 {
				row = len(rowFree)
				rowFree = append(rowFree, 0)
			}
			rowFree[row] = part[i].Return
			part[i].ClientId = row
			part[i].Metadata = "key " + k
		}
		parts = append(parts, part)
		ops = append(ops, part...)
	}
	model.Partition = func([]porcupine.Operation) [][]porcupine.Operation { return parts }
	_, info := porcupine.CheckOperationsVerbose(model, ops, time.Minute)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return porcupine.VisualizePath(model, info, path)
}
