package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/standin"
)

// Every valid payload carries its intent's number as "soak" and six digits
// in its key fields; every hostile copy carries "hostile", six digits, "c"
// and its copy number. Effects, dead letters and model prompts are traced
// back to their intent by these markers.
var (
	intentMarker  = regexp.MustCompile(`soak(\d{6})`)
	hostileMarker = regexp.MustCompile(`hostile(\d{6})c(\d+)`)
)

// intentOf returns the intent a body refers to, or -1.
func intentOf(b []byte) int {
	m := intentMarker.FindSubmatch(b)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// hostileOf returns the hostile intent and copy a body refers to, or -1.
func hostileOf(b []byte) (intent, copy int) {
	m := hostileMarker.FindSubmatch(b)
	if m == nil {
		return -1, -1
	}
	intent, _ = strconv.Atoi(string(m[1]))
	copy, _ = strconv.Atoi(string(m[2]))
	return intent, copy
}

// sinkEffect is one effect a sink performed.
type sinkEffect struct {
	at      time.Time
	intent  int
	hostile int // the hostile intent whose payload this is, or -1
	key     string
}

// callLog writes one JSON line per call a sink receives.
type callLog struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

func newCallLog(path string) (*callLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &callLog{f: f, w: bufio.NewWriterSize(f, 64<<10)}, nil
}

func (l *callLog) add(v any) {
	b, _ := json.Marshal(v)
	l.mu.Lock()
	l.w.Write(b)
	l.w.WriteByte('\n')
	l.mu.Unlock()
}

func (l *callLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.w.Flush()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

type call struct {
	T       string `json:"t"`
	Key     string `json:"key,omitempty"`
	Intent  int    `json:"intent"`
	Outcome string `json:"outcome"`
}

// paymentSink is an HTTP effect target that honours Idempotency-Key the way
// payment providers do: the first request with a key is performed and its
// response stored; a later one with the same body gets the stored response
// again (Idempotent-Replayed: true); one that arrives while the first is in
// flight gets 409; one with another body gets 422. A share of new charges
// are committed and then answered with a closed connection: the charge
// sinkState is what both recording sinks keep under one lock: their random
// source, the effects they performed, and the requests in flight.
type sinkState struct {
	mu       sync.Mutex
	rng      *rand.Rand
	effects  []sinkEffect
	inFlight int
}

func (s *sinkState) busy() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

func (s *sinkState) snapshot() []sinkEffect {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sinkEffect(nil), s.effects...)
}

// happened, the response was lost.
type paymentSink struct {
	dropRate float64
	latency  time.Duration
	log      *callLog

	sinkState
	keys map[string]*payment

	// refusing makes the sink refuse every new charge, for good (400),
	// while it is set: an account the provider has restricted. A charge it
	// has performed is still replayed.
	refusing atomic.Bool

	calls, created, replayed, inFlight409, mismatch422, dropped, noKey, refused atomic.Int64
}

type payment struct {
	hash   [32]byte
	done   bool
	resp   []byte
	intent int
}

func newPaymentSink(seed uint64, dropRate float64, log *callLog) *paymentSink {
	return &paymentSink{
		dropRate: dropRate, latency: 5 * time.Millisecond, log: log,
		sinkState: sinkState{rng: rand.New(rand.NewPCG(seed, 0x7061796d656e74))}, keys: map[string]*payment{},
	}
}

func (s *paymentSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	c, ok := readCall(w, r)
	if !ok {
		return
	}
	key, intent, hostile := c.key, c.intent, c.hostile
	logCall := func(outcome string) {
		s.log.add(call{T: time.Now().Format(time.RFC3339Nano), Key: key, Intent: intent, Outcome: outcome})
	}
	if key == "" {
		s.noKey.Add(1)
		logCall("400_no_key")
		http.Error(w, `{"error":"Idempotency-Key required"}`, http.StatusBadRequest)
		return
	}
	h := sha256.Sum256(c.body)
	s.mu.Lock()
	p := s.keys[key]
	switch {
	case p == nil && s.refusing.Load():
		s.mu.Unlock()
		s.refused.Add(1)
		logCall("400_refused")
		http.Error(w, `{"error":{"type":"invalid_request_error","code":"account_restricted","message":"this account cannot create charges"}}`, http.StatusBadRequest)
	case p == nil:
		p = &payment{hash: h, intent: intent}
		s.keys[key] = p
		s.inFlight++
		drop := s.rng.Float64() < s.dropRate
		wait := s.latency/2 + time.Duration(s.rng.Int64N(int64(s.latency/2)+1))
		s.mu.Unlock()
		time.Sleep(wait) // the charge is in flight: a concurrent retry gets 409
		s.mu.Lock()
		p.done = true
		p.resp = fmt.Appendf(nil, `{"id":"ch_%06d","status":"succeeded"}`, len(s.effects)+1)
		s.effects = append(s.effects, sinkEffect{at: time.Now(), intent: intent, hostile: hostile, key: key})
		s.inFlight--
		resp := p.resp
		s.mu.Unlock()
		s.created.Add(1)
		if drop {
			s.dropped.Add(1)
			logCall("created_response_dropped")
			hangUp(w)
			return
		}
		logCall("created")
		w.Header().Set("Content-Type", "application/json")
		w.Write(resp)
	case !p.done:
		s.mu.Unlock()
		s.inFlight409.Add(1)
		logCall("409_in_flight")
		http.Error(w, `{"error":"a request with this Idempotency-Key is in progress"}`, http.StatusConflict)
	case p.hash != h:
		s.mu.Unlock()
		s.mismatch422.Add(1)
		logCall("422_other_body")
		http.Error(w, `{"error":"Idempotency-Key reused with different parameters"}`, http.StatusUnprocessableEntity)
	default:
		resp := p.resp
		s.mu.Unlock()
		s.replayed.Add(1)
		logCall("replayed")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		w.Write(resp)
	}
}

// hangUp closes the connection without an answer.
func hangUp(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("soak: the sink's ResponseWriter cannot be hijacked")
	}
	conn, _, err := hj.Hijack()
	if err == nil {
		conn.Close()
	}
}

// oneShotSink is a target without idempotency support: every call acts,
// and is counted. A share of calls act and then lose their response.
type oneShotSink struct {
	dropRate float64
	log      *callLog

	sinkState

	calls, dropped atomic.Int64
}

func newOneShotSink(seed uint64, dropRate float64, log *callLog) *oneShotSink {
	return &oneShotSink{dropRate: dropRate, log: log, sinkState: sinkState{rng: rand.New(rand.NewPCG(seed, 0x6f6e6573686f74))}}
}

func (s *oneShotSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	s.mu.Lock()
	s.inFlight++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	c, ok := readCall(w, r)
	if !ok {
		return
	}
	key, intent, hostile := c.key, c.intent, c.hostile
	s.mu.Lock()
	s.effects = append(s.effects, sinkEffect{at: time.Now(), intent: intent, hostile: hostile, key: key})
	n := len(s.effects)
	drop := s.rng.Float64() < s.dropRate
	s.mu.Unlock()
	if drop {
		s.dropped.Add(1)
		s.log.add(call{T: time.Now().Format(time.RFC3339Nano), Key: key, Intent: intent, Outcome: "sent_response_dropped"})
		hangUp(w)
		return
	}
	s.log.add(call{T: time.Now().Format(time.RFC3339Nano), Key: key, Intent: intent, Outcome: "sent"})
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"msg_%06d"}`, n)
}

// modelProxy serves the stand-in model and counts, per intent, the chat
// calls made, those answered, and the tokens of the answers.
type modelProxy struct {
	s *standin.Server

	mu       sync.Mutex
	calls    map[int]int
	answered map[int]int
	by       map[int]map[int]int // intent → replica → answers
	first    map[int]int64       // tokens of the intent's first answer
	times    map[int][]answerAt  // when each answer was made, and by whom
	spent    int64               // tokens of every answer
	inFlight int
}

func newModelProxy(s *standin.Server) *modelProxy {
	return &modelProxy{s: s, calls: map[int]int{}, answered: map[int]int{}, by: map[int]map[int]int{}, first: map[int]int64{}, times: map[int][]answerAt{}}
}

// answerAt is one answer the model made for an intent.
type answerAt struct {
	replica int
	at      time.Time
	tokens  int64
}

// replicaPrefix is how a replica's model base URL names it: /r<N>/v1.
var replicaPrefix = regexp.MustCompile(`^/r(\d+)(/.*)$`)

func (m *modelProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	replica := -1
	if sm := replicaPrefix.FindStringSubmatch(r.URL.Path); sm != nil {
		replica, _ = strconv.Atoi(sm[1])
		r.URL.Path = sm[2]
	}
	if r.URL.Path != "/v1/chat/completions" {
		m.s.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	intent := intentOf(body)
	m.mu.Lock()
	m.calls[intent]++
	m.inFlight++
	m.mu.Unlock()
	cw := &captureWriter{ResponseWriter: w, status: http.StatusOK}
	m.s.ServeHTTP(cw, r)
	var resp struct {
		Usage struct {
			Total int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inFlight--
	if cw.status == http.StatusOK && cw.wrote && json.Unmarshal(cw.buf.Bytes(), &resp) == nil {
		m.answered[intent]++
		if m.by[intent] == nil {
			m.by[intent] = map[int]int{}
		}
		m.by[intent][replica]++
		m.times[intent] = append(m.times[intent], answerAt{replica, time.Now(), resp.Usage.Total})
		m.spent += resp.Usage.Total
		if _, ok := m.first[intent]; !ok {
			m.first[intent] = resp.Usage.Total
		}
	}
}

func (m *modelProxy) busy() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inFlight
}

// captureWriter passes a response through and keeps a copy of it.
type captureWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
	buf    bytes.Buffer
}

func (c *captureWriter) WriteHeader(code int) {
	c.status = code
	c.ResponseWriter.WriteHeader(code)
}

func (c *captureWriter) Write(b []byte) (int, error) {
	c.wrote = true
	if c.buf.Len() < 1<<20 {
		c.buf.Write(b)
	}
	return c.ResponseWriter.Write(b)
}

func (c *captureWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// serveHTTP serves h on a loopback port and returns its base URL and a
// function that stops it.
func serveHTTP(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "soak: http server:", err)
		}
	}()
	return "http://" + ln.Addr().String(), func() { hs.Close(); <-done }, nil
}

// effectCall is what an effect call to a sink carries.
type effectCall struct {
	body    []byte
	key     string // its Idempotency-Key
	intent  int    // the intent the body names, or -1
	hostile int    // the hostile intent whose payload it is, or -1
}

// readCall reads an effect call. It answers 400 and reports false if the
// body cannot be read.
func readCall(w http.ResponseWriter, r *http.Request) (effectCall, bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return effectCall{}, false
	}
	c := effectCall{body: body, key: r.Header.Get("Idempotency-Key"), intent: intentOf(body)}
	c.hostile, _ = hostileOf(body)
	return c, true
}
