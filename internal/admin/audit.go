package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/jsretry"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// The audit: every change a person makes through the operations — each
// dead letter a redrive takes (whatever became of it), each forget (done
// or refused), each approval and cancellation of a one-shot effect, each
// bulk redrive started, resumed and finished — is recorded as an
// AuditEntry in a JetStream stream beside the trigger stream
// (AuditStream), on a subject that names the action and the intent key
// (AuditSubject), so that one intent's entries are read without reading
// the others'. An entry names who made the change: the operator who signed
// in to the console, or what a command's caller says of itself.
//
// The stream keeps entries for AuditMaxAge (a year); its replicas and
// storage are the trigger stream's. An entry is written after the change,
// and waited for: a change whose entry cannot be written within
// auditTimeout is logged as an error with everything the entry held.
//
// A bulk redrive's entry for a dead letter carries a message id naming
// the job and the letter (auditID), so that a job which writes it again
// (a runner that takes the job over from one that died cannot tell which
// of the letters its predecessor redrove it had written, and writes each
// again) leaves one entry per letter: the stream drops the second within
// its duplicate window (two minutes; a takeover comes within a lease,
// 15 s). A job that failed records the letters it audited ahead of its
// cursor (Job.Ahead), for a resume that may come much later.

// AuditPrefix is the subject prefix of the audit: AuditSubject(stream,
// action, key) is below it.
const AuditPrefix = "oncegate.audit"

// AuditMaxAge is how long the audit stream keeps an entry.
const AuditMaxAge = 365 * 24 * time.Hour

// auditTimeout bounds the writing of one entry.
const auditTimeout = 10 * time.Second

// AuditStream is the name of the audit stream beside the trigger stream
// named stream.
func AuditStream(stream string) string { return stream + "_AUDIT" }

// AuditSubject is the subject of an audit entry of action about intent
// key ("-" when the entry is about no one intent) for the trigger stream
// named stream.
func AuditSubject(stream, action, key string) string {
	return AuditPrefix + "." + stream + "." + action + "." + cmpOr(key, "-")
}

// Audit actions (AuditEntry.Action).
const (
	AuditRedrive = "redrive" // one dead letter taken by a redrive
	AuditForget  = "forget"  // a forget
	AuditApprove = "approve" // a one-shot effect approved
	AuditCancel  = "cancel"  // a one-shot effect cancelled
	AuditJob     = "job"     // a bulk redrive started, resumed or finished
)

// AuditActions lists the actions, for a filter's choices.
var AuditActions = []string{AuditRedrive, AuditForget, AuditApprove, AuditCancel, AuditJob}

// AuditEntry is one change, as the audit keeps it.
type AuditEntry struct {
	// Seq is the entry's sequence in the audit stream, set when it is read.
	Seq    uint64    `json:"seq,omitempty"`
	At     time.Time `json:"at"`
	Action string    `json:"action"`
	// By is who made the change: for the console, the operator who signed
	// in, "name (console)"; for a command, what its caller says of itself.
	By       string `json:"by"`
	Key      string `json:"key,omitempty"`
	Pipeline string `json:"pipeline,omitempty"`
	Effect   string `json:"effect,omitempty"`
	// Letter is the dead letter a redrive took.
	Letter *LetterRef `json:"letter,omitempty"`
	// Job is the bulk redrive the change was part of.
	Job string `json:"job,omitempty"`
	// Statement is what the person stated about an unknown outcome
	// (StatementNotSent).
	Statement string `json:"statement,omitempty"`
	// Outcome is what came of it: a redrive's outcome (OutcomeRedriven,
	// ...), "cleared" or OutcomeRefused for a forget, the dispatcher's
	// answer to an approval or a cancellation, a job's state.
	Outcome string `json:"outcome"`
	// Ledger is what was done to the intent's records.
	Ledger string `json:"ledger,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Owner names the process that made the change.
	Owner string `json:"owner,omitempty"`
}

// LetterRef is a dead letter as an audit entry remembers it.
type LetterRef struct {
	Stream  string    `json:"stream"`
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Reason  string    `json:"reason,omitempty"`
	Status  int       `json:"status,omitempty"`
	Answer  string    `json:"answer,omitempty"`
	OneShot bool      `json:"one_shot,omitempty"`
}

func refOf(d *DeadLetter) *LetterRef {
	return &LetterRef{Stream: d.Stream, Seq: d.Seq, Time: d.Time, Reason: d.Reason, Status: d.Status, Answer: clipBytes(d.Answer, 200), OneShot: d.OneShot}
}

func (l *LetterRef) summary() string {
	s := l.Reason
	if l.Status != 0 {
		s += fmt.Sprintf(", %d", l.Status)
		if l.Answer != "" {
			s += ": " + l.Answer
		}
	}
	return s + fmt.Sprintf("; dead letter %s %d", l.Stream, l.Seq)
}

// auditor writes the audit.
type auditor struct {
	a    *Admin
	mu   sync.Mutex
	made bool // the stream exists
}

// ensure creates the audit stream if it does not exist.
func (au *auditor) ensure(ctx context.Context) error {
	au.mu.Lock()
	defer au.mu.Unlock()
	if au.made {
		return nil
	}
	a := au.a
	name := AuditStream(a.cfg.Stream.Name)
	err := a.again(ctx, "setting the audit stream up", func(ctx context.Context) error {
		_, err := a.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			storage := jetstream.FileStorage
			if a.cfg.Stream.Storage == "memory" {
				storage = jetstream.MemoryStorage
			}
			_, err = a.js.CreateStream(ctx, jetstream.StreamConfig{
				Name: name, Description: "Oncegate: who redrove, forgot, approved and cancelled what",
				Subjects: []string{AuditPrefix + "." + a.cfg.Stream.Name + ".>"},
				Storage:  storage, Replicas: a.cfg.Stream.Replicas, MaxAge: AuditMaxAge,
				Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardOld,
			})
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				err = nil
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("admin: the audit stream %s: %w", name, err)
	}
	au.made = true
	return nil
}

func (a *Admin) auditMsg(e *AuditEntry) (*nats.Msg, error) {
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	e.Owner = a.opts.Owner
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(AuditSubject(a.cfg.Stream.Name, e.Action, e.Key))
	m.Data = b
	if id := auditID(e); id != "" {
		m.Header.Set(jetstream.MsgIDHeader, id)
	}
	return m, nil
}

// auditID is the message id of a bulk redrive's entry for a dead letter
// ("" for any other entry): one per job and letter.
func auditID(e *AuditEntry) string {
	if e.Action != AuditRedrive || e.Job == "" || e.Letter == nil {
		return ""
	}
	return fmt.Sprintf("oncegate-audit:%s:%s:%d", e.Job, e.Letter.Stream, e.Letter.Seq)
}

// record writes e to the audit and waits until the stream has it; a
// failure is logged with the entry, and returned.
func (a *Admin) record(ctx context.Context, e AuditEntry) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	err := a.aud.ensure(ctx)
	if err == nil {
		var m *nats.Msg
		if m, err = a.auditMsg(&e); err == nil {
			for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
				if _, err = a.js.PublishMsg(ctx, m); err == nil || !jsretry.Transient(err) || !sleepCtx(ctx, wait) {
					break
				}
			}
		}
	}
	if err != nil {
		a.log.Error("admin: the audit entry could not be written", "err", err, "action", e.Action, "by", e.By, "key", e.Key, "outcome", e.Outcome, "detail", e.Detail)
		return fmt.Errorf("admin: writing the audit entry: %w", err)
	}
	a.index.noteAudit(e)
	return nil
}

// auditBatch writes entries without waiting for each, for a bulk redrive;
// wait waits for all of them.
type auditBatch struct {
	a       *Admin
	mu      sync.Mutex
	futures []jetstream.PubAckFuture
	entries []AuditEntry
}

func (b *auditBatch) add(ctx context.Context, e AuditEntry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.a
	if err := a.aud.ensure(ctx); err != nil {
		a.log.Error("admin: the audit entry could not be written", "err", err, "action", e.Action, "by", e.By, "key", e.Key, "outcome", e.Outcome)
		return
	}
	m, err := a.auditMsg(&e)
	if err == nil {
		var f jetstream.PubAckFuture
		if f, err = a.js.PublishMsgAsync(m); err == nil {
			b.futures = append(b.futures, f)
			b.entries = append(b.entries, e)
			return
		}
	}
	a.log.Error("admin: the audit entry could not be written", "err", err, "action", e.Action, "by", e.By, "key", e.Key, "outcome", e.Outcome)
}

// wait waits for the entries written since the last wait; those the
// stream did not take are written again, one by one.
func (b *auditBatch) wait(ctx context.Context) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := time.NewTimer(auditTimeout)
	defer t.Stop()
	for i, f := range b.futures {
		select {
		case <-f.Ok():
			continue
		case <-f.Err():
		case <-t.C:
		case <-ctx.Done():
		}
		_ = b.a.record(ctx, b.entries[i])
	}
	b.futures, b.entries = b.futures[:0], b.entries[:0]
}

// AuditRequest chooses audit entries; every field set must match.
type AuditRequest struct {
	Key    string `json:"key,omitempty"`
	Action string `json:"action,omitempty"`
	// By matches who made the change, in part, case blind.
	By  string `json:"by,omitempty"`
	Job string `json:"job,omitempty"`
	// Before continues a listing: entries before this sequence.
	Before uint64 `json:"before,omitempty"`
	// Limit bounds how many (0: DefaultLimit; at most MaxLimit).
	Limit int `json:"limit,omitempty"`
}

// AuditReply lists audit entries, newest first.
type AuditReply struct {
	Entries []AuditEntry `json:"entries"`
	// More says that older entries may match: continue with Before set to
	// Next.
	More bool   `json:"more,omitempty"`
	Next uint64 `json:"next,omitempty"`
}

// auditWindow is how many sequences a listing reads at a time, going back.
const auditWindow = 2048

// Audit implements [API].
func (a *Admin) Audit(ctx context.Context, r AuditRequest) (AuditReply, error) {
	reply := AuditReply{Entries: []AuditEntry{}}
	if r.Action != "" && !slices.Contains(AuditActions, r.Action) {
		return reply, errorf(ErrBadRequest, "admin: no audit action %q (have %s)", r.Action, strings.Join(AuditActions, ", "))
	}
	key := "*"
	if r.Key != "" {
		k, err := dedupe.ParseKey(r.Key)
		if err != nil {
			return reply, errorf(ErrBadRequest, "admin: %v", err)
		}
		key = k.String()
	}
	limit := (&Selection{Limit: r.Limit}).limit()
	st, err := a.js.Stream(ctx, AuditStream(a.cfg.Stream.Name))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return reply, nil // nothing was ever changed
	}
	if err != nil {
		return reply, fmt.Errorf("admin: the audit stream: %w", err)
	}
	filter := AuditPrefix + "." + a.cfg.Stream.Name + "." + cmp.Or(r.Action, "*") + "." + key
	last := st.CachedInfo().State.LastSeq
	if r.Before > 0 {
		last = min(last, r.Before-1)
	}
	first := st.CachedInfo().State.FirstSeq
	match := func(e *AuditEntry) bool {
		return (r.By == "" || containsFold(e.By, r.By)) && (r.Job == "" || e.Job == r.Job)
	}
	// A key's entries are few: read them all. Otherwise read back, a
	// window at a time, until the limit is met.
	window := uint64(auditWindow)
	if r.Key != "" {
		window = last
	}
	for hi := last; hi >= max(first, 1) && len(reply.Entries) < limit; {
		lo := max(first, 1)
		if hi >= window && hi-window+1 > lo {
			lo = hi - window + 1
		}
		var batch []AuditEntry
		err := a.readStream(ctx, st, readOpts{filters: []string{filter}, lo: lo, hi: hi, batch: 512}, func(seq uint64, _ time.Time, _ string, _ nats.Header, data []byte) error {
			var e AuditEntry
			if json.Unmarshal(data, &e) != nil {
				return nil
			}
			e.Seq = seq
			if match(&e) {
				batch = append(batch, e)
			}
			return nil
		})
		if err != nil {
			return reply, err
		}
		slices.Reverse(batch)
		for _, e := range batch {
			if len(reply.Entries) == limit {
				reply.More, reply.Next = true, reply.Entries[len(reply.Entries)-1].Seq
				return reply, nil
			}
			reply.Entries = append(reply.Entries, e)
		}
		if lo <= max(first, 1) {
			break
		}
		hi = lo - 1
	}
	return reply, nil
}

// containsFold reports whether s contains sub, ASCII case blind.
func containsFold(s, sub string) bool {
	if sub == "" {
		return true
	}
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// errStop, returned by a readStream callback, ends the read without error.
var errStop = errors.New("admin: stop reading")

// readOpts choose what readStream reads.
type readOpts struct {
	filters     []string // subject filters; none: all
	lo, hi      uint64   // sequences from lo to hi (hi 0: to the end)
	headersOnly bool     // the messages' headers without their data
	batch       int      // messages fetched at a time (0: 256)
	startTime   time.Time
}

// readStream calls fn with each message of st that o chooses, in order,
// until fn returns errStop or an error. A read that fails on the way (no
// responder: a leader being elected, a node coming back, the reader's
// consumer gone) is started again from the message after the last one fn
// was given: fn never sees a message twice, nor misses one.
func (a *Admin) readStream(ctx context.Context, st jetstream.Stream, o readOpts,
	fn func(seq uint64, at time.Time, subject string, h nats.Header, data []byte) error) error {
	name := st.CachedInfo().Config.Name
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		next, err := a.readFrom(ctx, st, o, fn)
		if err == nil || errors.Is(err, errStop) {
			return nil
		}
		var fnErr *callbackError
		if errors.As(err, &fnErr) {
			return fnErr.err
		}
		if !jsretry.Transient(err) || ctx.Err() != nil || !sleepCtx(ctx, wait) {
			return fmt.Errorf("admin: reading stream %s: %w", name, err)
		}
		a.log.Warn("admin: reading a stream failed; going on from where it stopped", "stream", name, "seq", next, "err", err)
		o.lo, o.startTime = next, time.Time{}
	}
}

// callbackError is an error of readStream's callback, which ends the read
// as it is.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }

// readFrom is one try of readStream: it returns the sequence to go on
// from after a failure.
func (a *Admin) readFrom(ctx context.Context, st jetstream.Stream, o readOpts,
	fn func(seq uint64, at time.Time, subject string, h nats.Header, data []byte) error) (uint64, error) {
	from := max(o.lo, 1)
	oc := jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
		HeadersOnly: o.headersOnly, InactiveThreshold: readerInactive,
	}
	switch {
	case !o.startTime.IsZero() && from <= 1:
		t := o.startTime
		oc.DeliverPolicy, oc.OptStartSeq, oc.OptStartTime = jetstream.DeliverByStartTimePolicy, 0, &t
	case from <= 1:
		oc.DeliverPolicy, oc.OptStartSeq = jetstream.DeliverAllPolicy, 0
	}
	oc.FilterSubjects = o.filters
	batch := o.batch
	if batch <= 0 {
		batch = 256
	}
	cons, err := st.OrderedConsumer(ctx, oc)
	if err != nil {
		return from, err
	}
	// The reader's consumer goes when the read is done, not when the
	// server finds it idle: pages read often, and a stream has room for a
	// thousand consumers.
	defer func() {
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = st.DeleteConsumer(dctx, info.Name)
			cancel()
		}
	}()
	for {
		b, err := cons.FetchNoWait(batch)
		if err != nil {
			return from, err
		}
		got := 0
		for m := range b.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return from, err
			}
			seq := meta.Sequence.Stream
			if o.hi > 0 && seq > o.hi {
				return from, nil
			}
			data := m.Data()
			if err := fn(seq, meta.Timestamp, m.Subject(), m.Headers(), data); err != nil {
				if errors.Is(err, errStop) {
					return seq + 1, err
				}
				return from, &callbackError{err}
			}
			from = seq + 1
			if meta.NumPending == 0 {
				return from, nil
			}
		}
		if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
			return from, err
		}
		if got == 0 {
			return from, nil
		}
	}
}

// readerInactive is how long the server keeps a reader's consumer after
// its last fetch: a console refreshing makes one per page.
const readerInactive = 30 * time.Second
