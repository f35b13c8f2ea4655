package console_test

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/consumer"
)

// forgeLetters publishes n dead letters of pipeline orders on its
// dead-letter subject, as the consumer writes them, with reason and
// detail; it returns once the stream has them.
func forgeLetters(t *testing.T, f *fixture, reason, detail string, n int) {
	t.Helper()
	for i := range n {
		m := nats.NewMsg(f.app.Config.Stream.DeadLetter("orders"))
		m.Data = fmt.Appendf(nil, `{"order":"F-%s-%d"}`, reason, i)
		for h, v := range map[string]string{
			consumer.HeaderReason: reason, consumer.HeaderDetail: detail, consumer.HeaderPipeline: "orders",
			consumer.HeaderSubject: "triggers.orders", consumer.HeaderKey: fmt.Sprintf("%08x%024x", len(reason), i),
			consumer.HeaderDeliveries: "3",
		} {
			m.Header.Set(h, v)
		}
		if _, err := f.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

var (
	rowSeqRE = regexp.MustCompile(`<a href="/dead/(\d+)">`)
	totalRE  = regexp.MustCompile(`id="total">(\d+)<`)
)

// rows returns the sequences the list shows, in order, and its total.
func rows(t *testing.T, page string) ([]int, int) {
	t.Helper()
	var seqs []int
	for _, m := range rowSeqRE.FindAllStringSubmatch(page, -1) {
		n, _ := strconv.Atoi(m[1])
		seqs = append(seqs, n)
	}
	total := -1
	if m := totalRE.FindStringSubmatch(page); m != nil {
		total, _ = strconv.Atoi(m[1])
	}
	return seqs, total
}

// TestIncidentConsole: the dead letters' page at incident size. 121
// letters (the fixture's, then 70 refused with 400 before a moment and 50
// that failed with 500 after it) are listed newest first, 50 a page with
// the total and links to the older pages; filtered by status, by reason
// and text, by effect and by time range, the totals follow; counts by
// reason and pipeline are shown; and a letter once redriven is hidden
// until handled ones are asked for.
func TestIncidentConsole(t *testing.T) {
	f := start(t)
	forgeLetters(t, f, "permanent_effect", `sink: http: key 0: attempt 1 of 3: POST "http://x": 400 Bad Request: invalid_payload`, 70)
	mid := time.Now().UTC()
	forgeLetters(t, f, "exhausted", `sink: http: key 0: attempt 3 of 3: POST "http://x": 500 Internal Server Error: upstream boom`, 50)
	waitFor(t, "121 dead letters", func() bool {
		st, err := f.js.Stream(ctx, "ONCEGATE_DEAD")
		return err == nil && st.CachedInfo().State.Msgs == 121
	})

	page := get(t, f, "/dead")
	seqs, total := rows(t, page)
	if total != 121 || len(seqs) != 50 || seqs[0] != 121 || seqs[49] != 72 {
		t.Errorf("/dead: total %d, %d rows from %v; want 121, 50 rows newest first (121 down to 72)", total, len(seqs), first(seqs))
	}
	if !strings.Contains(page, `id="older"`) || !strings.Contains(page, "offset=50") {
		t.Errorf("/dead has no link to the older page")
	}
	for _, want := range []string{">permanent_effect</span> <b>71<", ">exhausted</span> <b>50<", ">orders</span> <b>121<"} {
		if !strings.Contains(page, want) {
			t.Errorf("/dead counts: no %q", want)
		}
	}
	// The counts are links to the letters they count.
	if m := regexp.MustCompile(`<a href="(/dead\?[^"]*)" class="count"><span>exhausted</span>`).FindStringSubmatch(page); m == nil {
		t.Errorf("/dead: the count of exhausted is not a link")
	} else if _, total := rows(t, get(t, f, strings.ReplaceAll(m[1], "&amp;", "&"))); total != 50 {
		t.Errorf("the count of exhausted links to %s, which lists %d; want 50", m[1], total)
	}
	seqs, _ = rows(t, get(t, f, "/dead?offset=100"))
	if len(seqs) != 21 || seqs[20] != 1 {
		t.Errorf("/dead?offset=100: %d rows ending %v; want the 21 oldest, down to 1", len(seqs), last(seqs))
	}

	for _, c := range []struct {
		query string
		want  int
	}{
		{"status=500", 50},
		{"status=4xx", 71},
		{"reason=permanent_effect&text=INVALID_PAYLOAD", 70},
		{"effect=http", 121},
		{"from=" + url.QueryEscape(mid.Format(time.RFC3339Nano)), 50},
		{"to=" + url.QueryEscape(mid.Format(time.RFC3339Nano)), 71},
		{"q=" + url.QueryEscape("status=500 text=boom"), 50},
	} {
		if _, total := rows(t, get(t, f, "/dead?"+c.query)); total != c.want {
			t.Errorf("/dead?%s: total %d; want %d", c.query, total, c.want)
		}
	}

	// Handled: hidden by default.
	if _, err := f.app.Admin.Redrive(ctx, admin.RedriveRequest{Selection: admin.Selection{Seqs: []admin.Range{{From: 121, To: 121}}}, Yes: true, By: admin.Caller{User: "alice"}}); err != nil {
		t.Fatal(err)
	}
	page = get(t, f, "/dead?status=500")
	if seqs, total := rows(t, page); total != 49 || len(seqs) == 0 || seqs[0] != 120 || !strings.Contains(page, `id="handled">1<`) {
		t.Errorf("/dead?status=500 after a redrive: total %d, first %v; want 49 from 120, one handled hidden", total, first(seqs))
	}
	if seqs, total := rows(t, get(t, f, "/dead?status=500&handled=on")); total != 50 || seqs[0] != 121 {
		t.Errorf("/dead?status=500&handled=on: total %d, first %v; want 50 from 121", total, first(seqs))
	}
}

func first(s []int) []int { return s[:min(len(s), 1)] }

func last(s []int) []int { return s[max(len(s)-1, 0):] }
