package llmcache

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/oncegate/oncegate/internal/llmhook"
)

// estimateRequest reads the body of a chat completion request and returns
// what it may spend, as the cache counts it before an upstream call
// (llmhook.EstimateRequest).
func estimateRequest(body []byte) (llmhook.Estimate, error) {
	q, err := parseRequest(body)
	if err != nil {
		return llmhook.Estimate{}, err
	}
	e := llmhook.Estimate{Prompt: estimatePrompt(q)}
	e.MaxCompletion = min(completionTokens(q, 0), math.MaxInt64-e.Prompt)
	return e, nil
}

// readRequest reads a chat completion request body as the cache reads it
// (llmhook.ReadRequest): it refuses, with ErrInvalidRequest, a body a
// provider could read otherwise than the cache.
func readRequest(body []byte) (llmhook.Request, error) {
	q, err := parseRequest(body)
	if err != nil {
		return llmhook.Request{}, err
	}
	return llmhook.Request{Model: q.Model, N: q.N, MaxTokens: max(q.MaxTokens, 0)}, nil
}

// completionTokens returns the completion tokens q may spend: n times its
// cap per choice, or times allowance when it sets none; at most
// math.MaxInt64, never less than 0.
func completionTokens(q request, allowance int64) int64 {
	per := q.MaxTokens
	if per <= 0 {
		per = allowance
	}
	return satMul(max(q.N, 1), per)
}

// satMul returns a×b for a, b ≥ 0, at most math.MaxInt64; 0 if either is
// less than 1.
func satMul(a, b int64) int64 {
	switch {
	case a <= 0 || b <= 0:
		return 0
	case a > math.MaxInt64/b:
		return math.MaxInt64
	}
	return a * b
}

// satAdd returns a+b for a, b ≥ 0, at most math.MaxInt64.
func satAdd(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// The members the cache reads, by the object they are in.
var (
	requestMembers = []string{"model", "stream", "max_tokens", "max_completion_tokens", "n",
		"messages", "tools", "functions", "stream_options"}
	messageMembers       = []string{"role", "name", "content", "tool_calls", "function_call"}
	partMembers          = []string{"type", "text"}
	streamOptionsMembers = []string{"include_usage"}
)

// errAmbiguous is wrapped, with ErrInvalidRequest, by the error for a
// body a provider could read otherwise than the cache.
var errAmbiguous = errors.New("a provider could read it otherwise")

// unambiguous returns an error wrapping ErrInvalidRequest if the request
// body holds, in the request object, a message, a content part or its
// stream_options, a member twice or one named as a member the cache reads
// but for its case. Bodies that pass it are read alike by exact and by
// case-insensitive decoders.
func unambiguous(body []byte) error {
	top, err := members(body, requestMembers)
	if err != nil {
		return fmt.Errorf("%w: body: %w", ErrInvalidRequest, err)
	}
	if so, ok := top["stream_options"]; ok && isObject(so) {
		if _, err := members(so, streamOptionsMembers); err != nil {
			return fmt.Errorf("%w: stream_options: %w", ErrInvalidRequest, err)
		}
	}
	var msgs []json.RawMessage
	if raw, ok := top["messages"]; !ok || json.Unmarshal(raw, &msgs) != nil {
		return nil // parseRequest says what is wrong with it
	}
	for i, m := range msgs {
		if !isObject(m) {
			continue
		}
		mm, err := members(m, messageMembers)
		if err != nil {
			return fmt.Errorf("%w: messages[%d]: %w", ErrInvalidRequest, i, err)
		}
		var parts []json.RawMessage
		if raw, ok := mm["content"]; !ok || len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &parts) != nil {
			continue
		}
		for j, p := range parts {
			if !isObject(p) {
				continue
			}
			if _, err := members(p, partMembers); err != nil {
				return fmt.Errorf("%w: messages[%d].content[%d]: %w", ErrInvalidRequest, i, j, err)
			}
		}
	}
	return nil
}

func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{'
}

// members decodes the JSON object raw into its members by exact name. It
// refuses an object that holds a member twice, or one whose name is one
// of fields but for its case (as Unicode simple folding, which Go's
// decoders match by, has it).
func members(raw []byte, fields []string) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil {
		return nil, err
	} else if t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	m := map[string]json.RawMessage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if _, dup := m[name]; dup {
			return nil, fmt.Errorf("%w: member %q is given twice", errAmbiguous, name)
		}
		for _, f := range fields {
			if name != f && strings.EqualFold(name, f) {
				return nil, fmt.Errorf("%w: member %q is %q but for its case; send %q alone", errAmbiguous, name, f, f)
			}
		}
		m[name] = v
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	return m, nil
}
