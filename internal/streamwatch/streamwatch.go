// Package streamwatch polls the trigger stream for what an operator
// graphs first: each pipeline's backlog (its durable consumer's pending
// and ack-pending counts, and the age of its oldest trigger not yet
// acknowledged) and the triggers on subjects no pipeline reads.
//
// # Backlog
//
// A pipeline's oldest unacknowledged trigger is the first message on its
// filter after its consumer's ack floor: every trigger up to the floor is
// acknowledged, and the next one the filter matches is not, or the floor
// would have moved past it. One consumer info and one message get per
// pipeline and poll.
//
// # Unrouted triggers
//
// A trigger published on a subject of the stream that no pipeline's filter
// matches is kept until max_age and read by nobody. JetStream cannot
// filter a consumer on "every subject but these", so the watcher scans the
// stream's subjects (the stream info's per-subject counts) and, for each
// subject no pipeline reads, walks its new messages with an ordered
// consumer that delivers headers only. Each trigger is counted once per
// process; a restarted process counts again those still in the stream.
// The scan is skipped when the pipelines' filters cover every subject of
// the stream. It costs one stream info listing the subjects per poll, and
// a walk only when an unrouted subject has new messages.
//
// The first sighting of each unrouted subject is logged as a warning.
// Past MaxLabels distinct subjects the counter's label is "other"; past
// MaxSubjects, further subjects are logged once and not walked.
package streamwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/ops"
)

// Defaults of [Options].
const (
	DefaultInterval    = 15 * time.Second
	DefaultMaxLabels   = 100
	DefaultMaxSubjects = 1000
	// walkBatch is how many messages one fetch of a walk asks for, and
	// maxWalk how many one poll walks at most; the rest wait for the next.
	walkBatch = 500
	maxWalk   = 20_000
)

// Pipeline is one pipeline as the watcher sees it.
type Pipeline struct {
	Name    string // the pipeline's name, its metrics' label
	Durable string // its durable consumer on the stream
	Subject string // its filter subject; wildcards allowed
}

// Options configures [New]. JetStream, Stream and Metrics are required.
type Options struct {
	JetStream jetstream.JetStream
	// Stream is the trigger stream's name.
	Stream string
	// Pipelines are the pipelines reading the stream.
	Pipelines []Pipeline
	// Metrics receives the figures.
	Metrics *ops.Metrics
	// Logger receives a warning per unrouted subject and poll failures.
	// The default discards.
	Logger *slog.Logger
	// Interval is the time between polls. The default is 15s.
	Interval time.Duration
	// MaxLabels bounds the distinct subject labels of
	// oncegate_unrouted_total; later subjects are counted as "other". The
	// default is 100.
	MaxLabels int
	// MaxSubjects bounds the unrouted subjects tracked and walked. The
	// default is 1000.
	MaxSubjects int
	// Now returns the current time, for the ages. The default is time.Now.
	Now func() time.Time
}

// Watcher polls one trigger stream. Poll and Run are not safe for
// concurrent use with each other.
type Watcher struct {
	o Options

	// Unrouted subjects: the last sequence counted of each, and its label.
	seen      map[string]uint64
	label     map[string]string
	overflow  bool // logged that MaxSubjects was passed
	labelFull bool // logged that MaxLabels was passed
}

// New returns a Watcher. It does not touch the stream until Poll or Run.
func New(o Options) (*Watcher, error) {
	if o.JetStream == nil || o.Stream == "" || o.Metrics == nil {
		return nil, errors.New("streamwatch: JetStream, Stream and Metrics are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.MaxLabels <= 0 {
		o.MaxLabels = DefaultMaxLabels
	}
	if o.MaxSubjects <= 0 {
		o.MaxSubjects = DefaultMaxSubjects
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Watcher{o: o, seen: map[string]uint64{}, label: map[string]string{}}, nil
}

// Run polls every Interval until ctx is done, logging a failed poll (the
// stream or a consumer not there yet, NATS out of reach) and going on. It
// returns nil when ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.o.Interval)
	defer t.Stop()
	failing := false
	for {
		pctx, cancel := context.WithTimeout(ctx, w.o.Interval)
		err := w.Poll(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && !failing:
			w.o.Logger.Warn("backlog and unrouted triggers not measured; retrying", "err", err)
		case err == nil && failing:
			w.o.Logger.Info("backlog and unrouted triggers measured again")
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Poll measures once: every pipeline's backlog, then the unrouted
// triggers. It returns the errors, having measured what it could. A stream
// or durable consumer that does not exist yet (the consumer creates them
// as it starts) is not an error: its figures are left as they were.
func (w *Watcher) Poll(ctx context.Context) error {
	st, err := w.o.JetStream.Stream(ctx, w.o.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("streamwatch: stream %s: %w", w.o.Stream, err)
	}
	info := st.CachedInfo()
	var errs []error
	for _, p := range w.o.Pipelines {
		b, err := w.backlog(ctx, st, p)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b.MaxAge = info.Config.MaxAge
		w.o.Metrics.SetBacklog(p.Name, b)
	}
	if err := w.unrouted(ctx, st, info.Config.Subjects); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// backlog measures one pipeline's.
func (w *Watcher) backlog(ctx context.Context, st jetstream.Stream, p Pipeline) (ops.Backlog, error) {
	c, err := st.Consumer(ctx, p.Durable)
	if err != nil {
		return ops.Backlog{}, fmt.Errorf("streamwatch: pipeline %s: consumer %s: %w", p.Name, p.Durable, err)
	}
	ci := c.CachedInfo()
	b := ops.Backlog{Pending: ci.NumPending, AckPending: ci.NumAckPending}
	if b.Pending == 0 && b.AckPending == 0 {
		return b, nil
	}
	filters := ci.Config.FilterSubjects
	if ci.Config.FilterSubject != "" {
		filters = append(filters, ci.Config.FilterSubject)
	}
	if len(filters) == 0 {
		filters = []string{">"}
	}
	var oldest time.Time
	for _, f := range filters {
		m, err := st.GetMsg(ctx, ci.AckFloor.Stream+1, jetstream.WithGetMsgSubject(f))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return b, fmt.Errorf("streamwatch: pipeline %s: oldest trigger: %w", p.Name, err)
		}
		if oldest.IsZero() || m.Time.Before(oldest) {
			oldest = m.Time
		}
	}
	if !oldest.IsZero() {
		b.Oldest = max(0, w.o.Now().Sub(oldest))
	}
	return b, nil
}

// read reports whether some pipeline reads subject.
func (w *Watcher) read(subject string) bool {
	return slices.ContainsFunc(w.o.Pipelines, func(p Pipeline) bool { return server.SubjectMatchesFilter(subject, p.Subject) })
}

// unrouted finds the subjects no pipeline reads and counts their new
// triggers.
func (w *Watcher) unrouted(ctx context.Context, st jetstream.Stream, subjects []string) error {
	if len(subjects) > 0 && !slices.ContainsFunc(subjects, func(s string) bool { return !w.read(s) }) {
		return nil // every subject the stream takes is some pipeline's
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return fmt.Errorf("streamwatch: stream %s: subjects: %w", w.o.Stream, err)
	}
	var found []string
	for s := range info.State.Subjects {
		if !w.read(s) {
			found = append(found, s)
		}
	}
	sort.Strings(found)
	for _, s := range found {
		if _, ok := w.seen[s]; ok {
			continue
		}
		if len(w.seen) >= w.o.MaxSubjects {
			if !w.overflow {
				w.overflow = true
				w.o.Logger.Warn("more subjects that no pipeline reads than are tracked: the rest are not counted",
					"stream", w.o.Stream, "tracked", w.o.MaxSubjects)
			}
			break
		}
		w.seen[s] = 0
		w.label[s] = s
		if len(w.label) > w.o.MaxLabels {
			w.label[s] = ops.OtherSubject
			if !w.labelFull {
				w.labelFull = true
				w.o.Logger.Warn("more subjects that no pipeline reads than oncegate_unrouted_total labels: the rest are counted as \"other\"",
					"stream", w.o.Stream, "labels", w.o.MaxLabels)
			}
		}
		w.o.Logger.Warn("triggers on a subject no pipeline reads: they stay in the stream until max_age, unread",
			"subject", s, "stream", w.o.Stream, "held", info.State.Subjects[s], "max_age", info.Config.MaxAge,
			"pipelines", w.filters())
	}
	if len(w.seen) == 0 {
		return nil
	}
	return w.walk(ctx, st, info.State.LastSeq)
}

// filters lists the pipelines' filter subjects, for the warning.
func (w *Watcher) filters() []string {
	out := make([]string, len(w.o.Pipelines))
	for i, p := range w.o.Pipelines {
		out[i] = p.Subject
	}
	return out
}

// walk counts the tracked subjects' triggers newer than the last one
// counted of each, up to last, the stream's last sequence when the subjects
// were listed.
func (w *Watcher) walk(ctx context.Context, st jetstream.Stream, last uint64) error {
	start := uint64(0)
	subjects := make([]string, 0, len(w.seen))
	for s, seq := range w.seen {
		if seq >= last {
			continue
		}
		subjects = append(subjects, s)
		if start == 0 || seq+1 < start {
			start = seq + 1
		}
	}
	if len(subjects) == 0 {
		return nil
	}
	sort.Strings(subjects)
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq: start, HeadersOnly: true, InactiveThreshold: time.Minute,
	})
	if err != nil {
		return fmt.Errorf("streamwatch: walking unrouted subjects: %w", err)
	}
	counts := map[string]int{}
	defer func() {
		for s, n := range counts {
			w.o.Metrics.Unrouted(w.label[s], n)
		}
		// The server would remove it after InactiveThreshold; a poll
		// every few seconds would keep several around meanwhile.
		if ci := c.CachedInfo(); ci != nil {
			_ = st.DeleteConsumer(context.WithoutCancel(ctx), ci.Name)
		}
	}()
	// complete marks every walked subject seen up to last, once the walk
	// has read them all, so that the next poll starts after last.
	complete := func() {
		for _, s := range subjects {
			w.seen[s] = max(w.seen[s], last)
		}
	}
	for walked := 0; walked < maxWalk; {
		batch, err := c.FetchNoWait(walkBatch)
		if err != nil {
			return fmt.Errorf("streamwatch: walking unrouted subjects: %w", err)
		}
		n, done := 0, false
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			seq := md.Sequence.Stream
			if seq > last {
				done = true
				continue
			}
			s := m.Subject()
			if prev, ok := w.seen[s]; ok && seq > prev {
				w.seen[s] = seq
				counts[s]++
			}
			if md.NumPending == 0 {
				done = true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("streamwatch: walking unrouted subjects: %w", err)
		}
		walked += n
		if done {
			complete()
			return nil
		}
		if n == 0 {
			// Nothing came: done if the server has nothing pending for
			// the walk either, else left for the next poll.
			if ci, err := c.Info(ctx); err == nil && ci.NumPending == 0 {
				complete()
			}
			return nil
		}
	}
	return nil // the rest on the next poll
}
