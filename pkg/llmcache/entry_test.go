package llmcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"
	"time"
)

func sampleAnswer() *storedAnswer {
	return &storedAnswer{
		Created: time.Unix(1_790_000_000, 123), Expires: time.Unix(1_790_086_400, 123),
		Status: 200, ContentType: "text/event-stream", Model: "gpt-4o-mini", Stream: true,
		Usage: usage{PromptTokens: 41, CompletionTokens: 300, Estimated: true},
		Body:  []byte("data: {\"choices\":[]}\n\ndata: [DONE]\n\n"),
	}
}

func TestEntryRoundTrip(t *testing.T) {
	a := sampleAnswer()
	b := a.marshal()
	got, err := unmarshalEntry(b)
	if err != nil {
		t.Fatalf("unmarshalEntry: %v", err)
	}
	if !got.Created.Equal(a.Created) || !got.Expires.Equal(a.Expires) {
		t.Errorf("times %v, %v; want %v, %v", got.Created, got.Expires, a.Created, a.Expires)
	}
	got.Created, got.Expires = a.Created, a.Expires
	if !reflect.DeepEqual(got, a) {
		t.Errorf("round trip: %+v; want %+v", got, a)
	}
	// Every single-bit flip and every truncation is caught.
	for i := range len(b) * 8 {
		c := bytes.Clone(b)
		c[i/8] ^= 1 << (i % 8)
		if _, err := unmarshalEntry(c); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("bit %d flipped: error %v; want ErrCorruptEntry", i, err)
		}
	}
	for n := range len(b) {
		if _, err := unmarshalEntry(b[:n]); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("truncated to %d bytes: error %v; want ErrCorruptEntry", n, err)
		}
	}
}

func FuzzUnmarshalEntry(f *testing.F) {
	f.Add(sampleAnswer().marshal(), false)
	whole := sampleAnswer().marshal()
	f.Add(whole[:len(whole)-4], true)
	f.Add([]byte("OGC1"), true)
	f.Fuzz(func(t *testing.T, b []byte, fixSum bool) {
		if fixSum { // reach the decoder behind the checksum
			b = binary.BigEndian.AppendUint32(bytes.Clone(b), crc32.Checksum(b, castagnoli))
		}
		a, err := unmarshalEntry(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptEntry) {
				t.Fatalf("error %v does not wrap ErrCorruptEntry", err)
			}
			return
		}
		if again := a.marshal(); !bytes.Equal(again, b) {
			t.Fatalf("decoded %+v re-encodes to %x; want %x", a, again, b)
		}
	})
}

func TestInspect(t *testing.T) {
	for _, tt := range []struct {
		name     string
		stream   bool
		body     string
		complete bool
		usage    bool
	}{
		{"plain stop", false, `{"choices":[{"finish_reason":"stop","message":{"content":"ok"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`, true, true},
		{"plain tool call", false, `{"choices":[{"finish_reason":"tool_calls","message":{"tool_calls":[{"function":{"arguments":"{}"}}]}}]}`, true, false},
		{"plain length", false, `{"choices":[{"finish_reason":"length","message":{"content":"o"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`, false, true},
		{"plain filtered", false, `{"choices":[{"finish_reason":"content_filter"}]}`, false, false},
		{"plain one of two cut", false, `{"choices":[{"finish_reason":"stop"},{"finish_reason":"length"}]}`, false, false},
		{"plain no choices", false, `{"choices":[]}`, false, false},
		{"plain error", false, `{"error":{"message":"overloaded"},"choices":[{"finish_reason":"stop"}]}`, false, false},
		{"plain not json", false, `<html>bad gateway</html>`, false, false},
		{"stream whole", true, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n", true, false},
		{"stream with usage", true, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\ndata:[DONE]\n\n", true, true},
		{"stream no done", true, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n", false, false},
		{"stream no finish", true, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n", false, false},
		{"stream length", true, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n", false, false},
		{"stream second choice unfinished", true, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"},{\"index\":1,\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n", false, false},
		{"stream error event", true, "data: {\"error\":{\"message\":\"boom\"}}\n\ndata: [DONE]\n\n", false, false},
		{"stream data after done", true, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\ndata: {}\n\n", false, false},
		{"stream empty", true, "", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inspect := inspectJSON
			if tt.stream {
				inspect = inspectStream
			}
			v := inspect([]byte(tt.body))
			if v.complete != tt.complete || (v.usage != nil) != tt.usage {
				t.Errorf("complete %v (%s), usage %v; want complete %v, usage %v", v.complete, v.reason, v.usage, tt.complete, tt.usage)
			}
			if !v.complete && v.reason == "" {
				t.Error("incomplete with no reason")
			}
		})
	}
}

// FuzzInspectStream: judging never panics; a stream judged complete ends
// with the [DONE] marker and has at least one finished choice; and a
// stream judged as it arrives, in any two pieces, gets the verdict the
// whole gets.
func FuzzInspectStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"), uint16(30), uint16(70))
	f.Add([]byte("data: [DONE]\n\n"), uint16(3), uint16(0))
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\r\n\r\ndata: {\"error\":{}}\n\ndata: [DONE]"), uint16(45), uint16(52))
	f.Fuzz(func(t *testing.T, b []byte, cut1, cut2 uint16) {
		v := inspectStream(b)
		var in streamInspector
		for _, cut := range []int{int(cut1) % (len(b) + 1), int(cut2) % (len(b) + 1)} {
			in.feed(b[:max(cut, in.off)])
		}
		if w := in.verdict(b); w.complete != v.complete || w.reason != v.reason || w.text != v.text || !reflect.DeepEqual(w.usage, v.usage) {
			t.Fatalf("judged in pieces at %d and %d: %+v; whole: %+v (%q)", cut1, cut2, w, v, b)
		}
		if v.complete && !bytes.Contains(b, []byte("[DONE]")) {
			t.Fatalf("complete without [DONE]: %q", b)
		}
		if !v.complete && v.reason == "" {
			t.Fatalf("incomplete with no reason: %q", b)
		}
		_ = inspectJSON(b)
		shown := streamShown(b, 0)
		if shown < 0 || shown > len(b) {
			t.Fatalf("streamShown = %d for %d bytes", shown, len(b))
		}
	})
}
