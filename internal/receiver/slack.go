package receiver

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"unicode/utf8"
)

// Slack is a Slack incoming webhook. It accepts a POST to its one path
// (the secret part of a webhook URL, such as "/services/T0/B0/XXXX") with
// a JSON message, and answers as Slack does: 200 "ok"; 400
// "invalid_payload" for a body that is not a JSON object or whose text is
// not a string; 400 "no_text" for a message with neither text nor
// blocks; 400 "invalid_blocks" for blocks that break Slack's limits (at
// most 50 blocks, each with a type; a section's text object of type
// mrkdwn or plain_text with at most 3000 characters; a context's 1 to 10
// elements); 404 "no_service" for another path; 405 for another method.
type Slack struct {
	// Path is the webhook's secret path; any other is 404 no_service.
	Path string

	faults
	mu       sync.Mutex
	messages []SlackMessage
	refused  map[string]int
}

// SlackMessage is a message Slack accepted.
type SlackMessage struct {
	Request
	Text   string
	Blocks []json.RawMessage
}

// NewSlack returns a Slack incoming webhook served at path.
func NewSlack(path string) *Slack { return &Slack{Path: path, refused: map[string]int{}} }

func (s *Slack) refuse(w http.ResponseWriter, status int, code string) {
	s.mu.Lock()
	s.refused[code]++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(status)
	io.WriteString(w, code)
}

func (s *Slack) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path != s.Path:
		s.refuse(w, http.StatusNotFound, "no_service")
		return
	case r.Method != http.MethodPost:
		s.refuse(w, http.StatusMethodNotAllowed, "invalid_method")
		return
	}
	if s.fault(w, "") {
		return
	}
	obj, body, problem := readJSON(r, maxBody)
	if problem != "" || !isJSON(r) {
		s.refuse(w, http.StatusBadRequest, "invalid_payload")
		return
	}
	m := SlackMessage{Request: Request{UserAgent: r.UserAgent(), IdempotencyKey: r.Header.Get("Idempotency-Key"), Body: body}}
	if raw, ok := obj["text"]; ok {
		if !jsonType(raw, "string") {
			s.refuse(w, http.StatusBadRequest, "invalid_payload")
			return
		}
		m.Text = str(raw)
	}
	if raw, ok := obj["blocks"]; ok {
		if json.Unmarshal(raw, &m.Blocks) != nil || !validBlocks(m.Blocks) {
			s.refuse(w, http.StatusBadRequest, "invalid_blocks")
			return
		}
	}
	if m.Text == "" && len(m.Blocks) == 0 {
		s.refuse(w, http.StatusBadRequest, "no_text")
		return
	}
	s.mu.Lock()
	s.messages = append(s.messages, m)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/html")
	io.WriteString(w, "ok")
}

type slackText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func (t slackText) valid() bool {
	return (t.Type == "mrkdwn" || t.Type == "plain_text") && t.Text != "" && utf8.RuneCountInString(t.Text) <= 3000
}

func validBlocks(blocks []json.RawMessage) bool {
	if len(blocks) > 50 {
		return false
	}
	for _, raw := range blocks {
		var b struct {
			Type     string      `json:"type"`
			Text     *slackText  `json:"text"`
			Elements []slackText `json:"elements"`
		}
		if json.Unmarshal(raw, &b) != nil || b.Type == "" {
			return false
		}
		switch b.Type {
		case "section":
			if b.Text == nil || !b.Text.valid() {
				return false
			}
		case "context":
			if len(b.Elements) == 0 || len(b.Elements) > 10 {
				return false
			}
			for _, e := range b.Elements {
				if !e.valid() {
					return false
				}
			}
		}
	}
	return true
}

// Messages returns the messages accepted, in order.
func (s *Slack) Messages() []SlackMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SlackMessage(nil), s.messages...)
}

// Refused returns how many requests were refused, by Slack's error code.
func (s *Slack) Refused() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.refused))
	for k, v := range s.refused {
		out[k] = v
	}
	return out
}
