package admin

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/oncegate/oncegate/pkg/dedupe"
)

// A filter is a selection written on one line, as the command line's
// -filter and the console's filter box take it:
//
//	effect=pagerduty status=500 from=14:00 to=14:20
//	pipeline=alerts, reason=permanent_effect, text="invalid_payload"
//	14:00-14:20 status=5xx
//
// Terms are name=value (or name:value), separated by blanks or commas;
// a value holding either is quoted ("..." with Go's escapes). The names:
// pipeline, effect (a name, or a kind such as slack), reason, status (500,
// or a class, 5xx), from and to (a time), key, text, stream, seq (a
// sequence or range: 12, 10-20, 10-; given again for more), handled (yes:
// the letters already redriven or forgotten too; no, the default of the
// console, leaves them out). A time is RFC 3339, a date (2006-01-02), a
// date and a time of day (2006-01-02T15:04), a time of day today (15:04),
// or a duration back from now (90m, 2h). A term HH:MM-HH:MM is a from and
// a to. Any other word is text to find.

// ParseFilter parses a filter: times of day and dates are read in now's
// location. An error is an *Error of kind ErrBadRequest saying which term
// is wrong.
func ParseFilter(s string, now time.Time) (Selection, error) {
	var sel Selection
	handled := false
	var words []string
	bad := func(format string, args ...any) (Selection, error) {
		return Selection{}, errorf(ErrBadRequest, "admin: filter: "+format, args...)
	}
	for rest := s; ; {
		rest = strings.TrimLeftFunc(rest, isSep)
		if rest == "" {
			break
		}
		// A term: a name, then = or : and a value (quoted, or up to a
		// separator), or a word.
		end := strings.IndexFunc(rest, func(r rune) bool { return isSep(r) || r == '=' || r == ':' || r == '"' })
		if end < 0 {
			end = len(rest)
		}
		name := rest[:end]
		var value string
		quoted := false
		if end < len(rest) && (rest[end] == '=' || rest[end] == ':') && isName(name) {
			v := rest[end+1:]
			if strings.HasPrefix(v, `"`) {
				q, err := strconv.QuotedPrefix(v)
				if err != nil {
					return bad("the value of %s is an unclosed or malformed quotation", name)
				}
				value, _ = strconv.Unquote(q)
				rest, quoted = v[len(q):], true
				if rest != "" {
					if r, _ := utf8.DecodeRuneInString(rest); !isSep(r) {
						return bad("%s=%s: want a blank or a comma after the quotation", name, q)
					}
				}
			} else {
				n := strings.IndexFunc(v, isSep)
				if n < 0 {
					n = len(v)
				}
				value, rest = v[:n], v[n:]
			}
		} else {
			// A word: up to a separator, quoted words whole.
			if strings.HasPrefix(rest, `"`) {
				q, err := strconv.QuotedPrefix(rest)
				if err != nil {
					return bad("an unclosed or malformed quotation")
				}
				w, _ := strconv.Unquote(q)
				words, rest = append(words, w), rest[len(q):]
				continue
			}
			n := strings.IndexFunc(rest, isSep)
			if n < 0 {
				n = len(rest)
			}
			w := rest[:n]
			rest = rest[n:]
			if from, to, ok := clockRange(w, now); ok {
				sel.Since, sel.Until = from, to
				continue
			}
			words = append(words, w)
			continue
		}
		if value == "" && !quoted {
			return bad("%s= wants a value", name)
		}
		switch strings.ToLower(name) {
		case "pipeline":
			sel.Pipeline = value
		case "effect":
			sel.Effect = value
		case "reason":
			if !validReason(value) {
				return bad("no dead-letter reason %q", value)
			}
			sel.Reason = value
		case "status":
			if !validStatus(value) {
				return bad("status %q: want an HTTP status (500) or a class (5xx)", value)
			}
			sel.Status = value
		case "from", "since":
			t, err := parseWhen(value, now)
			if err != nil {
				return bad("from=%s: %v", value, err)
			}
			sel.Since = t
		case "to", "until":
			t, err := parseWhen(value, now)
			if err != nil {
				return bad("to=%s: %v", value, err)
			}
			sel.Until = t
		case "key":
			k, err := dedupe.ParseKey(strings.ToLower(value))
			if err != nil {
				return bad("key=%s: %v", value, err)
			}
			sel.Key = k.String()
		case "text":
			words = append(words, value)
		case "stream":
			sel.Stream = value
		case "seq":
			r, err := ParseRange(value)
			if err != nil {
				return bad("seq=%s: want a sequence or range (12, 10-20, 10-)", value)
			}
			sel.Seqs = append(sel.Seqs, r)
		case "handled":
			switch strings.ToLower(value) {
			case "yes", "true", "on":
				handled = true
			case "no", "false", "off":
				handled = false
			default:
				return bad("handled=%s: want yes or no", value)
			}
		default:
			return bad("no term %q (pipeline, effect, reason, status, from, to, key, text, stream, seq, handled)", name)
		}
	}
	sel.Text = strings.Join(words, " ")
	sel.Unhandled = !handled
	if !sel.Since.IsZero() && !sel.Until.IsZero() && !sel.Since.Before(sel.Until) {
		return bad("the time range ends (%s) before it starts (%s)", sel.Until.Format(time.RFC3339), sel.Since.Format(time.RFC3339))
	}
	return sel, nil
}

func isSep(r rune) bool { return r == ',' || unicode.IsSpace(r) }

// isName reports whether s is a term's name: letters and '-'.
func isName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// ParseTime reads a time as a filter's from and to take it: RFC 3339,
// 2006-01-02T15:04, 2006-01-02, 15:04 (today), in now's location, or a
// duration back from now (90m); the time returned is in UTC.
func ParseTime(s string, now time.Time) (time.Time, error) { return parseWhen(s, now) }

// parseWhen is ParseTime.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	loc := now.Location()
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t.UTC(), nil
		}
	}
	if t, ok := clock(s, now); ok {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("want a time (RFC 3339, 2006-01-02, 2006-01-02T15:04, 15:04) or a duration back (90m)")
}

// clock reads a time of day today, 15:04 or 15:04:05, in now's location.
func clock(s string, now time.Time) (time.Time, bool) {
	for _, layout := range []string{"15:04", "15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			y, m, d := now.Date()
			return time.Date(y, m, d, t.Hour(), t.Minute(), t.Second(), 0, now.Location()).UTC(), true
		}
	}
	return time.Time{}, false
}

// clockRange reads a range of times of day, 14:00-14:20 (or with an en
// dash).
func clockRange(s string, now time.Time) (from, to time.Time, ok bool) {
	a, b, found := strings.Cut(s, "-")
	if !found {
		a, b, found = strings.Cut(s, "–")
	}
	if !found {
		return from, to, false
	}
	from, ok1 := clock(a, now)
	to, ok2 := clock(b, now)
	return from, to, ok1 && ok2
}

// Filter writes sel as a filter that ParseFilter reads back as sel (its
// times in UTC); its After, UpTo and Limit are not part of it.
func (sel Selection) Filter() string {
	var terms []string
	add := func(name, value string) {
		if value != "" {
			terms = append(terms, name+"="+quoteTerm(value))
		}
	}
	add("stream", sel.Stream)
	add("pipeline", sel.Pipeline)
	add("effect", sel.Effect)
	add("reason", sel.Reason)
	add("status", sel.Status)
	if !sel.Since.IsZero() {
		add("from", sel.Since.UTC().Format(time.RFC3339Nano))
	}
	if !sel.Until.IsZero() {
		add("to", sel.Until.UTC().Format(time.RFC3339Nano))
	}
	add("key", sel.Key)
	for _, r := range sel.Seqs {
		add("seq", r.String())
	}
	if sel.Text != "" {
		terms = append(terms, "text="+strconv.Quote(sel.Text))
	}
	if !sel.Unhandled {
		terms = append(terms, "handled=yes")
	}
	return strings.Join(terms, " ")
}

// quoteTerm quotes a value that holds a separator, a quote or nothing
// printable.
func quoteTerm(v string) string {
	if v == "" || strings.ContainsFunc(v, func(r rune) bool { return isSep(r) || r == '"' || r == '\\' || !unicode.IsPrint(r) }) {
		return strconv.Quote(v)
	}
	return v
}
