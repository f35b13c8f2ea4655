package llmcache

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/tiktoken-go/tokenizer"
)

// verdict is what the cache learned from one upstream answer.
type verdict struct {
	complete bool   // a whole, successful answer that may be stored
	reason   string // why not, when !complete
	usage    *usage // from the answer, nil when it carried none
	text     string // the generated text and tool arguments, for estimates

	// tokens counts text's tokens, if counted is set: a stream's text is
	// counted as it arrives.
	tokens  int64
	counted bool
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
		v.usage = &usage{PromptTokens: r.Usage.PromptTokens, CompletionTokens: r.Usage.CompletionTokens}
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
	var in streamInspector
	return in.verdict(body)
}

// streamInspector judges a stream as it arrives, so that what is left to
// judge once its last event is in is that event: a fill feeds it the
// answer so far after every read, and asks for the verdict at the end.
// Fed any prefixes of one body, it gives the verdict inspectStream gives
// the whole.
type streamInspector struct {
	off    int // body[:off] is judged: whole lines
	failed string
	done   bool
	usage  *usage
	text   strings.Builder
	finish map[int]string

	// count, if set, counts the text's tokens as it arrives (for a stream
	// that will report no usage), a word at a time: text[:counted] has
	// tokens tokens.
	count   tokenizer.Codec
	counted int
	tokens  int64
}

// feed judges the whole lines of body (the answer so far) not yet judged.
func (in *streamInspector) feed(body []byte) {
	for in.failed == "" {
		i := bytes.IndexByte(body[in.off:], '\n')
		if i < 0 {
			return
		}
		in.line(body[in.off : in.off+i+1])
		in.off += i + 1
	}
}

// verdict judges the rest of body, the whole answer, and returns the
// verdict on it.
func (in *streamInspector) verdict(body []byte) verdict {
	in.feed(body)
	if in.failed == "" && in.off < len(body) {
		in.line(body[in.off:])
		in.off = len(body)
	}
	if in.count != nil {
		in.countText(true)
	}
	v := verdict{usage: in.usage, text: in.text.String(), tokens: in.tokens, counted: in.count != nil}
	switch {
	case in.failed != "":
		v.reason = in.failed
	case !in.done:
		v.reason = "stream ended before [DONE]"
	case len(in.finish) == 0:
		v.reason = "stream has no choices"
	default:
		for _, r := range in.finish {
			if !finished(r) {
				v.reason = "finish_reason " + quoteReason(r)
				return v
			}
		}
		v.complete = true
	}
	return v
}

// line judges one line of the stream.
func (in *streamInspector) line(line []byte) {
	line = bytes.TrimRight(line, "\r\n")
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return // blank separators, comments, event names
	}
	data = bytes.TrimSpace(data)
	if in.done {
		in.failed = "data after [DONE]"
		return
	}
	if string(data) == "[DONE]" {
		in.done = true
		return
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
		in.failed = "stream event is not a chunk: " + err.Error()
		return
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		in.failed = "stream carries an error event"
		return
	}
	if c.Usage != nil {
		in.usage = &usage{PromptTokens: c.Usage.PromptTokens, CompletionTokens: c.Usage.CompletionTokens}
	}
	if in.finish == nil {
		in.finish = map[int]string{}
	}
	for _, ch := range c.Choices {
		in.text.WriteString(ch.Delta.Content)
		for _, tc := range ch.Delta.ToolCalls {
			in.text.WriteString(tc.Function.Arguments)
		}
		if _, seen := in.finish[ch.Index]; !seen {
			in.finish[ch.Index] = ""
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			in.finish[ch.Index] = *ch.FinishReason
		}
	}
	if in.count != nil {
		in.countText(false)
	}
}

// countEvery is how much text a stream's count waits for: each count
// costs more than its text (the tokenizer's set-up), and a model streams
// a token or so per event.
const countEvery = 256

// countText counts the tokens of the text not yet counted, once there are
// countEvery bytes of it, up to the last space that follows a word (the
// tokenizer starts a piece there, so the count of the two sides is the
// count of the whole); or all of it, if all is set.
func (in *streamInspector) countText(all bool) {
	rest := in.text.String()[in.counted:]
	cut := len(rest)
	if !all && len(rest) < countEvery {
		return
	}
	if !all {
		cut = 0
		for i := len(rest) - 1; i > 0; i-- {
			if c := rest[i-1]; rest[i] == ' ' && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				cut = i
				break
			}
		}
	}
	if cut > 0 {
		in.tokens += countTokens(in.count, rest[:cut])
		in.counted += cut
	}
}

func quoteReason(r string) string {
	if r == "" {
		return "missing"
	}
	return `"` + r + `"`
}
