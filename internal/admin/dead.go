package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/jsretry"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// deadStream is a stream that holds dead letters, and the dead-letter
// subjects of the pipelines whose dead letters it holds.
type deadStream struct {
	name     string
	subjects []string
}

// deadStreams returns the streams that hold the dead letters of the
// pipelines sel chooses, by name.
func (a *Admin) deadStreams(ctx context.Context, sel *Selection) ([]deadStream, error) {
	if sel.Pipeline != "" {
		if _, err := a.pipeline(sel.Pipeline); err != nil {
			return nil, err
		}
	}
	byName := map[string]*deadStream{}
	for _, p := range a.cfg.Pipelines {
		if sel.Pipeline != "" && p.Name != sel.Pipeline {
			continue
		}
		subj := a.cfg.Stream.DeadLetter(p.Name)
		name, err := a.js.StreamNameBySubject(ctx, strings.NewReplacer("*", "x", ">", "x").Replace(subj))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // no dead letter was ever kept: the consumer creates the stream
		}
		if err != nil {
			return nil, fmt.Errorf("admin: the stream of %s: %w", subj, err)
		}
		if sel.Stream != "" && name != sel.Stream {
			continue
		}
		ds := byName[name]
		if ds == nil {
			ds = &deadStream{name: name}
			byName[name] = ds
		}
		if !slices.Contains(ds.subjects, subj) {
			ds.subjects = append(ds.subjects, subj)
		}
	}
	if sel.Stream != "" && byName[sel.Stream] == nil {
		return nil, errorf(ErrNotFound, "admin: stream %s holds no dead letters of pipeline %s", sel.Stream, cmpOr(sel.Pipeline, "any"))
	}
	var out []deadStream
	for _, ds := range byName {
		out = append(out, *ds)
	}
	slices.SortFunc(out, func(x, y deadStream) int { return strings.Compare(x.name, y.name) })
	return out, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// matches reports whether d is one sel chooses. Whether it was handled
// (sel.Unhandled) is for the caller to check, who knows its mark.
func (sel *Selection) matches(d *DeadLetter) bool {
	switch {
	case sel.Pipeline != "" && d.Pipeline != sel.Pipeline,
		sel.Reason != "" && d.Reason != sel.Reason,
		sel.Key != "" && !strings.EqualFold(d.Key, sel.Key) && !strings.EqualFold(d.EffectKey, sel.Key),
		sel.Effect != "" && !strings.EqualFold(d.Effect, sel.Effect) && !strings.EqualFold(d.Sink, sel.Effect),
		sel.Status != "" && !statusMatches(sel.Status, d.Status),
		!sel.Since.IsZero() && d.Time.Before(sel.Since),
		!sel.Until.IsZero() && !d.Time.Before(sel.Until),
		sel.Text != "" && !textMatches(d, sel.Text),
		d.Seq <= sel.After,
		sel.UpTo > 0 && d.Seq > sel.UpTo:
		return false
	}
	if len(sel.Seqs) == 0 {
		return true
	}
	return slices.ContainsFunc(sel.Seqs, func(r Range) bool { return r.has(d.Seq) })
}

// statusMatches reports whether status is the one want names: "500", or
// a class, "5xx".
func statusMatches(want string, status int) bool {
	if status == 0 {
		return false
	}
	if len(want) == 3 && want[1:] == "xx" {
		return status/100 == int(want[0]-'0')
	}
	return want == strconv.Itoa(status)
}

// validStatus reports whether s is a status a selection can name.
func validStatus(s string) bool {
	if len(s) != 3 || s[0] < '1' || s[0] > '5' {
		return false
	}
	if s[1:] == "xx" {
		return true
	}
	return s[1] >= '0' && s[1] <= '9' && s[2] >= '0' && s[2] <= '9'
}

func textMatches(d *DeadLetter, text string) bool {
	for _, s := range []string{d.Detail, d.Answer, d.Key, d.EffectKey, d.Subject, d.Effect, d.Sink, d.Pipeline, d.Reason} {
		if containsFold(s, text) {
			return true
		}
	}
	return false
}

// beyond reports whether no sequence past seq can match sel's ranges.
func (sel *Selection) beyond(seq uint64) bool {
	if len(sel.Seqs) == 0 {
		return false
	}
	for _, r := range sel.Seqs {
		if r.To == 0 || seq < r.To {
			return false
		}
	}
	return true
}

func (sel *Selection) limit() int {
	switch {
	case sel.Limit <= 0:
		return DefaultLimit
	case sel.Limit > MaxLimit:
		return MaxLimit
	}
	return sel.Limit
}

// check refuses a selection that names what does not exist.
func (sel *Selection) check() error {
	switch {
	case sel.Reason != "" && !validReason(sel.Reason):
		return errorf(ErrBadRequest, "admin: no dead-letter reason %q", sel.Reason)
	case sel.Status != "" && !validStatus(sel.Status):
		return errorf(ErrBadRequest, "admin: status %q: want an HTTP status (500) or a class (5xx)", sel.Status)
	case !sel.Since.IsZero() && !sel.Until.IsZero() && !sel.Since.Before(sel.Until):
		return errorf(ErrBadRequest, "admin: the time range ends (%s) before it starts (%s)", sel.Until.Format(time.RFC3339), sel.Since.Format(time.RFC3339))
	}
	if sel.Key != "" {
		if _, err := dedupe.ParseKey(sel.Key); err != nil {
			return errorf(ErrBadRequest, "admin: %v", err)
		}
	}
	return nil
}

// scan calls fn, in stream order, with each dead letter sel chooses (at
// most its limit), and its message's headers and data. It reports whether
// more may match past the last one, and that one's sequence. A read that
// fails on the way goes on from the letter after the last fn was given:
// fn sees each letter once.
func (a *Admin) scan(ctx context.Context, sel Selection, fn func(d DeadLetter, h nats.Header, data []byte) error) (more bool, next uint64, err error) {
	if err := sel.check(); err != nil {
		return false, 0, err
	}
	streams, err := a.deadStreams(ctx, &sel)
	if err != nil {
		return false, 0, err
	}
	if len(streams) > 1 && (sel.After > 0 || len(sel.Seqs) > 0 || sel.UpTo > 0) {
		var names []string
		for _, s := range streams {
			names = append(names, s.name)
		}
		return false, 0, errorf(ErrBadRequest, "admin: the dead letters are in several streams (%s): name one to select by sequence", strings.Join(names, ", "))
	}
	limit := sel.limit()
	n := 0
	for _, ds := range streams {
		st, err := a.stream(ctx, ds.name)
		if err != nil {
			return false, 0, err
		}
		o := readOpts{filters: ds.subjects, lo: sel.After + 1, hi: sel.UpTo, batch: min(limit+1, 64)}
		if len(sel.Seqs) > 0 {
			o.lo = max(o.lo, slices.MinFunc(sel.Seqs, func(x, y Range) int { return cmpUint(x.From, y.From) }).From)
		}
		if o.lo <= 1 && !sel.Since.IsZero() {
			o.startTime = sel.Since
		}
		err = a.readStream(ctx, st, o, func(seq uint64, at time.Time, subject string, h nats.Header, data []byte) error {
			if sel.beyond(seq-1) || !sel.Until.IsZero() && !at.Before(sel.Until) {
				return errStop
			}
			if !slices.Contains(ds.subjects, subject) {
				return nil
			}
			d := a.letter(ds.name, seq, at, subject, h, len(data))
			if !sel.matches(&d) {
				return nil
			}
			if n == limit {
				more = true
				return errStop
			}
			if err := fn(d, h, data); err != nil {
				return err
			}
			n++
			next = d.Seq
			return nil
		})
		if err != nil {
			return false, 0, err
		}
		if more {
			break
		}
	}
	return more, next, nil
}

// stream looks a stream up, through what finds no responder for a while
// (a node's JetStream coming back, a leader being elected).
func (a *Admin) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		st, err := a.js.Stream(ctx, name)
		if err == nil {
			return st, nil
		}
		if !jsretry.Transient(err) || ctx.Err() != nil || !sleepCtx(ctx, wait) {
			return nil, fmt.Errorf("admin: stream %s: %w", name, err)
		}
		a.log.Warn("admin: looking a stream up failed; trying again", "stream", name, "err", err)
	}
}

func validReason(r string) bool { return outcome.Reason(r).Valid() }

// sleepCtx waits d, or until ctx is done; it reports whether it waited d.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func cmpUint(x, y uint64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// Dead implements [API].
func (a *Admin) Dead(ctx context.Context, sel Selection) (DeadReply, error) {
	reply := DeadReply{Letters: []DeadLetter{}}
	if sel.Unhandled {
		// Which letters' records were forgotten since: the index reads
		// the audit's forgets.
		if err := a.index.update(ctx); err != nil {
			return reply, err
		}
	}
	marks := a.marks(ctx, false)
	var err error
	reply.More, reply.Next, err = a.scan(ctx, sel, func(d DeadLetter, _ nats.Header, _ []byte) error {
		if marks != nil {
			m, _, err := readMark(ctx, marks, d.Stream, d.Seq)
			if err != nil {
				return err
			}
			d.Redriven = m
		}
		a.settle(&d)
		if sel.Unhandled && d.Handled != "" {
			return nil
		}
		reply.Letters = append(reply.Letters, d)
		return nil
	})
	return reply, err
}

// Show implements [API].
func (a *Admin) Show(ctx context.Context, r ShowRequest) (DeadLetter, error) {
	sel := Selection{Stream: r.Stream}
	streams, err := a.deadStreams(ctx, &sel)
	if err != nil {
		return DeadLetter{}, err
	}
	switch {
	case len(streams) == 0:
		return DeadLetter{}, errorf(ErrNotFound, "admin: no dead letters have been kept yet")
	case len(streams) > 1:
		return DeadLetter{}, errorf(ErrBadRequest, "admin: the dead letters are in several streams: name one")
	}
	ds := streams[0]
	st, err := a.stream(ctx, ds.name)
	if err != nil {
		return DeadLetter{}, err
	}
	m, err := st.GetMsg(ctx, r.Seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return DeadLetter{}, errorf(ErrNotFound, "admin: no dead letter %d in stream %s", r.Seq, ds.name)
	}
	if err != nil {
		return DeadLetter{}, fmt.Errorf("admin: reading %s %d: %w", ds.name, r.Seq, err)
	}
	if !slices.Contains(ds.subjects, m.Subject) {
		return DeadLetter{}, errorf(ErrNotFound, "admin: message %d of stream %s is not a dead letter (its subject is %s)", r.Seq, ds.name, m.Subject)
	}
	d := a.letter(ds.name, m.Sequence, m.Time, m.Subject, m.Header, len(m.Data))
	d.Payload = m.Data
	d.Headers = map[string][]string(m.Header)
	if marks := a.marks(ctx, false); marks != nil {
		if d.Redriven, _, err = readMark(ctx, marks, d.Stream, d.Seq); err != nil {
			return d, err
		}
	}
	a.settle(&d)
	return d, nil
}

// marks returns the marks bucket, creating it if create is set; nil (and
// no error) if it does not exist and create is not set, or cannot be read.
func (a *Admin) marks(ctx context.Context, create bool) jetstream.KeyValue {
	kv, err := a.js.KeyValue(ctx, MarksBucket)
	if err == nil || !create {
		return kv
	}
	storage := jetstream.FileStorage
	if a.cfg.Stream.Storage == "memory" {
		storage = jetstream.MemoryStorage
	}
	err = a.again(ctx, "setting the redrive marks bucket up", func(ctx context.Context) error {
		var err error
		if kv, err = a.js.KeyValue(ctx, MarksBucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
			return err
		}
		kv, err = a.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: MarksBucket, Description: "Oncegate: which dead letters were redriven",
			History: 1, Storage: storage, Replicas: a.cfg.Stream.Replicas,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = a.js.KeyValue(ctx, MarksBucket)
		}
		return err
	})
	if err != nil {
		a.log.Warn("the redrive marks bucket is not available", "bucket", MarksBucket, "err", err)
		return nil
	}
	return kv
}

// markKey is the key of the mark of the dead letter at seq of stream.
func markKey(stream string, seq uint64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(stream)) + "." + strconv.FormatUint(seq, 10)
}

// readMark returns the mark of a dead letter and its revision; nil and 0
// if it has none.
func readMark(ctx context.Context, kv jetstream.KeyValue, stream string, seq uint64) (*Mark, uint64, error) {
	e, err := kv.Get(ctx, markKey(stream, seq))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("admin: reading the mark of %s %d: %w", stream, seq, err)
	}
	var m Mark
	if err := json.Unmarshal(e.Value(), &m); err != nil {
		return nil, 0, fmt.Errorf("admin: the mark of %s %d: %w", stream, seq, err)
	}
	return &m, e.Revision(), nil
}
