package admin

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The index: what a console page needs of every dead letter (its headers,
// never its payload), what became of it (the marks of the redrives, the
// forgets in the audit), kept in this process's memory and brought up to
// date from the streams before a page is answered, reading only what was
// kept since (at most every indexFresh). A page over a hundred thousand
// letters is then a walk over memory, whatever a bulk redrive is doing
// meanwhile; the first page reads them all once.

// msgSizeHeader is the header that gives, on a message read without its
// data, the data's size.
const msgSizeHeader = "Nats-Msg-Size"

// indexFresh is how old the index may be when a page is answered.
const indexFresh = 250 * time.Millisecond

// indexDetail bounds the detail the index keeps of a letter (a letter's
// page reads the whole one).
const indexDetail = 240

type index struct {
	a *Admin

	refresh sync.Mutex // one refresh at a time

	pendMu  sync.Mutex
	pending []pendingMark // marks noted, for applyMarks

	mu        sync.RWMutex
	built     bool
	fresh     time.Time
	streams   map[string]*streamIndex
	listed    time.Time // when the dead-letter streams were looked up
	marksLast uint64    // the last sequence of the marks bucket's stream read
	auditLast uint64    // the last sequence of the audit's forgets read
	forgot    map[string][]time.Time
}

// streamIndex is what the index holds of one dead-letter stream.
type streamIndex struct {
	name     string
	subjects []string
	last     uint64
	letters  []DeadLetter // by sequence
	marks    map[uint64]*Mark
}

func newIndex(a *Admin) *index {
	return &index{a: a, streams: map[string]*streamIndex{}, forgot: map[string][]time.Time{}}
}

// forgottenSince reports whether the failed record of key was forgotten
// after t, as far as the index knows.
func (a *Admin) forgottenSince(key string, t time.Time) bool {
	if key == "" {
		return false
	}
	x := a.index
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, at := range x.forgot[strings.ToLower(key)] {
		if at.After(t) {
			return true
		}
	}
	return false
}

// noteAudit takes an audit entry this process wrote into the index at once.
func (x *index) noteAudit(e AuditEntry) {
	if e.Action != AuditForget || e.Outcome != "cleared" || e.Key == "" {
		return
	}
	x.mu.Lock()
	x.forgot[e.Key] = append(x.forgot[e.Key], e.At)
	x.mu.Unlock()
}

// noteMark takes a mark this process wrote into the index, at the next
// page (applyMarks): a bulk redrive's workers do not wait for a page
// being answered.
func (x *index) noteMark(stream string, seq uint64, m *Mark) {
	x.pendMu.Lock()
	x.pending = append(x.pending, pendingMark{stream, seq, m})
	x.pendMu.Unlock()
}

// pendingMark is a mark noted and not applied yet.
type pendingMark struct {
	stream string
	seq    uint64
	m      *Mark
}

// applyMarks applies the marks noted since the last time.
func (x *index) applyMarks() {
	x.pendMu.Lock()
	p := x.pending
	x.pending = nil
	x.pendMu.Unlock()
	if len(p) == 0 {
		return
	}
	x.mu.Lock()
	for _, pm := range p {
		if s := x.streams[pm.stream]; s != nil {
			if cur := s.marks[pm.seq]; cur == nil || cur.Generation <= pm.m.Generation {
				s.marks[pm.seq] = pm.m
			}
		}
	}
	x.mu.Unlock()
}

// update brings the index up to date, unless it was less than indexFresh
// ago. A page that comes while another brings it up to date reads it as
// it is, unless it was never built.
func (x *index) update(ctx context.Context) error {
	x.mu.RLock()
	built, fresh := x.built, time.Since(x.fresh) < indexFresh
	x.mu.RUnlock()
	if fresh {
		return nil
	}
	if built {
		if !x.refresh.TryLock() {
			return nil
		}
	} else {
		x.refresh.Lock()
	}
	defer x.refresh.Unlock()
	x.mu.RLock()
	fresh = time.Since(x.fresh) < indexFresh
	x.mu.RUnlock()
	if fresh {
		return nil
	}
	started := time.Now()
	if err := x.load(ctx); err != nil {
		return err
	}
	x.mu.Lock()
	x.built, x.fresh = true, started
	x.mu.Unlock()
	return nil
}

// load reads what was kept since the last load.
func (x *index) load(ctx context.Context) error {
	a := x.a
	if time.Since(x.listed) > 5*time.Second {
		ds, err := a.deadStreams(ctx, &Selection{})
		if err != nil {
			return err
		}
		x.mu.Lock()
		for _, d := range ds {
			if s := x.streams[d.name]; s != nil {
				s.subjects = d.subjects
				continue
			}
			x.streams[d.name] = &streamIndex{name: d.name, subjects: d.subjects, marks: map[uint64]*Mark{}}
		}
		x.mu.Unlock()
		x.listed = time.Now()
	}
	x.mu.RLock()
	streams := make([]*streamIndex, 0, len(x.streams))
	for _, s := range x.streams {
		streams = append(streams, s)
	}
	x.mu.RUnlock()
	for _, s := range streams {
		if err := x.loadLetters(ctx, s); err != nil {
			return err
		}
	}
	if err := x.loadMarks(ctx); err != nil {
		return err
	}
	return x.loadForgets(ctx)
}

func (x *index) loadLetters(ctx context.Context, s *streamIndex) error {
	a := x.a
	st, err := a.stream(ctx, s.name)
	if err != nil {
		return err
	}
	state := st.CachedInfo().State
	x.mu.Lock()
	if i, _ := slices.BinarySearchFunc(s.letters, state.FirstSeq, func(d DeadLetter, seq uint64) int { return cmpUint(d.Seq, seq) }); i > 0 {
		s.letters = slices.Delete(s.letters, 0, i) // gone from the stream (its limits, a purge)
	}
	last, subjects := s.last, s.subjects
	x.mu.Unlock()
	if state.LastSeq <= last {
		return nil
	}
	var batch []DeadLetter
	flush := func() {
		x.mu.Lock()
		s.letters = append(s.letters, batch...)
		if n := len(batch); n > 0 {
			s.last = batch[n-1].Seq
		}
		x.mu.Unlock()
		batch = batch[:0]
	}
	err = a.readStream(ctx, st, readOpts{filters: subjects, lo: last + 1, headersOnly: true, batch: 1024}, func(seq uint64, at time.Time, subject string, h nats.Header, _ []byte) error {
		size, _ := strconv.Atoi(h.Get(msgSizeHeader))
		d := a.letter(s.name, seq, at, subject, h, size)
		d.Detail = clipBytes(d.Detail, indexDetail)
		batch = append(batch, d)
		if len(batch) == 1024 {
			flush()
		}
		return nil
	})
	flush()
	x.mu.Lock()
	s.last = max(s.last, state.LastSeq)
	x.mu.Unlock()
	return err
}

// loadMarks reads the marks written since the last load, from the stream
// under the marks bucket.
func (x *index) loadMarks(ctx context.Context) error {
	a := x.a
	st, err := a.js.Stream(ctx, "KV_"+MarksBucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // nothing redriven yet
	}
	if err != nil {
		return err
	}
	if st.CachedInfo().State.LastSeq <= x.marksLast {
		return nil
	}
	prefix := "$KV." + MarksBucket + "."
	return a.readStream(ctx, st, readOpts{lo: x.marksLast + 1, batch: 1024}, func(seq uint64, _ time.Time, subject string, h nats.Header, data []byte) error {
		x.marksLast = seq
		b64, seqText, ok := strings.Cut(strings.TrimPrefix(subject, prefix), ".")
		if !ok {
			return nil
		}
		name, err := base64.RawURLEncoding.DecodeString(b64)
		if err != nil {
			return nil
		}
		ls, err := strconv.ParseUint(seqText, 10, 64)
		if err != nil {
			return nil
		}
		var m *Mark
		if op := h.Get("KV-Operation"); op == "" {
			m = new(Mark)
			if json.Unmarshal(data, m) != nil {
				return nil
			}
		}
		x.mu.Lock()
		if s := x.streams[string(name)]; s != nil {
			if m == nil {
				delete(s.marks, ls)
			} else if cur := s.marks[ls]; cur == nil || cur.Generation <= m.Generation {
				s.marks[ls] = m
			}
		}
		x.mu.Unlock()
		return nil
	})
}

// loadForgets reads the forgets the audit recorded since the last load.
func (x *index) loadForgets(ctx context.Context) error {
	a := x.a
	st, err := a.js.Stream(ctx, AuditStream(a.cfg.Stream.Name))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.CachedInfo().State.LastSeq <= x.auditLast {
		return nil
	}
	filter := AuditPrefix + "." + a.cfg.Stream.Name + "." + AuditForget + ".*"
	last := st.CachedInfo().State.LastSeq
	err = a.readStream(ctx, st, readOpts{filters: []string{filter}, lo: x.auditLast + 1, batch: 1024}, func(_ uint64, _ time.Time, _ string, _ nats.Header, data []byte) error {
		var e AuditEntry
		if json.Unmarshal(data, &e) == nil && e.Outcome == "cleared" && e.Key != "" {
			x.mu.Lock()
			if !slices.Contains(x.forgot[e.Key], e.At) {
				x.forgot[e.Key] = append(x.forgot[e.Key], e.At)
			}
			x.mu.Unlock()
		}
		return nil
	})
	if err == nil {
		x.auditLast = last
	}
	return err
}

// FindRequest asks for a page of dead letters, newest first: those the
// selection chooses (its Limit is the page's size, its After and UpTo are
// not used), from Offset on.
type FindRequest struct {
	Selection
	Offset int `json:"offset,omitempty"`
}

// FindReply is a page of dead letters, newest first, and what the whole
// selection holds.
type FindReply struct {
	Letters []DeadLetter `json:"letters"`
	// Total is how many letters the selection chooses; Offset is the
	// page's first.
	Total  int `json:"total"`
	Offset int `json:"offset"`
	// Handled is how many more the selection would choose but for
	// Unhandled: letters redriven, or whose record was forgotten since.
	Handled int `json:"handled,omitempty"`
	// ByReason, ByPipeline, ByEffect and ByStatus count the chosen
	// letters, most first.
	ByReason   []Count `json:"by_reason,omitempty"`
	ByPipeline []Count `json:"by_pipeline,omitempty"`
	ByEffect   []Count `json:"by_effect,omitempty"`
	ByStatus   []Count `json:"by_status,omitempty"`
	// All is how many dead letters there are, whatever the selection.
	All int `json:"all"`
	// LastSeq is the last sequence of the dead letters seen: a bulk
	// redrive of this selection takes the letters up to it.
	LastSeq uint64 `json:"last_seq,omitempty"`
	Stream  string `json:"stream,omitempty"`
}

// Count is how many letters have a value.
type Count struct {
	Value string `json:"value"`
	N     int    `json:"n"`
}

// Find implements [API].
func (a *Admin) Find(ctx context.Context, r FindRequest) (FindReply, error) {
	reply := FindReply{Letters: []DeadLetter{}, Offset: max(r.Offset, 0)}
	sel := r.Selection
	sel.After, sel.UpTo = 0, 0
	if err := sel.check(); err != nil {
		return reply, err
	}
	if sel.Pipeline != "" {
		if _, err := a.pipeline(sel.Pipeline); err != nil {
			return reply, err
		}
	}
	if err := a.index.update(ctx); err != nil {
		return reply, err
	}
	a.index.applyMarks()
	limit := sel.limit()
	x := a.index
	x.mu.RLock()
	defer x.mu.RUnlock()
	var streams []*streamIndex
	for _, s := range x.streams {
		if sel.Stream == "" || s.name == sel.Stream {
			streams = append(streams, s)
		}
	}
	if sel.Stream != "" && len(streams) == 0 {
		return reply, errorf(ErrNotFound, "admin: no dead-letter stream %s", sel.Stream)
	}
	slices.SortFunc(streams, func(p, q *streamIndex) int { return strings.Compare(p.name, q.name) })
	counts := [4]map[string]int{{}, {}, {}, {}}
	for _, s := range streams {
		reply.All += len(s.letters)
		reply.LastSeq, reply.Stream = max(reply.LastSeq, s.last), s.name
	}
	// Newest first: by sequence in one stream, by time over several.
	type hit struct {
		d    *DeadLetter
		mark *Mark
		gone bool // forgotten
	}
	var hits []hit
	page := func(h hit) {
		if reply.Total > reply.Offset && len(reply.Letters) < limit {
			l := *h.d
			l.Redriven = h.mark
			switch {
			case h.mark != nil:
				l.Handled = HandledRedriven
			case h.gone:
				l.Handled = HandledForgotten
			}
			l.Next = next(&l)
			reply.Letters = append(reply.Letters, l)
		}
	}
	for _, s := range streams {
		for i := len(s.letters) - 1; i >= 0; i-- {
			d := &s.letters[i]
			if !sel.matches(d) {
				continue
			}
			h := hit{d: d, mark: s.marks[d.Seq]}
			h.gone = h.mark == nil && x.forgotLocked(d.Key, d.Time)
			if (h.mark != nil || h.gone) && sel.Unhandled {
				reply.Handled++
				continue
			}
			reply.Total++
			counts[0][d.Reason]++
			counts[1][d.Pipeline]++
			counts[2][cmp.Or(d.Effect, d.Sink, "-")]++
			if d.Status != 0 {
				counts[3][strconv.Itoa(d.Status)]++
			}
			if len(streams) == 1 {
				page(h)
			} else {
				hits = append(hits, h)
			}
		}
	}
	if len(streams) > 1 {
		slices.SortStableFunc(hits, func(p, q hit) int { return q.d.Time.Compare(p.d.Time) })
		total := reply.Total
		reply.Total = 0
		for _, h := range hits {
			reply.Total++
			page(h)
		}
		reply.Total = total
	}
	reply.ByReason, reply.ByPipeline, reply.ByEffect, reply.ByStatus = sorted(counts[0]), sorted(counts[1]), sorted(counts[2]), sorted(counts[3])
	return reply, nil
}

func (x *index) forgotLocked(key string, t time.Time) bool {
	for _, at := range x.forgot[key] {
		if at.After(t) {
			return true
		}
	}
	return false
}

func sorted(m map[string]int) []Count {
	out := make([]Count, 0, len(m))
	for v, n := range m {
		out = append(out, Count{v, n})
	}
	slices.SortFunc(out, func(p, q Count) int { return cmp.Or(q.N-p.N, strings.Compare(p.Value, q.Value)) })
	return out
}

// streamNames lists the dead-letter streams the index holds: name alone,
// if set and held.
func (x *index) streamNames(name string) []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []string
	for n := range x.streams {
		if name == "" || n == name {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// last returns the last sequence the index read of stream.
func (x *index) last(stream string) uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if s := x.streams[stream]; s != nil {
		return s.last
	}
	return 0
}

// chosen returns the letters of sel.Stream that sel chooses, oldest
// first, and their marks: with sel.Unhandled, not those whose record was
// forgotten since, nor those redriven unless again.
func (x *index) chosen(sel Selection, again bool) ([]DeadLetter, []*Mark) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	s := x.streams[sel.Stream]
	if s == nil {
		return nil, nil
	}
	var out []DeadLetter
	var marks []*Mark
	for i := range s.letters {
		d := &s.letters[i]
		if !sel.matches(d) {
			continue
		}
		m := s.marks[d.Seq]
		if sel.Unhandled && (m != nil && !again || m == nil && x.forgotLocked(d.Key, d.Time)) {
			continue
		}
		out = append(out, *d)
		marks = append(marks, m)
	}
	return out, marks
}
