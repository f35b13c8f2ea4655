package standin_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/standin"
)

// TestRequestLimit: past the limit in the window, requests are answered 429
// with a Retry-After that covers the rest of the window, and once the
// window has slid past, requests are answered again.
func TestRequestLimit(t *testing.T) {
	// 600 a minute over a 500ms window: 5 requests per window.
	s, c, ts := newTestServer(t, standin.Options{RequestsPerMinute: 600, LimitWindow: 500 * time.Millisecond})
	ctx := context.Background()
	start := time.Now()
	for i := range 5 {
		if _, err := c.CreateChatCompletion(ctx, chatRequest("limit "+strconv.Itoa(i))); err != nil {
			t.Fatalf("request %d within the limit: %v", i, err)
		}
	}
	_, err := c.CreateChatCompletion(ctx, chatRequest("limit 5"))
	var apiErr *openai.APIError
	if time.Since(start) < 500*time.Millisecond { // the window has not slid: the 6th is refused
		if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != http.StatusTooManyRequests {
			t.Fatalf("6th request in the window: err = %v, want a 429 APIError", err)
		}
		if st := s.Stats(); st.OverLimit != 1 || st.Completions != 5 || st.RateLimited != 0 {
			t.Fatalf("stats = %+v, want 5 completions and 1 over the limit", st)
		}
		// Retry-After is whole seconds, at least 1.
		resp, err := ts.Client().Post(ts.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("Retry-After = %q, want 1", resp.Header.Get("Retry-After"))
		}
	}
	// Once the window has slid past the first five, requests pass again.
	waitFor(t, func() bool {
		_, err := c.CreateChatCompletion(ctx, chatRequest("after the window"))
		return err == nil
	})
}

// TestRequestLimitNeverExceeded: however fast requests come, the stand-in
// never answers more than the limit in any window.
func TestRequestLimitNeverExceeded(t *testing.T) {
	s, c, _ := newTestServer(t, standin.Options{RequestsPerMinute: 1200, LimitWindow: 250 * time.Millisecond})
	ctx := context.Background()
	start := time.Now()
	var ok int
	for i := range 60 {
		if _, err := c.CreateChatCompletion(ctx, chatRequest("burst "+strconv.Itoa(i))); err == nil {
			ok++
		}
	}
	windows := int(time.Since(start)/(250*time.Millisecond)) + 1
	if max := windows * 5; ok > max {
		t.Fatalf("%d answered in %d windows of 5, want at most %d", ok, windows, max)
	}
	if st := s.Stats(); st.OverLimit+st.Completions != 60 {
		t.Fatalf("stats = %+v, want 60 completions and refusals", st)
	}
}
