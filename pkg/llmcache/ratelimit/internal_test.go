package ratelimit

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tt := range []struct {
		name   string
		header map[string]string
		want   time.Duration
		ok     bool
	}{
		{"seconds", map[string]string{"Retry-After": "3"}, 3 * time.Second, true},
		{"zero", map[string]string{"Retry-After": "0"}, 0, true},
		{"date", map[string]string{"Retry-After": now.Add(7 * time.Second).Format(http.TimeFormat)}, 7 * time.Second, true},
		{"date past", map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, 0, true},
		{"ms first", map[string]string{"Retry-After-Ms": "1500", "Retry-After": "2"}, 1500 * time.Millisecond, true},
		{"bad ms falls back", map[string]string{"Retry-After-Ms": "soon", "Retry-After": "2"}, 2 * time.Second, true},
		{"negative", map[string]string{"Retry-After": "-1"}, 0, false},
		{"a day", map[string]string{"Retry-After": "86400"}, 24 * time.Hour, true},
		{"past a day", map[string]string{"Retry-After": "86401"}, 0, false},
		{"date past a day", map[string]string{"Retry-After": now.Add(25 * time.Hour).Format(http.TimeFormat)}, 0, false},
		{"garbage", map[string]string{"Retry-After": "later"}, 0, false},
		{"absent", nil, 0, false},
	} {
		h := http.Header{}
		for k, v := range tt.header {
			h.Set(k, v)
		}
		got, ok := retryAfter(h, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: retryAfter(%v) = %v, %v; want %v, %v", tt.name, tt.header, got, ok, tt.want, tt.ok)
		}
	}
}

func TestBackoffGrowsWithJitter(t *testing.T) {
	for n := 1; n <= 10; n++ {
		full := min(backoffFirst<<min(n-1, 6), backoffMax)
		for range 50 {
			if d := backoff(n); d < full/2 || d > full {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n, d, full/2, full)
			}
		}
	}
}

func TestUsage(t *testing.T) {
	if n, ok := jsonUsage([]byte(`{"id":"x","usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)); !ok || n != 15 {
		t.Errorf("jsonUsage = %d, %v; want 15, true", n, ok)
	}
	if _, ok := jsonUsage([]byte(`{"id":"x"}`)); ok {
		t.Error("jsonUsage of an answer without usage: ok")
	}
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"total_tokens\":42}}\n\n" +
		"data: [DONE]\n\n"
	if n, ok := streamUsage([]byte(stream)); !ok || n != 42 {
		t.Errorf("streamUsage = %d, %v; want 42, true", n, ok)
	}
	if _, ok := streamUsage([]byte("data: {\"choices\":[]}\n\ndata: [DONE]\n\n")); ok {
		t.Error("streamUsage of a stream without usage: ok")
	}
}

// TestSettle: usage above the reservation is taken from the budget, and
// usage below it is given back, as far as the bucket has room.
func TestSettle(t *testing.T) {
	tr, err := New(nil, Options{TokensPerMinute: 60000}) // 1000/s, burst 100
	if err != nil {
		t.Fatal(err)
	}
	before := tr.tok.Tokens()
	tr.settle(10, 260) // 250 more than reserved: the bucket owes 150
	if after := tr.tok.Tokens(); after > before-249 {
		t.Fatalf("tokens %v after spending 250 over the reservation, from %v", after, before)
	}
	tr.settle(300, 100) // 200 given back, as far as there is room
	if tr.credit <= 0 || tr.credit > 100 {
		t.Fatalf("credit %d, want between 1 and the burst of 100", tr.credit)
	}
	c := tr.credit
	if got, want := tr.useCredit(30), 30-min(c, 30); got != want || tr.credit != c-min(c, 30) {
		t.Fatalf("useCredit(30) with a credit of %d = %d, credit left %d; want %d, %d", c, got, tr.credit, want, c-min(c, 30))
	}
}

func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "3", "-1", "86400", "86401", "Wed, 21 Oct 2015 07:28:00 GMT", "soon", "1.5", ""} {
		f.Add(s, "")
	}
	f.Add("2", "1500")
	f.Add("", "NaN")
	f.Add("", "1e300")
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, ra, ms string) {
		h := http.Header{}
		h.Set("Retry-After", ra)
		if ms != "" {
			h.Set("Retry-After-Ms", ms)
		}
		d, ok := retryAfter(h, now)
		if d < 0 || d > maxRetryAfter || (!ok && d != 0) {
			t.Fatalf("retryAfter(%q, %q) = %v, %v", ra, ms, d, ok)
		}
	})
}

func FuzzUsage(f *testing.F) {
	f.Add([]byte(`{"usage":{"total_tokens":15}}`))
	f.Add([]byte("data: {\"usage\":{\"total_tokens\":42}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: \"usage\"\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		jsonUsage(body)
		streamUsage(body)
	})
}
