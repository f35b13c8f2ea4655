package llmcache

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// streamOf returns text as a stream whose chunks carry a few characters
// of it each, as a model's tokens arrive.
func streamOf(text string, size int) []byte {
	var b strings.Builder
	runes := []rune(text)
	for i := 0; i < len(runes); i += size {
		piece, _ := json.Marshal(string(runes[i:min(i+size, len(runes))]))
		fmt.Fprintf(&b, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%s}}]}\n\n", piece)
	}
	b.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	return []byte(b.String())
}

// TestStreamTokensCountedAsTheyArrive: a stream's text counted a word at a
// time, as its events arrive one read at a time, has the tokens the whole
// text has.
func TestStreamTokensCountedAsTheyArrive(t *testing.T) {
	codec := codecFor("gpt-4o-mini")
	for _, text := range []string{
		"[stand-in model] Disk /var is 93% full on db-2: rotate the logs, then grow the volume by 20 GiB.",
		"Severity: high.\n\nSteps:\n1. Page the on-call.\n2. Drain db-2 (  two spaces  ) and fail over.\n",
		"func main() {\n\tfmt.Println(\"hello, world\")\n}\n",
		"Schöne Grüße — 東京のサーバーは正常です。 Résumé: ok. 12345 67.89 1e10",
		"   leading spaces, trailing spaces   ",
		"oneverylongwordwithoutanyspaceatallthatgoesonandon",
		"",
	} {
		text := strings.Repeat(text, 1+3*countEvery/max(len(text), 1)) // counted in several pieces
		for _, size := range []int{1, 3, 7, 64} {
			body := streamOf(text, size)
			in := streamInspector{count: codec}
			for i := 0; i < len(body); i += 97 { // reads of 97 bytes
				in.feed(body[:min(i+97, len(body))])
			}
			if in.counted == 0 && strings.Contains(strings.TrimSpace(text), " ") {
				t.Fatalf("%q in chunks of %d: nothing counted before the end", text, size)
			}
			v := in.verdict(body)
			if !v.complete || !v.counted || v.text != text {
				t.Fatalf("%q in chunks of %d: complete %v (%s), counted %v, text %q", text, size, v.complete, v.reason, v.counted, v.text)
			}
			if want := countTokens(codec, text); v.tokens != want {
				t.Errorf("%q in chunks of %d: %d tokens counted as it arrived; the whole has %d", text, size, v.tokens, want)
			}
		}
	}
}
