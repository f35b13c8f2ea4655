// Package receiver holds in-process stand-ins of the tools Oncegate's
// effect presets send to — a Slack incoming webhook, the PagerDuty Events
// API v2, Jira Cloud's create-issue endpoint — for the tests, the recipes
// and the demo. Each checks a request as the provider documents it
// (method, content type, authentication, required fields, types, size
// limits), answers as the provider does, and records what it accepted, so
// that a test can count messages per intent and match resolves to
// firings.
//
// They are stand-ins for checking Oncegate, not emulators: each checks
// what its provider documents for the requests Oncegate sends, and keeps
// the state that matters for counting (PagerDuty's open alerts by
// dedup_key, Jira's issues by key).
//
// Every receiver is an http.Handler and safe for concurrent use.
package receiver

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxBody bounds what a receiver reads of a request.
const maxBody = 1 << 20

// faults answers requests with a scripted status instead of handling
// them: the next n (Fail), all of them for a while (FailFor), or those
// past a quota (Limit), as a provider's rate limit answers them.
type faults struct {
	mu      sync.Mutex
	next    []int
	after   time.Duration // Retry-After of a 429
	until   time.Time     // FailFor's outage ends
	status  int           // FailFor's answer
	faulted int           // scripted answers given

	limit     int           // Limit's quota; 0: none
	per       time.Duration // Limit's window
	sent      []time.Time   // the requests let through in the window
	throttled int           // requests answered 429 for the quota
}

// Fail makes the next n requests answer status (a 429 with Retry-After:
// retryAfter, rounded up to whole seconds, when status is 429).
func (f *faults) Fail(n, status int, retryAfter time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.next = append(f.next, status)
	}
	f.after = retryAfter
}

// FailFor makes every request answer status for d from now: an outage.
func (f *faults) FailFor(d time.Duration, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.until, f.status = time.Now().Add(d), status
}

// Limit sets a quota, as a provider's rate limit: a request past n in any
// window of per is answered 429, with a Retry-After of the whole seconds
// until the oldest request in the window leaves it, and is not handled.
// Requests answered 429 do not count against the quota. n = 0 lifts it.
func (f *faults) Limit(n int, per time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit, f.per, f.sent = n, per, nil
}

// Faulted returns how many requests were answered with a scripted status
// (Fail, FailFor), the quota's 429s not included.
func (f *faults) Faulted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.faulted
}

// Throttled returns how many requests were answered 429 past the quota
// (Limit): requests the provider would have dropped.
func (f *faults) Throttled() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.throttled
}

// fault writes a scripted answer and reports whether it did.
func (f *faults) fault(w http.ResponseWriter, body string) bool {
	now := time.Now()
	f.mu.Lock()
	var status int
	after := f.after
	switch {
	case len(f.next) > 0:
		status = f.next[0]
		f.next = f.next[1:]
		f.faulted++
	case now.Before(f.until):
		status = f.status
		f.faulted++
	case f.limit > 0:
		i := 0
		for i < len(f.sent) && now.Sub(f.sent[i]) >= f.per {
			i++
		}
		f.sent = f.sent[i:]
		if len(f.sent) < f.limit {
			f.sent = append(f.sent, now)
			break
		}
		status, after = http.StatusTooManyRequests, f.sent[0].Add(f.per).Sub(now)
		f.throttled++
	}
	f.mu.Unlock()
	if status == 0 {
		return false
	}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(int((after+time.Second-1)/time.Second)))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
	return true
}

// readJSON reads a request body of at most limit bytes as a JSON object.
// It returns the object, the raw body, and a problem or "".
func readJSON(r *http.Request, limit int64) (map[string]json.RawMessage, []byte, string) {
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, nil, "the body could not be read"
	}
	if int64(len(b)) > limit {
		return nil, b, "the body is over " + strconv.FormatInt(limit, 10) + " bytes"
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
		return nil, b, "the body is not a JSON object"
	}
	return obj, b, ""
}

// jsonType reports whether raw is JSON of the kind: "string", "object",
// "array", "number" or "bool".
func jsonType(raw json.RawMessage, kind string) bool {
	s := strings.TrimSpace(string(raw))
	if s == "" {
		return false
	}
	switch kind {
	case "string":
		return s[0] == '"'
	case "object":
		return s[0] == '{'
	case "array":
		return s[0] == '['
	case "bool":
		return s == "true" || s == "false"
	case "number":
		return s[0] == '-' || '0' <= s[0] && s[0] <= '9'
	}
	return false
}

func str(raw json.RawMessage) string {
	var s string
	json.Unmarshal(raw, &s)
	return s
}

func isJSON(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "application/json")
}

// Request is what a receiver saw of one request it accepted.
type Request struct {
	UserAgent      string
	IdempotencyKey string
	Body           []byte
}
