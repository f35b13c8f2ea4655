package standin

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"
)

// reply is one generated answer, before it is written as JSON or chunks.
type reply struct {
	id, model                      string
	created                        int64
	tokens                         []string // concatenated, they are the content
	finishReason                   string
	promptTokens, completionTokens int
}

func (a *reply) usage() usage {
	return usage{
		PromptTokens:     a.promptTokens,
		CompletionTokens: a.completionTokens,
		TotalTokens:      a.promptTokens + a.completionTokens,
	}
}

func (a *reply) completion() completion {
	return completion{
		ID: a.id, Object: "chat.completion", Created: a.created,
		Model: a.model, SystemFingerprint: Fingerprint,
		Choices: []choice{{
			Message:      responseMessage{Role: "assistant", Content: strings.Join(a.tokens, "")},
			FinishReason: a.finishReason,
		}},
		Usage: a.usage(),
	}
}

// digest hashes the canonical request: every field length-prefixed, so
// that no two different prompts encode to the same bytes.
func (p prompt) digest() [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	put := func(s string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put("oncegate-standin/v1")
	put(p.model)
	binary.BigEndian.PutUint64(n[:], uint64(len(p.messages)))
	h.Write(n[:])
	for _, m := range p.messages {
		put(m.role)
		put(m.name)
		put(m.text)
	}
	if p.schema != nil {
		put("response_format/json_schema")
		put(string(p.schema))
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// promptTokens estimates the prompt's tokens: per message 4 + ceil(bytes/4)
// of role, name and text, plus 3 for priming the reply.
func (p prompt) promptTokens() int {
	n := 3
	for _, m := range p.messages {
		n += 4 + (len(m.role)+len(m.name)+len(m.text)+3)/4
	}
	return n
}

// words are picked by the digest to make the summary readable.
var words = [64]string{
	"amber", "anchor", "atlas", "beacon", "birch", "breeze", "cedar", "cinder",
	"cobalt", "comet", "coral", "crystal", "delta", "dune", "echo", "ember",
	"fable", "falcon", "fern", "flint", "garnet", "glacier", "harbor", "hazel",
	"horizon", "indigo", "iris", "jasper", "juniper", "kestrel", "lagoon", "lantern",
	"linden", "lotus", "maple", "meadow", "meteor", "mosaic", "nectar", "nimbus",
	"oasis", "onyx", "orbit", "pebble", "prism", "quartz", "quill", "raven",
	"ripple", "saffron", "sequoia", "sierra", "summit", "tundra", "umber", "velvet",
	"vertex", "willow", "wren", "yarrow", "zenith", "zephyr", "basalt", "canyon",
}

// excerptWords and excerptBytes bound the quote of the last message.
const (
	excerptWords = 8
	excerptBytes = 60
)

// answer generates the reply to p, keeping at most maxTokens tokens when
// maxTokens > 0.
func answer(p prompt, maxTokens int, created int64, offSchema float64) *reply {
	d := p.digest()
	if p.schema != nil {
		off := float64(binary.BigEndian.Uint64(d[24:32]))/(1<<64) < offSchema
		content := schemaAnswer(p.schema, d, off)
		return &reply{
			id: "chatcmpl-standin-" + hex.EncodeToString(d[:12]), model: p.model, created: created,
			tokens: []string{content}, finishReason: "stop",
			promptTokens: p.promptTokens(), completionTokens: 1 + len(content)/4,
		}
	}
	last := p.messages[len(p.messages)-1]
	for i := len(p.messages) - 1; i >= 0; i-- {
		if p.messages[i].role == "user" {
			last = p.messages[i]
			break
		}
	}
	quote := excerpt(last.text)

	var b strings.Builder
	b.WriteString("Reply ")
	b.WriteString(hex.EncodeToString(d[:4]))
	b.WriteString(" to ")
	b.WriteString(strconv.Itoa(len(p.messages)))
	if len(p.messages) == 1 {
		b.WriteString(" message")
	} else {
		b.WriteString(" messages")
	}
	b.WriteString(" for model ")
	b.WriteString(p.model)
	b.WriteString(", last from ")
	b.WriteString(last.role)
	b.WriteString(": \"")
	b.WriteString(quote)
	b.WriteString("\". Summary:")
	// 6 to 13 words, so answers also differ in length.
	nw := 6 + int(d[4]%8)
	for i := range nw {
		b.WriteByte(' ')
		b.WriteString(words[d[5+i]%64])
	}
	b.WriteByte('.')

	tokens := []string{Label}
	for _, f := range strings.Fields(b.String()) {
		tokens = append(tokens, " "+f)
	}
	finish := "stop"
	if maxTokens > 0 && len(tokens) > maxTokens {
		tokens = tokens[:maxTokens]
		finish = "length"
	}
	return &reply{
		id:               "chatcmpl-standin-" + hex.EncodeToString(d[:12]),
		model:            p.model,
		created:          created,
		tokens:           tokens,
		finishReason:     finish,
		promptTokens:     p.promptTokens(),
		completionTokens: len(tokens),
	}
}

// excerpt is the start of s with runs of white space collapsed: at most
// excerptWords words and excerptBytes bytes, cut at a rune boundary, with
// "…" if anything was left out.
func excerpt(s string) string {
	f := strings.Fields(s)
	cut := len(f) > excerptWords
	if cut {
		f = f[:excerptWords]
	}
	e := strings.Join(f, " ")
	if len(e) > excerptBytes {
		n := excerptBytes
		for n > 0 && !utf8.RuneStart(e[n]) {
			n--
		}
		e, cut = e[:n], true
	}
	if cut {
		e += "…"
	}
	return e
}
