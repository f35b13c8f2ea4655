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

	"github.com/oncegate/oncegate/internal/consumer"
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

// letter reads a dead letter's headers.
func letter(stream string, seq uint64, at time.Time, subject string, h nats.Header, data []byte) DeadLetter {
	d := DeadLetter{
		Stream: stream, Seq: seq, Time: at.UTC(), Size: len(data),
		Pipeline: h.Get(consumer.HeaderPipeline), Reason: h.Get(consumer.HeaderReason),
		Detail: h.Get(consumer.HeaderDetail), Key: h.Get(consumer.HeaderKey),
		Subject: h.Get(consumer.HeaderSubject), TriggerStream: h.Get(consumer.HeaderStream),
		Truncated: h.Get(consumer.HeaderTruncated) == "true",
	}
	d.TriggerSeq, _ = strconv.ParseUint(h.Get(consumer.HeaderStreamSeq), 10, 64)
	d.Deliveries, _ = strconv.ParseUint(h.Get(consumer.HeaderDeliveries), 10, 64)
	if d.Subject == "" {
		d.Subject = subject
	}
	return d
}

// matches reports whether d is one sel chooses.
func (sel *Selection) matches(d *DeadLetter) bool {
	switch {
	case sel.Pipeline != "" && d.Pipeline != sel.Pipeline,
		sel.Reason != "" && d.Reason != sel.Reason,
		sel.Key != "" && !strings.EqualFold(d.Key, sel.Key),
		!sel.Since.IsZero() && d.Time.Before(sel.Since),
		d.Seq <= sel.After:
		return false
	}
	if len(sel.Seqs) == 0 {
		return true
	}
	return slices.ContainsFunc(sel.Seqs, func(r Range) bool { return r.has(d.Seq) })
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

// scan calls fn, in stream order, with each dead letter sel chooses (at
// most its limit), and its message. It reports whether more may match past
// the last one, and that one's sequence.
func (a *Admin) scan(ctx context.Context, sel Selection, fn func(d DeadLetter, m jetstream.Msg) error) (more bool, next uint64, err error) {
	if sel.Reason != "" && !validReason(sel.Reason) {
		return false, 0, errorf(ErrBadRequest, "admin: no dead-letter reason %q", sel.Reason)
	}
	if sel.Key != "" {
		if _, err := dedupe.ParseKey(sel.Key); err != nil {
			return false, 0, errorf(ErrBadRequest, "admin: %v", err)
		}
	}
	streams, err := a.deadStreams(ctx, &sel)
	if err != nil {
		return false, 0, err
	}
	if len(streams) > 1 && (sel.After > 0 || len(sel.Seqs) > 0) {
		var names []string
		for _, s := range streams {
			names = append(names, s.name)
		}
		return false, 0, errorf(ErrBadRequest, "admin: the dead letters are in several streams (%s): name one to select by sequence", strings.Join(names, ", "))
	}
	limit := sel.limit()
	n := 0
	for _, ds := range streams {
		// A request that finds no responder (a node's JetStream coming
		// back, a leader being elected) is tried again, from the start of
		// the stream, as long as no dead letter has been handed to fn.
		read := func() (tried int, err error) {
			st, err := a.js.Stream(ctx, ds.name)
			if err != nil {
				return tried, fmt.Errorf("admin: stream %s: %w", ds.name, err)
			}
			// The server drops the reader 30s after its last fetch, not the
			// default 5 minutes: a console refreshing makes one per page.
			oc := jetstream.OrderedConsumerConfig{FilterSubjects: ds.subjects, DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: 30 * time.Second}
			start := sel.After + 1
			if len(sel.Seqs) > 0 {
				start = max(start, slices.MinFunc(sel.Seqs, func(x, y Range) int { return cmpUint(x.From, y.From) }).From)
			}
			switch {
			case start > 1:
				oc.DeliverPolicy, oc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
			case !sel.Since.IsZero():
				since := sel.Since
				oc.DeliverPolicy, oc.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
			}
			cons, err := st.OrderedConsumer(ctx, oc)
			if err != nil {
				return tried, fmt.Errorf("admin: reading stream %s: %w", ds.name, err)
			}
			done := false
			for !done {
				b, err := cons.FetchNoWait(min(limit-n+1, 256))
				if err != nil {
					return tried, fmt.Errorf("admin: reading stream %s: %w", ds.name, err)
				}
				got := 0
				for m := range b.Messages() {
					got++
					if done {
						continue
					}
					meta, err := m.Metadata()
					if err != nil {
						return tried, err
					}
					if sel.beyond(meta.Sequence.Stream - 1) {
						done = true
						continue
					}
					d := letter(ds.name, meta.Sequence.Stream, meta.Timestamp, m.Subject(), m.Headers(), m.Data())
					if sel.matches(&d) {
						if n == limit {
							more, done = true, true
							continue
						}
						tried++
						if err := fn(d, m); err != nil {
							return tried, err
						}
						n++
						next = d.Seq
					}
					if meta.NumPending == 0 {
						done = true
					}
				}
				if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
					return tried, fmt.Errorf("admin: reading stream %s: %w", ds.name, err)
				}
				if got == 0 {
					done = true
				}
			}
			return tried, nil
		}
		for wait := 250 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
			tried, err := read()
			if err == nil {
				break
			}
			if tried > 0 || !jsretry.Transient(err) || !sleepCtx(ctx, wait) {
				return false, 0, err
			}
			a.log.Warn("admin: reading the dead letters failed; trying again", "stream", ds.name, "err", err)
		}
		if more {
			break
		}
	}
	return more, next, nil
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
	marks := a.marks(ctx, false)
	var err error
	reply.More, reply.Next, err = a.scan(ctx, sel, func(d DeadLetter, _ jetstream.Msg) error {
		if marks != nil {
			m, _, err := readMark(ctx, marks, d.Stream, d.Seq)
			if err != nil {
				return err
			}
			d.Redriven = m
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
	st, err := a.js.Stream(ctx, ds.name)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("admin: stream %s: %w", ds.name, err)
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
	d := letter(ds.name, m.Sequence, m.Time, m.Subject, m.Header, m.Data)
	d.Payload = m.Data
	d.Headers = map[string][]string(m.Header)
	if marks := a.marks(ctx, false); marks != nil {
		if d.Redriven, _, err = readMark(ctx, marks, d.Stream, d.Seq); err != nil {
			return d, err
		}
	}
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
	kv, err = a.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: MarksBucket, Description: "Oncegate: which dead letters were redriven",
		History: 1, Storage: storage, Replicas: a.cfg.Stream.Replicas,
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = a.js.KeyValue(ctx, MarksBucket)
	}
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
