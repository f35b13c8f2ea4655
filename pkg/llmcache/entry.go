package llmcache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

// ErrCorruptEntry is wrapped by the error returned when a stored answer
// fails its checksum or cannot be decoded. The cache treats such an entry
// as a miss and overwrites it.
var ErrCorruptEntry = errors.New("llmcache: corrupt cache entry")

// storedAnswer is one stored answer: the HTTP response the model gave, byte for
// byte, and what it cost.
type storedAnswer struct {
	Created, Expires time.Time
	Status           int    // always 200: only successful answers are stored
	ContentType      string // application/json, or text/event-stream
	Model            string // the model the request named
	Stream           bool   // Body is a server-sent event stream
	Usage            usage  // what the answer cost when it was made
	Body             []byte // the response body, byte for byte
}

// usage is the tokens one answer cost.
type usage struct {
	PromptTokens     int64
	CompletionTokens int64
	// Estimated is set when the answer carried no usage (a stream without
	// stream_options.include_usage, or a failed call) and the counts come
	// from the offline tokenizer instead.
	Estimated bool
}

// Total is PromptTokens + CompletionTokens.
func (u usage) Total() int64 { return u.PromptTokens + u.CompletionTokens }

const (
	entryMagic   = "OGC1"
	flagStream   = 1 << 0
	flagEstimate = 1 << 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// marshal encodes e: magic, created and expiry in Unix nanoseconds, status,
// flags, prompt and completion tokens, then length-prefixed content type,
// model and body, and a CRC-32C of all that.
func (e *storedAnswer) marshal() []byte {
	b := make([]byte, 0, 64+len(e.ContentType)+len(e.Model)+len(e.Body))
	b = append(b, entryMagic...)
	b = binary.BigEndian.AppendUint64(b, uint64(e.Created.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, uint64(e.Expires.UnixNano()))
	b = binary.BigEndian.AppendUint16(b, uint16(e.Status))
	var flags byte
	if e.Stream {
		flags |= flagStream
	}
	if e.Usage.Estimated {
		flags |= flagEstimate
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(e.Usage.PromptTokens))
	b = binary.AppendUvarint(b, uint64(e.Usage.CompletionTokens))
	for _, s := range [][]byte{[]byte(e.ContentType), []byte(e.Model), e.Body} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// unmarshalEntry decodes b. The body aliases b.
func unmarshalEntry(b []byte) (*storedAnswer, error) {
	const fixed = len(entryMagic) + 8 + 8 + 2 + 1
	if len(b) < fixed+4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorruptEntry, len(b))
	}
	data, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(data, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorruptEntry)
	}
	if string(data[:4]) != entryMagic {
		return nil, fmt.Errorf("%w: unknown format %q", ErrCorruptEntry, data[:4])
	}
	e := &storedAnswer{
		Created: time.Unix(0, int64(binary.BigEndian.Uint64(data[4:]))),
		Expires: time.Unix(0, int64(binary.BigEndian.Uint64(data[12:]))),
		Status:  int(binary.BigEndian.Uint16(data[20:])),
	}
	flags := data[22]
	if flags&^(flagStream|flagEstimate) != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", ErrCorruptEntry, flags)
	}
	e.Stream = flags&flagStream != 0
	e.Usage.Estimated = flags&flagEstimate != 0
	rest := data[fixed:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return 0, false
		}
		rest = rest[n:]
		return v, true
	}
	p, ok1 := uv()
	c, ok2 := uv()
	if !ok1 || !ok2 || p > 1<<40 || c > 1<<40 {
		return nil, fmt.Errorf("%w: bad token counts", ErrCorruptEntry)
	}
	e.Usage.PromptTokens, e.Usage.CompletionTokens = int64(p), int64(c)
	var parts [3][]byte
	for i := range parts {
		n, ok := uv()
		if !ok || n > uint64(len(rest)) {
			return nil, fmt.Errorf("%w: truncated", ErrCorruptEntry)
		}
		parts[i], rest = rest[:n], rest[n:]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorruptEntry, len(rest))
	}
	e.ContentType, e.Model, e.Body = string(parts[0]), string(parts[1]), parts[2]
	return e, nil
}
