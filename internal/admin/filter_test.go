package admin_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/admin"
)

var filterNow = time.Date(2026, 12, 3, 14, 30, 0, 0, time.UTC)

func TestParseFilter(t *testing.T) {
	at := func(h, m int) time.Time { return time.Date(2026, 12, 3, h, m, 0, 0, time.UTC) }
	for _, tt := range []struct {
		in   string
		want admin.Selection
	}{
		{"", admin.Selection{Unhandled: true}},
		{"effect=pagerduty status=500 from=14:00 to=14:20", admin.Selection{Effect: "pagerduty", Status: "500", Since: at(14, 0), Until: at(14, 20), Unhandled: true}},
		{"pagerduty, status:5xx, 14:00-14:20", admin.Selection{Text: "pagerduty", Status: "5xx", Since: at(14, 0), Until: at(14, 20), Unhandled: true}},
		{"14:00–14:20", admin.Selection{Since: at(14, 0), Until: at(14, 20), Unhandled: true}},
		{`pipeline=alerts reason=permanent_effect text="invalid payload" handled=yes`, admin.Selection{Pipeline: "alerts", Reason: "permanent_effect", Text: "invalid payload"}},
		{"from=90m", admin.Selection{Since: at(13, 0), Unhandled: true}},
		{"key=4C1D0F4869CE98672495AB81BF7DD3BF seq=10-20 seq=30", admin.Selection{Key: "4c1d0f4869ce98672495ab81bf7dd3bf", Seqs: []admin.Range{{From: 10, To: 20}, {From: 30, To: 30}}, Unhandled: true}},
		{"boom timeout", admin.Selection{Text: "boom timeout", Unhandled: true}},
	} {
		got, err := admin.ParseFilter(tt.in, filterNow)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseFilter(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"reason=nope", "status=600", "status=50", "from=yesterday", "to=14:00 from=15:00", "key=xyz", "seq=0", "colour=red", "handled=maybe", `text="open`, "pipeline="} {
		if _, err := admin.ParseFilter(bad, filterNow); !errors.Is(err, admin.ErrBadRequest) {
			t.Errorf("ParseFilter(%q): %v; want ErrBadRequest", bad, err)
		}
	}
}

// FuzzParseFilter: a filter line comes from a person (the console's box,
// -filter). Whatever it is, parsing it never panics, and refuses it with
// ErrBadRequest or reads it as a selection; a selection read prints (as the
// console shows it, to paste into -filter) as a line that reads back as
// the same selection, and prints the same again.
func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{
		"", "effect=pagerduty status=500 from=14:00 to=14:20", "pagerduty, status:5xx, 14:00-14:20",
		`pipeline=alerts text="a \"quoted\" word" handled=yes`, "from=2h to=2026-12-03", "seq=1- seq=4-9 key=0123456789abcdef0123456789abcdef",
		"a=b=c", `"`, "text=,", "x:", "handled=no,,reason=poison",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := admin.ParseFilter(s, filterNow)
		if err != nil {
			if !errors.Is(err, admin.ErrBadRequest) {
				t.Fatalf("ParseFilter(%q): %v is not ErrBadRequest", s, err)
			}
			return
		}
		line := sel.Filter()
		back, err := admin.ParseFilter(line, filterNow)
		if err != nil {
			t.Fatalf("ParseFilter(%q) printed as %q, which does not read back: %v", s, line, err)
		}
		if !reflect.DeepEqual(back, sel) {
			t.Fatalf("ParseFilter(%q) = %+v, printed %q, read back as %+v", s, sel, line, back)
		}
		if again := back.Filter(); again != line {
			t.Fatalf("the line %q printed again as %q", line, again)
		}
	})
}

// FuzzParseDetail: a dead letter's detail is what its publisher wrote
// (anyone who may publish on the dead-letter subject). Reading the
// receiver's status and message out of it never panics, gives a status of
// 0 or an HTTP status, a message that is a part of the detail (nothing
// made up) and at most 300 bytes; and for a detail as the HTTP sink writes
// it, the status and the receiver's message come back as the receiver sent
// them.
func FuzzParseDetail(f *testing.F) {
	f.Add(`sink: http: key 0: attempt 1 of 3: POST "https://hooks.slack.com/services/REDACTED": 400 Bad Request: invalid_payload`, 400, "Bad Request", "invalid_payload")
	f.Add(`effect pagerduty: sink: http: key 0: attempt 5 of 5: POST "http://x": 503 Service Unavailable; not retried: context canceled`, 503, "Service Unavailable", "")
	f.Add(`": 200`, 500, "Internal Server Error", `{"errors":["'routing_key' is invalid"]}`)
	f.Fuzz(func(t *testing.T, detail string, status int, text, body string) {
		st, answer, _ := admin.ParseDetail(detail)
		if st != 0 && (st < 100 || st > 599) {
			t.Fatalf("ParseDetail(%q): status %d", detail, st)
		}
		if !strings.Contains(detail, answer) || len(answer) > 300 {
			t.Fatalf("ParseDetail(%q): answer %q is not a part of the detail of at most 300 bytes", detail, answer)
		}
		// As the sink writes it: a quoted target, the status line, the
		// start of the body on one line.
		// (A status line's text is short: one longer than the message's
		// 300 bytes is cut, as a body is.)
		if status < 100 || status > 599 || strings.ContainsAny(text, ":;\"\n") || len(text) > 100 || strings.ContainsAny(body, "\n") || len(body) > 300 {
			return
		}
		line := fmt.Sprintf(`sink: http: key 0: attempt 1 of 3: POST %q: %d %s`, "https://receiver.example/x", status, text)
		if body != "" {
			line += ": " + body
		}
		st, answer, attempt := admin.ParseDetail(line)
		wantAnswer := body
		if body == "" {
			wantAnswer = strings.TrimSpace(text)
		}
		if st != status || answer != wantAnswer || attempt != 1 {
			t.Fatalf("ParseDetail(%q) = %d, %q, attempt %d; want %d, %q, 1", line, st, answer, attempt, status, wantAnswer)
		}
	})
}
