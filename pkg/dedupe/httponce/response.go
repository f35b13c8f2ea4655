package httponce

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/oncegate/oncegate/pkg/dedupe"
)

// recorder buffers a handler's response until it returns.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.wrote {
		return
	}
	r.status, r.wrote = status, true
}

func (r *recorder) Write(p []byte) (int, error) {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	return r.body.Write(p)
}

// Flush does nothing: the response goes out when the handler returns.
func (r *recorder) Flush() {}

// send writes the buffered response to w, with all its headers.
func (r *recorder) send(w http.ResponseWriter) {
	if !r.wrote {
		r.status = http.StatusOK
	}
	for k, vs := range r.header {
		w.Header()[k] = vs
	}
	if r.header.Get("Content-Length") == "" {
		w.Header().Set("Content-Length", strconv.Itoa(r.body.Len()))
	}
	w.WriteHeader(r.status)
	w.Write(r.body.Bytes())
}

// A kept response is encoded as: a version byte, a flags byte (bit 0: body
// omitted; bit 1: no-store, kept without its headers and body), the status
// (uvarint), the number of header values (uvarint), each as name and value
// (uvarint length, bytes), then the body.
const (
	responseVersion = 1
	flagBodyOmitted = 1
	flagNoStore     = 2
)

// encode returns r as kept: its status, the headers g keeps and its body,
// or without its body if the whole would not fit the ledger, or its status
// alone if it is marked Cache-Control: no-store.
func (g *gate) encode(r *recorder) []byte {
	status := r.status
	if !r.wrote {
		status = http.StatusOK
	}
	if noStore(r.header) {
		b := []byte{responseVersion, flagNoStore}
		b = binary.AppendUvarint(b, uint64(status))
		return binary.AppendUvarint(b, 0)
	}
	head := func(flags byte) []byte {
		b := []byte{responseVersion, flags}
		b = binary.AppendUvarint(b, uint64(status))
		var n int
		for _, h := range g.headers {
			n += len(r.header.Values(h))
		}
		b = binary.AppendUvarint(b, uint64(n))
		for _, h := range g.headers {
			for _, v := range r.header.Values(h) {
				b = binary.AppendUvarint(b, uint64(len(h)))
				b = append(b, h...)
				b = binary.AppendUvarint(b, uint64(len(v)))
				b = append(b, v...)
			}
		}
		return b
	}
	b := head(0)
	if len(b)+r.body.Len() <= dedupe.MaxResultBytes {
		return append(b, r.body.Bytes()...)
	}
	return head(flagBodyOmitted)
}

// noStore reports whether h carries the Cache-Control directive no-store:
// the response must not be stored, so it is not kept to be replayed.
func noStore(h http.Header) bool {
	for _, v := range h.Values("Cache-Control") {
		for d := range strings.SplitSeq(v, ",") {
			name, _, _ := strings.Cut(d, "=")
			if strings.EqualFold(strings.TrimSpace(name), "no-store") {
				return true
			}
		}
	}
	return false
}

var errCorrupt = errors.New("httponce: kept response does not decode")

// replay writes a kept response to w, marked as replayed.
func replay(w http.ResponseWriter, b []byte) {
	status, header, body, flags, err := decode(b)
	if err != nil {
		problem(w, http.StatusInternalServerError, "Ledger_unavailable", "Kept response unreadable",
			"The response kept for this Idempotency-Key could not be read.")
		return
	}
	for k, vs := range header {
		w.Header()[k] = vs
	}
	w.Header().Set(HeaderReplayed, "true")
	switch {
	case flags&flagNoStore != 0:
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set(headerBodyOmitted, "no-store")
	case flags&flagBodyOmitted != 0:
		w.Header().Set(headerBodyOmitted, "omitted")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

func decode(b []byte) (status int, header http.Header, body []byte, flags byte, err error) {
	if len(b) < 2 || b[0] != responseVersion {
		return 0, nil, nil, 0, errCorrupt
	}
	flags = b[1]
	p := b[2:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	str := func() (string, bool) {
		n, ok := next()
		if !ok || n > uint64(len(p)) {
			return "", false
		}
		s := string(p[:n])
		p = p[n:]
		return s, true
	}
	st, ok := next()
	if !ok || st < 100 || st > 999 {
		return 0, nil, nil, 0, errCorrupt
	}
	n, ok := next()
	if !ok || n > uint64(len(p)) {
		return 0, nil, nil, 0, errCorrupt
	}
	header = http.Header{}
	for range n {
		k, ok1 := str()
		v, ok2 := str()
		if !ok1 || !ok2 {
			return 0, nil, nil, 0, errCorrupt
		}
		header.Add(k, v)
	}
	return int(st), header, p, flags, nil
}

// problem answers with an RFC 9457 problem document; anchor is the
// heading of the package documentation that describes it.
func problem(w http.ResponseWriter, status int, anchor, title, detail string) {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"https://pkg.go.dev/github.com/oncegate/oncegate/pkg/dedupe/httponce#hdr-" + anchor, title, status, detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
