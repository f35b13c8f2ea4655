package ratelimit

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
)

// usageBody reads an answer through to its caller and, once it has been
// read to the end, replaces the request's token reservation by the usage
// the answer reports. An answer closed before its end, too large to keep,
// or without usage leaves the reservation as it was.
type usageBody struct {
	io.ReadCloser
	t        *Transport
	reserved int64
	stream   bool

	buf      []byte
	overflow bool
	once     sync.Once
}

func (b *usageBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && !b.overflow {
		if len(b.buf)+n > maxUsageBytes {
			b.overflow, b.buf = true, nil
		} else {
			b.buf = append(b.buf, p[:n]...)
		}
	}
	if err == io.EOF {
		b.once.Do(b.settle)
	}
	return n, err
}

func (b *usageBody) Close() error {
	b.once.Do(func() {}) // cut off: the reservation stands
	return b.ReadCloser.Close()
}

func (b *usageBody) settle() {
	if b.overflow {
		return
	}
	var used int64
	var ok bool
	if b.stream {
		used, ok = streamUsage(b.buf)
	} else {
		used, ok = jsonUsage(b.buf)
	}
	b.buf = nil
	if ok {
		b.t.settle(b.reserved, used)
	}
}

type usage struct {
	Usage *struct {
		TotalTokens int64 `json:"total_tokens"`
	} `json:"usage"`
}

func jsonUsage(body []byte) (int64, bool) {
	var u usage
	if json.Unmarshal(body, &u) != nil || u.Usage == nil {
		return 0, false
	}
	return u.Usage.TotalTokens, true
}

// streamUsage returns the usage of the last event of a server-sent event
// stream that carries one.
func streamUsage(body []byte) (int64, bool) {
	var used int64
	var ok bool
	for line := range bytes.Lines(body) {
		data, found := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:"))
		if !found || !bytes.Contains(data, []byte(`"usage"`)) {
			continue
		}
		if n, good := jsonUsage(bytes.TrimSpace(data)); good {
			used, ok = n, true
		}
	}
	return used, ok
}
