package llmcache

import (
	"bytes"
	"encoding/json"
	"strings"
)

// verdict is what the cache learned from one upstream answer.
type verdict struct {
	complete bool   // a whole, successful answer that may be stored
	reason   string // why not, when !complete
	usage    *Usage // from the answer, nil when it carried none
	text     string // the generated text and tool arguments, for estimates
}

// finished reports whether a finish_reason ends a whole answer. "length"
// (cut at max_tokens) and "content_filter" are not, nor is a missing one.
func finished(reason string) bool {
	switch reason {
	case "stop", "tool_calls", "function_call", "end_turn":
		return true
	}
	return false
}

type wireUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

type wireToolCall struct {
	Function struct {
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// inspectJSON judges a plain (non-streamed) chat completion body.
func inspectJSON(body []byte) verdict {
	var r struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				Content   *string        `json:"content"`
				ToolCalls []wireToolCall `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
		Usage *wireUsage      `json:"usage"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return verdict{reason: "answer is not a chat completion: " + err.Error()}
	}
	var v verdict
	if r.Usage != nil {
		v.usage = &Usage{PromptTokens: r.Usage.PromptTokens, CompletionTokens: r.Usage.CompletionTokens}
	}
	var text strings.Builder
	for _, c := range r.Choices {
		if c.Message.Content != nil {
			text.WriteString(*c.Message.Content)
		}
		for _, tc := range c.Message.ToolCalls {
			text.WriteString(tc.Function.Arguments)
		}
	}
	v.text = text.String()
	switch {
	case len(r.Error) > 0 && string(r.Error) != "null":
		v.reason = "answer carries an error"
	case len(r.Choices) == 0:
		v.reason = "answer has no choices"
	default:
		for _, c := range r.Choices {
			if !finished(c.FinishReason) {
				v.reason = "finish_reason " + quoteReason(c.FinishReason)
				return v
			}
		}
		v.complete = true
	}
	return v
}

// inspectStream judges a streamed chat completion: server-sent events of
// chunks, ended by "data: [DONE]". A stream that stops before the marker,
// carries an error event, or leaves a choice without a finishing reason is
// not complete.
func inspectStream(body []byte) verdict {
	var v verdict
	var text strings.Builder
	finish := map[int]string{}
	done := false
	for line := range bytes.Lines(body) {
		line = bytes.TrimRight(line, "\r\n")
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // blank separators, comments, event names
		}
		data = bytes.TrimSpace(data)
		if done {
			v.reason = "data after [DONE]"
			return v
		}
		if string(data) == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Content   string         `json:"content"`
					ToolCalls []wireToolCall `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *wireUsage      `json:"usage"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(data, &c); err != nil {
			v.reason = "stream event is not a chunk: " + err.Error()
			return v
		}
		if len(c.Error) > 0 && string(c.Error) != "null" {
			v.reason = "stream carries an error event"
			return v
		}
		if c.Usage != nil {
			v.usage = &Usage{PromptTokens: c.Usage.PromptTokens, CompletionTokens: c.Usage.CompletionTokens}
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
			for _, tc := range ch.Delta.ToolCalls {
				text.WriteString(tc.Function.Arguments)
			}
			if _, seen := finish[ch.Index]; !seen {
				finish[ch.Index] = ""
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				finish[ch.Index] = *ch.FinishReason
			}
		}
	}
	v.text = text.String()
	switch {
	case !done:
		v.reason = "stream ended before [DONE]"
	case len(finish) == 0:
		v.reason = "stream has no choices"
	default:
		for _, r := range finish {
			if !finished(r) {
				v.reason = "finish_reason " + quoteReason(r)
				return v
			}
		}
		v.complete = true
	}
	return v
}

func quoteReason(r string) string {
	if r == "" {
		return "missing"
	}
	return `"` + r + `"`
}
