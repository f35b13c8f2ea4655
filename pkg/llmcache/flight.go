package llmcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// flight is one upstream answer as it arrives, readable from the start by
// every caller waiting for it, each at its own pace. A plain answer is shown
// once it is whole and judged (JSON is of no use in part); a stream event
// by event, but for the final [DONE] marker.
type flight struct {
	head   chan struct{} // closed once status and header, or err, are set
	status int
	header http.Header
	how    string // overrides the caller's "miss" when set: "hit" or "shared"
	err    error

	mu      sync.Mutex
	buf     []byte
	shown   int  // readers see buf[:shown]; all of it once done
	stream  bool // buf is a server-sent event stream
	done    bool
	readErr error
	more    chan struct{} // closed and replaced whenever buf grows or done is set

	sharers []*stepCounters // guarded by the Cache's mu
}

func newFlight(stream bool) *flight {
	return &flight{head: make(chan struct{}), more: make(chan struct{}), stream: stream}
}

func (f *flight) join(st *stepCounters) { f.sharers = append(f.sharers, st) }

func (f *flight) fail(err error) {
	f.err = err
	close(f.head)
	f.end(err)
}

func (f *flight) start(status int, h http.Header, how string) {
	f.status, f.header, f.how = status, h.Clone(), how
	close(f.head)
}

func (f *flight) write(p []byte) {
	if len(p) == 0 {
		return
	}
	f.mu.Lock()
	f.buf = append(f.buf, p...)
	if f.stream {
		f.shown = streamShown(f.buf, f.shown)
	}
	close(f.more)
	f.more = make(chan struct{})
	f.mu.Unlock()
}

// streamShown returns how much of a stream its readers may see before it
// ends: every complete event up to, not including, the [DONE] marker, so a
// caller that stops reading at the marker (as go-openai does) returns only
// after the answer is stored. from is the previous result.
func streamShown(buf []byte, from int) int {
	for {
		i := bytes.Index(buf[from:], []byte("\n\n"))
		if i < 0 {
			return from
		}
		event := buf[from : from+i]
		if data, ok := bytes.CutPrefix(bytes.TrimSpace(event), []byte("data:")); ok && string(bytes.TrimSpace(data)) == "[DONE]" {
			return from
		}
		from += i + 2
	}
}

func (f *flight) end(err error) {
	f.mu.Lock()
	f.done, f.readErr = true, err
	f.shown = len(f.buf)
	close(f.more)
	f.mu.Unlock()
}

// bytes returns the answer so far; the whole answer once the fill has
// read it.
func (f *flight) bytes() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf
}

// response waits for the status and header of the flight's answer, or for
// req's context, and returns a response whose body reads the answer as it
// arrives. The caller's context ends the caller's wait and its reads, not
// the flight.
func (f *flight) response(req *http.Request, k Key, how string) (*http.Response, error) {
	ctx := req.Context()
	select {
	case <-f.head:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if f.err != nil {
		return nil, f.err
	}
	h := f.header.Clone()
	if f.how != "" && how == "miss" {
		how = f.how
	}
	h.Set(HeaderCache, how)
	h.Set(HeaderCacheKey, k.String())
	return &http.Response{
		Status:     fmt.Sprintf("%d %s", f.status, http.StatusText(f.status)),
		StatusCode: f.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: &flightReader{f: f, ctx: ctx},
		ContentLength: -1, Request: req,
	}, nil
}

type flightReader struct {
	f      *flight
	ctx    context.Context
	off    int
	closed bool
}

func (r *flightReader) Read(p []byte) (int, error) {
	if r.closed {
		return 0, errors.New("llmcache: read on closed response body")
	}
	for {
		r.f.mu.Lock()
		if r.off < r.f.shown {
			n := copy(p, r.f.buf[r.off:r.f.shown])
			r.off += n
			r.f.mu.Unlock()
			return n, nil
		}
		if r.f.done {
			err := r.f.readErr
			r.f.mu.Unlock()
			if err == nil {
				err = io.EOF
			}
			return 0, err
		}
		more := r.f.more
		r.f.mu.Unlock()
		select {
		case <-more:
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		}
	}
}

func (r *flightReader) Close() error {
	r.closed = true
	return nil
}
