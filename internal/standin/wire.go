package standin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// The OpenAI wire format, as much of it as the stand-in reads or writes.

type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           int             `json:"max_tokens"`
	MaxCompletionTokens int             `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	ResponseFormat      *responseFormat `json:"response_format"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Name    string          `json:"name"`
	Content json.RawMessage `json:"content"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// message is a chat message reduced to what the answer depends on.
type message struct {
	role, name, text string
}

// prompt is the canonical request: what the answer depends on.
type prompt struct {
	model    string
	messages []message
	schema   json.RawMessage // response_format's JSON schema, or nil
}

// maxTokens is the completion limit asked for, 0 meaning none.
func (r *chatRequest) maxTokens() int {
	if r.MaxCompletionTokens > 0 {
		return r.MaxCompletionTokens
	}
	return r.MaxTokens
}

// prompt validates r and reduces it to its canonical form. On error it
// also returns the name of the offending parameter.
func (r *chatRequest) prompt() (prompt, string, error) {
	if r.Model == "" {
		return prompt{}, "model", fmt.Errorf("standin: model is required")
	}
	if len(r.Messages) == 0 {
		return prompt{}, "messages", fmt.Errorf("standin: messages is required and must not be empty")
	}
	if r.MaxTokens < 0 || r.MaxCompletionTokens < 0 {
		return prompt{}, "max_tokens", fmt.Errorf("standin: max_tokens and max_completion_tokens must not be negative")
	}
	p := prompt{model: r.Model, messages: make([]message, 0, len(r.Messages))}
	for i, m := range r.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		if m.Role == "" {
			return prompt{}, param + ".role", fmt.Errorf("standin: messages[%d].role is required", i)
		}
		text, err := contentText(m.Content)
		if err != nil {
			return prompt{}, param + ".content", fmt.Errorf("standin: messages[%d].content: %w", i, err)
		}
		p.messages = append(p.messages, message{role: m.Role, name: m.Name, text: text})
	}
	if f := r.ResponseFormat; f != nil && f.Type == "json_schema" {
		if f.JSONSchema == nil || !json.Valid(f.JSONSchema.Schema) {
			return prompt{}, "response_format.json_schema", fmt.Errorf("standin: response_format json_schema needs a schema")
		}
		p.schema = f.JSONSchema.Schema
	}
	return p, "", nil
}

// contentText returns the text of a message content: a string, null, or an
// array of parts whose text parts are concatenated.
func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case '[':
		var parts []contentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", fmt.Errorf("content parts: %w", err)
		}
		var b []byte
		for _, p := range parts {
			if p.Type == "text" {
				b = append(b, p.Text...)
			}
		}
		return string(b), nil
	}
	return "", fmt.Errorf("must be a string, an array of parts or null")
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type responseMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type choice struct {
	Index        int             `json:"index"`
	Message      responseMessage `json:"message"`
	Logprobs     any             `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

type completion struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"`
	Created           int64    `json:"created"`
	Model             string   `json:"model"`
	SystemFingerprint string   `json:"system_fingerprint"`
	Choices           []choice `json:"choices"`
	Usage             usage    `json:"usage"`
}

type delta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
}

type chunkChoice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type chunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []chunkChoice `json:"choices"`
	Usage             *usage        `json:"usage,omitempty"`
}

type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type modelList struct {
	Object string  `json:"object"`
	Data   []model `json:"data"`
}

type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only plain structs of strings and numbers are written
		panic(fmt.Sprintf("standin: encode %T: %v", v, err))
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	writeJSON(w, status, struct {
		Error apiError `json:"error"`
	}{e})
}

// writeStream writes a as server-sent events: a role chunk, one chunk per
// token, a chunk with the finish reason, a usage chunk if asked for, and
// the [DONE] marker; every event after the first interval after the one
// before it, until ctx is done.
func writeStream(ctx context.Context, w http.ResponseWriter, a *reply, includeUsage bool, interval time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	var tick *time.Ticker
	if interval > 0 {
		tick = time.NewTicker(interval)
		defer tick.Stop()
	}
	first := true
	// wait waits out the interval before every event but the first, and
	// reports whether the client is still there.
	wait := func() bool {
		if tick == nil || first {
			first = false
			return true
		}
		select {
		case <-tick.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	send := func(c chunk) {
		if !wait() {
			return
		}
		b, err := json.Marshal(c)
		if err != nil {
			panic(fmt.Sprintf("standin: encode chunk: %v", err))
		}
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	base := chunk{
		ID: a.id, Object: "chat.completion.chunk", Created: a.created,
		Model: a.model, SystemFingerprint: Fingerprint,
	}
	one := func(d delta, finish *string) chunk {
		c := base
		c.Choices = []chunkChoice{{Delta: d, FinishReason: finish}}
		return c
	}
	send(one(delta{Role: "assistant"}, nil))
	for _, t := range a.tokens {
		send(one(delta{Content: t}, nil))
	}
	finish := a.finishReason
	send(one(delta{}, &finish))
	if includeUsage {
		c := base
		c.Choices = []chunkChoice{}
		u := a.usage()
		c.Usage = &u
		send(c)
	}
	if !wait() {
		return
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}
