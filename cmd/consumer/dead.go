package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/outcome"
)

const deadUsage = `usage: consumer dead [flags] [SEQ|FROM-TO ...]
       consumer dead show [flags] SEQ

Lists dead letters: their sequence in the dead-letter stream, time, pipeline, reason, key,
trigger subject, whether they were redriven, and why they failed; "show" prints one with its
headers and payload. It asks the running consumer's admin service, or, with none running,
reads the streams itself. Flags may follow the arguments.
`

// selectFlags are the flags that choose dead letters, shared by dead and
// redrive.
type selectFlags struct {
	filter, pipeline, effect, reason, status, key, stream, since, until, text string
	unhandled                                                                 bool
	limit                                                                     int
	after                                                                     uint64
}

func (s *selectFlags) register(fs *flag.FlagSet, limitHelp string, limit int) {
	fs.StringVar(&s.filter, "filter", "", "the dead letters a filter `line` chooses, as the console writes it: effect=pagerduty status=500 from=14:00 to=14:20 (terms: pipeline, effect, reason, status, from, to, key, text, stream, seq, handled; handled letters left out unless handled=yes); the flags below add to it")
	fs.StringVar(&s.pipeline, "pipeline", "", "only the dead letters of pipeline `name`")
	fs.StringVar(&s.effect, "effect", "", "only the dead letters of the effect `name` or kind (slack, pagerduty, http)")
	fs.StringVar(&s.reason, "reason", "", "only the dead letters of `reason` ("+reasonList()+")")
	fs.StringVar(&s.status, "status", "", "only the dead letters the receiver refused with HTTP `status` (500, or a class: 5xx)")
	fs.StringVar(&s.key, "key", "", "only the dead letters of intent `key` (32 hex digits)")
	fs.StringVar(&s.stream, "stream", "", "the dead-letter `stream` (default: the one the pipelines' dead letters go to)")
	fs.StringVar(&s.since, "since", "", "only the dead letters since `when`: a duration back (90m, 24h), a time of day (14:00), a date or an RFC 3339 time")
	fs.StringVar(&s.until, "until", "", "only the dead letters before `when`, written as -since takes it")
	fs.StringVar(&s.text, "text", "", "only the dead letters whose detail, receiver's answer or key holds `text`")
	fs.BoolVar(&s.unhandled, "unhandled", false, "leave out the dead letters already redriven, or whose record was forgotten since")
	fs.IntVar(&s.limit, "limit", limit, limitHelp)
	fs.Uint64Var(&s.after, "after", 0, "only the dead letters after sequence `seq` (to continue a listing)")
}

func reasonList() string {
	var rs []string
	for _, r := range outcome.Reasons {
		rs = append(rs, string(r))
	}
	return strings.Join(rs, ", ")
}

// selection builds the selection from the filter, the flags and the
// sequence arguments.
func (s *selectFlags) selection(args []string, now time.Time) (admin.Selection, error) {
	var sel admin.Selection
	if s.filter != "" {
		var err error
		if sel, err = admin.ParseFilter(s.filter, now); err != nil {
			return sel, usageError{fmt.Errorf("-filter: %w", err)}
		}
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&sel.Pipeline, s.pipeline)
	set(&sel.Effect, s.effect)
	set(&sel.Reason, s.reason)
	set(&sel.Status, s.status)
	set(&sel.Key, strings.ToLower(s.key))
	set(&sel.Stream, s.stream)
	set(&sel.Text, s.text)
	sel.After = s.after
	sel.Unhandled = sel.Unhandled || s.unhandled
	if sel.Reason != "" && !outcome.Reason(sel.Reason).Valid() {
		return sel, usageError{fmt.Errorf("-reason %q: want one of %s", sel.Reason, reasonList())}
	}
	for _, w := range []struct {
		flag, v string
		dst     *time.Time
	}{{"-since", s.since, &sel.Since}, {"-until", s.until, &sel.Until}} {
		if w.v == "" {
			continue
		}
		t, err := admin.ParseTime(w.v, now)
		if err != nil {
			return sel, usageError{fmt.Errorf("%s %q: %w", w.flag, w.v, err)}
		}
		*w.dst = t
	}
	for _, a := range args {
		r, err := admin.ParseRange(a)
		if err != nil {
			return sel, usageError{err}
		}
		sel.Seqs = append(sel.Seqs, r)
	}
	return sel, nil
}

func runDead(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dead", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	var s selectFlags
	s.register(fs, "list at most `n` dead letters", admin.DefaultLimit)
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprint(stderr, deadUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	show := len(pos) > 0 && pos[0] == "show"
	if show {
		pos = pos[1:]
		if len(pos) != 1 {
			return usageError{fmt.Errorf("dead show: want one sequence")}
		}
	}
	cfg, err := c.load()
	if err != nil {
		return err
	}
	conn, err := openAdmin(ctx, cfg, "dead")
	if err != nil {
		return fmt.Errorf("dead: %w", err)
	}
	defer conn.close()
	if show {
		seq, err := strconv.ParseUint(pos[0], 10, 64)
		if err != nil || seq == 0 {
			return usageError{fmt.Errorf("dead show: %q is not a sequence", pos[0])}
		}
		d, err := conn.api.Show(ctx, admin.ShowRequest{Stream: s.stream, Seq: seq})
		if err != nil {
			return fmt.Errorf("dead show: %w", err)
		}
		if *asJSON {
			return printJSON(stdout, d)
		}
		printLetter(stdout, d)
		return nil
	}
	sel, err := s.selection(pos, time.Now())
	if err != nil {
		return err
	}
	var all admin.DeadReply
	all.Letters = []admin.DeadLetter{}
	for want := s.limit; ; {
		sel.Limit = min(want, admin.MaxLimit)
		r, err := conn.api.Dead(ctx, sel)
		if err != nil {
			return fmt.Errorf("dead: %w", err)
		}
		all.Letters = append(all.Letters, r.Letters...)
		all.More, all.Next = r.More, r.Next
		want -= len(r.Letters)
		if !r.More || want <= 0 || len(r.Letters) == 0 {
			break
		}
		sel.After = r.Next
	}
	if *asJSON {
		return printJSON(stdout, all)
	}
	printLetters(stdout, all)
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// clip cuts s to n runes, on one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func redriven(m *admin.Mark) string {
	if m == nil {
		return "no"
	}
	s := "yes"
	if m.Generation > 1 {
		s = fmt.Sprintf("%d times", m.Generation)
	}
	return s + ", " + m.At.Format(time.RFC3339) + " by " + m.By
}

func printLetters(w io.Writer, r admin.DeadReply) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tPIPELINE\tEFFECT\tSTATUS\tREASON\tTRIES\tKEY\tREDRIVEN\tRECEIVER SAID / DETAIL")
	streams := map[string]int{}
	for _, d := range r.Letters {
		streams[d.Stream]++
		key := d.Key
		if key == "" {
			key = "-"
		}
		status := "-"
		if d.Status != 0 {
			status = fmt.Sprint(d.Status)
		}
		why := d.Answer
		if why == "" {
			why = d.Detail
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", d.Seq, d.Time.Format(time.RFC3339), d.Pipeline, effectName(d.Effect, d.Sink), status, d.Reason, d.Attempts, key, redriven(d.Redriven), clip(why, 80))
	}
	tw.Flush()
	var names []string
	for s, n := range streams {
		names = append(names, fmt.Sprintf("%d in %s", n, s))
	}
	sort.Strings(names)
	fmt.Fprintf(w, "%d dead letters", len(r.Letters))
	if len(names) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(names, ", "))
	}
	fmt.Fprintln(w)
	if r.More {
		fmt.Fprintf(w, "more match: continue with -after %d, or raise -limit\n", r.Next)
	}
}

// effectName names an effect: "notify (slack)", its kind alone, or "-".
func effectName(name, kind string) string {
	switch {
	case name == "" && kind == "":
		return "-"
	case name == "":
		return kind
	case kind == "":
		return name
	}
	return name + " (" + kind + ")"
}

func printLetter(w io.Writer, d admin.DeadLetter) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("effect", effectName(d.Effect, d.Sink))
	if d.Status != 0 {
		row("status", fmt.Sprint(d.Status))
	}
	row("receiver said", d.Answer)
	row("reason", d.Reason)
	row("tries", fmt.Sprint(d.Attempts))
	row("next", d.Next)
	row("dead letter", fmt.Sprintf("%s %d", d.Stream, d.Seq))
	row("time", d.Time.Format(time.RFC3339Nano))
	row("pipeline", d.Pipeline)
	row("detail", d.Detail)
	row("key", d.Key)
	if d.EffectKey != "" && d.EffectKey != d.Key {
		row("sent under", d.EffectKey)
	}
	row("subject", d.Subject)
	if d.TriggerStream != "" {
		row("trigger", fmt.Sprintf("%s %d, %d deliveries", d.TriggerStream, d.TriggerSeq, d.Deliveries))
	}
	row("redriven", redriven(d.Redriven))
	if m := d.Redriven; m != nil {
		row("redriven to", fmt.Sprintf("%s %d", m.Stream, m.Seq))
		row("ledger", m.Ledger)
		row("statement", m.Statement)
	}
	tw.Flush()
	fmt.Fprintln(w, "headers:")
	var names []string
	for k := range d.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range d.Headers[k] {
			fmt.Fprintf(w, "  %s: %s\n", k, v)
		}
	}
	note := ""
	if d.Truncated {
		note = ", the first 64 KiB of the trigger's"
	}
	fmt.Fprintf(w, "payload (%d bytes%s):\n", d.Size, note)
	if utf8.Valid(d.Payload) {
		fmt.Fprintln(w, string(d.Payload))
	} else {
		fmt.Fprintf(w, "%q\n", d.Payload)
	}
}
