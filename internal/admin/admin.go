package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/version"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/llmcache"
)

// API is the operations, carried out here ([Admin]) or by the consumer a
// [Client] reaches. A refusal is an *Error of kind ErrBadRequest,
// ErrNotFound or ErrRefused; any other error is a failure to carry the
// operation out.
type API interface {
	// Hello names the process that carries the operations out.
	Hello(ctx context.Context) (Hello, error)
	// Record returns an intent's ledger record.
	Record(ctx context.Context, r RecordRequest) (RecordReply, error)
	// Pending lists the work in progress.
	Pending(ctx context.Context, r PendingRequest) (PendingReply, error)
	// Dead lists the dead letters selected, without payloads.
	Dead(ctx context.Context, s Selection) (DeadReply, error)
	// Show returns one dead letter with its payload and headers.
	Show(ctx context.Context, r ShowRequest) (DeadLetter, error)
	// Redrive redrives the dead letters selected, or says what it would do.
	Redrive(ctx context.Context, r RedriveRequest) (RedriveReply, error)
	// Forget clears a failed record, so that the intent's next trigger
	// runs its work anew. It refuses committed and pending records, and a
	// failure of reason unknown_outcome unless r.UnknownOutcome states
	// that the effect did not happen (StatementNotSent), as Redrive does.
	Forget(ctx context.Context, r ForgetRequest) (ForgetReply, error)
	// Find returns a page of the dead letters selected, newest first,
	// with their totals.
	Find(ctx context.Context, r FindRequest) (FindReply, error)
	// Preview says what a bulk redrive of the dead letters selected would
	// do with each, and saves it as a job to start.
	Preview(ctx context.Context, r PreviewRequest) (PreviewReply, error)
	// StartJob starts a previewed bulk redrive, or takes over one whose
	// runner stopped.
	StartJob(ctx context.Context, r JobRequest) (Job, error)
	// Job returns a bulk redrive, with how far it got.
	Job(ctx context.Context, r JobRequest) (Job, error)
	// Jobs lists the latest bulk redrives.
	Jobs(ctx context.Context, r JobsRequest) (JobsReply, error)
	// Audit lists the changes people made, newest first.
	Audit(ctx context.Context, r AuditRequest) (AuditReply, error)
	// Decide approves or cancels a one-shot effect waiting in an outbox.
	Decide(ctx context.Context, r DecideRequest) (DecideReply, error)
}

// Counter counts redrives, for metrics (ops.Metrics is one).
type Counter interface {
	Redriven(pipeline string, r outcome.Reason)
}

// Options configures an [Admin].
type Options struct {
	// Config is the validated configuration. Required.
	Config *config.Config
	// Conn is the NATS connection the dead letters, the redrives and the
	// marks go through. Required.
	Conn *nats.Conn
	// Ledger is the ledger, nil when no pipeline has one.
	Ledger ledger.Ledger
	// Counter, if set, counts redrives.
	Counter Counter
	// Logger receives a line for every change (a redrive, a forget), with
	// who asked. The default discards.
	Logger *slog.Logger
	// Owner names this process in Hello, the audit and the jobs it runs.
	// The default is the NATS connection's name.
	Owner string
	// Cache, if set, is the LLM cache a redrive's preview looks in, to say
	// what the redriven triggers' model steps will cost.
	Cache *llmcache.Cache
	// ResumeJobs has the Admin take over, while it runs (until Close),
	// every bulk redrive whose runner stopped: a process that served the
	// operations died in the middle of one.
	ResumeJobs bool
}

// MarksBucket is the KV bucket that records which dead letters were
// redriven: beside the dead letters, on the same NATS, so that every
// replica and every restart sees the same marks. Marks are never deleted;
// a dead letter's mark is keyed by its stream and sequence.
const MarksBucket = "oncegate-redrive"

// Admin carries the operations out on the stores it was given. It is safe
// for concurrent use.
type Admin struct {
	opts  Options
	cfg   *config.Config
	js    jetstream.JetStream
	log   *slog.Logger
	pipes map[string]*config.Pipeline
	// effects are each pipeline's effects (config.Pipeline.AllEffects).
	effects map[string][]config.NamedEffect

	index *index   // the dead letters, for the console's pages
	aud   *auditor // writes the audit
	runState

	// testHookCleared, if set by a test, runs after a redrive cleared an
	// intent's failure and before it republishes the trigger.
	testHookCleared func(key dedupe.Key)
	// testHookRead, if set by a test, runs after a redrive read an
	// intent's record and before it clears it.
	testHookRead func(key dedupe.Key)
}

var _ API = (*Admin)(nil)

// New returns an Admin on opts' stores.
func New(opts Options) (*Admin, error) {
	if opts.Config == nil || opts.Conn == nil {
		return nil, errors.New("admin: Config and Conn are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Owner == "" {
		opts.Owner = opts.Conn.Opts.Name
	}
	js, err := jetstream.New(opts.Conn)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	a := &Admin{opts: opts, cfg: opts.Config, js: js, log: opts.Logger, pipes: map[string]*config.Pipeline{}}
	a.index, a.aud = newIndex(a), &auditor{a: a}
	a.effects = map[string][]config.NamedEffect{}
	for i := range a.cfg.Pipelines {
		p := &a.cfg.Pipelines[i]
		a.pipes[p.Name] = p
		a.effects[p.Name] = p.AllEffects()
	}
	a.runCtx, a.stop = context.WithCancel(context.Background())
	if opts.ResumeJobs {
		a.running.Go(func() { a.resumer(a.runCtx) })
	}
	return a, nil
}

// Hello implements [API].
func (a *Admin) Hello(context.Context) (Hello, error) {
	h := Hello{Owner: a.opts.Owner, Stream: a.cfg.Stream.Name, Ledger: a.cfg.Ledger.Store, Version: version.Get().Version}
	for _, p := range a.cfg.Pipelines {
		h.Pipelines = append(h.Pipelines, p.Name)
	}
	return h, nil
}

// pipeline returns the named pipeline, or the first with an empty name.
func (a *Admin) pipeline(name string) (*config.Pipeline, error) {
	if name == "" && len(a.cfg.Pipelines) > 0 {
		return &a.cfg.Pipelines[0], nil
	}
	if p, ok := a.pipes[name]; ok {
		return p, nil
	}
	var names []string
	for _, p := range a.cfg.Pipelines {
		names = append(names, p.Name)
	}
	return nil, errorf(ErrBadRequest, "admin: no pipeline %q (have %s)", name, strings.Join(names, ", "))
}

// hasLedger reports whether p's work is recorded in the ledger.
func (a *Admin) hasLedger(p *config.Pipeline) bool {
	return a.opts.Ledger != nil && p.Mode != config.ModeGateWindow
}

// Record implements [API].
func (a *Admin) Record(ctx context.Context, r RecordRequest) (RecordReply, error) {
	var reply RecordReply
	var p *config.Pipeline
	var err error
	if r.Pipeline != "" || r.Key == "" {
		if p, err = a.pipeline(r.Pipeline); err != nil {
			return reply, err
		}
		reply.Pipeline = p.Name
	}
	var k dedupe.Key
	if r.Key != "" {
		if k, err = dedupe.ParseKey(r.Key); err != nil {
			return reply, errorf(ErrBadRequest, "admin: %v", err)
		}
	} else {
		keyer, err := dedupe.NewKeyer(consumer.KeySpec(p))
		if err != nil {
			return reply, err
		}
		in, err := keyer.Intent(r.Payload)
		if err != nil {
			return reply, errorf(ErrBadRequest, "admin: the payload cannot be keyed (it would be dead-lettered): %v", err)
		}
		k = in.Key
		reply.Fingerprint = in.Fingerprint.String()
	}
	reply.Key = k.String()
	if a.opts.Ledger == nil || p != nil && !a.hasLedger(p) {
		return reply, nil
	}
	reply.Ledger = true
	if reply.Record, err = a.get(ctx, k); err != nil {
		return reply, err
	}
	if reply.Effects, err = a.dispatches(ctx, p, k); err != nil {
		return reply, err
	}
	for _, d := range reply.Effects {
		if d.Effect == "" && d.Dispatch != nil {
			reply.Dispatch = d.Dispatch // the pipeline's single one-shot effect
		}
	}
	if reply.Record == nil && len(reply.Effects) == 0 {
		// The key a named one-shot effect is sent under, as an outbox
		// entry's dead letter named it before it named the intent.
		rec, err := a.get(ctx, consumer.DispatchKey(k))
		if err != nil {
			return reply, err
		}
		if rec != nil {
			reply.Effects = []EffectDispatch{{Key: k.String(), Dispatch: rec}}
			reply.Dispatch = rec
		}
	}
	au, err := a.Audit(ctx, AuditRequest{Key: k.String(), Limit: MaxLimit})
	if err != nil {
		a.log.Warn("admin: reading the audit of a key", "key", k.String(), "err", err)
	}
	reply.Story = story(reply.Record, reply.Effects, au.Entries)
	return reply, nil
}

// get returns k's record, nil if it has none.
func (a *Admin) get(ctx context.Context, k dedupe.Key) (*Record, error) {
	rec, err := a.opts.Ledger.Get(ctx, k)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return record(rec), nil
}

// Pending implements [API].
func (a *Admin) Pending(ctx context.Context, r PendingRequest) (PendingReply, error) {
	reply := PendingReply{Records: []Record{}}
	if a.opts.Ledger == nil {
		return reply, nil
	}
	limit := r.Limit
	if limit <= 0 {
		limit = 1000
	}
	for rec, err := range a.opts.Ledger.Pending(ctx) {
		if err != nil {
			return reply, err
		}
		if len(reply.Records) == limit {
			reply.More = true
			break
		}
		reply.Records = append(reply.Records, *record(rec))
	}
	return reply, nil
}

// Forget implements [API]. It clears the failed record among intent
// r.Key's: its own, or the dispatch of one of its one-shot effects (the
// one r.Effect names, or the one that failed; naming it is needed when
// several did). A failed record whose failure's reason is unknown_outcome
// (a holder stopped mid-effect: the effect may have happened, and the
// intent's next trigger, or a redrive, would do it again) is refused with
// ErrRefused unless r.UnknownOutcome is StatementNotSent; the statement is
// then kept in the cleared record's reason, the log line, the audit and
// the reply, with who made it. Every forget, done or refused, is recorded
// in the audit.
func (a *Admin) Forget(ctx context.Context, r ForgetRequest) (ForgetReply, error) {
	reply, err := a.forget(ctx, r)
	e := AuditEntry{Action: AuditForget, By: r.By.String(), Key: reply.Key, Effect: reply.Effect, Statement: reply.Statement, Outcome: reply.Outcome}
	switch {
	case err != nil && (errors.Is(err, ErrRefused) || errors.Is(err, ErrNotFound)):
		e.Outcome, e.Detail = OutcomeRefused, err.Error()
	case err != nil:
		return reply, err // not a decision: nothing to record
	case reply.Record != nil:
		e.Ledger = reply.Record.Reason
	}
	if e.Key == "" {
		e.Key = strings.ToLower(r.Key)
		if _, perr := dedupe.ParseKey(e.Key); perr != nil {
			return reply, err // a request that does not parse
		}
	}
	_ = a.record(ctx, e)
	return reply, err
}

func (a *Admin) forget(ctx context.Context, r ForgetRequest) (ForgetReply, error) {
	if r.UnknownOutcome != "" && r.UnknownOutcome != StatementNotSent {
		return ForgetReply{}, errorf(ErrBadRequest, "admin: the one statement about an unknown outcome is %q (the effect did not happen), not %q", StatementNotSent, r.UnknownOutcome)
	}
	k, err := dedupe.ParseKey(r.Key)
	if err != nil {
		return ForgetReply{}, errorf(ErrBadRequest, "admin: %v", err)
	}
	if a.opts.Ledger == nil {
		return ForgetReply{}, errorf(ErrBadRequest, "admin: no pipeline has a ledger")
	}
	reply := ForgetReply{Key: k.String()}
	for range 3 {
		reply.Statement = ""
		f, err := a.forgetTarget(ctx, k, r.Effect)
		if err != nil {
			return reply, err
		}
		reply.Effect, reply.Dispatch = f.effect, f.dispatch
		rec := f.rec
		if rec.State == ledger.StateCleared {
			reply.Outcome, reply.Record = "already cleared", record(rec)
			return reply, nil
		}
		note := "forgotten by " + r.By.String()
		if failedWith(rec.Reason) == outcome.ReasonUnknownOutcome {
			if r.UnknownOutcome != StatementNotSent {
				_, why, _ := strings.Cut(rec.Reason, ": ")
				return reply, errorf(ErrRefused, "admin: %s failed with reason %s (%s): its effect may have happened, and the intent's next trigger would do it again; check the target, and forget it with the statement %s only if it did not (consumer forget -unknown-outcome=%[4]s, or the console's box)",
					f.describe(k), outcome.ReasonUnknownOutcome, why, StatementNotSent)
			}
			reply.Statement = r.UnknownOutcome
			note += ", who stated that the effect was " + r.UnknownOutcome + ","
		}
		err = a.opts.Ledger.Clear(ctx, f.key, rec.Token, note+" at "+time.Now().UTC().Format(time.RFC3339))
		if errors.Is(err, ledger.ErrNotFailed) || errors.Is(err, ledger.ErrStaleToken) {
			continue // it changed since the read: look again
		}
		if err != nil {
			return reply, err
		}
		a.log.Warn("forgot a failed record: the intent's next trigger runs its work anew", "key", k.String(), "effect", f.effect, "dispatch", f.dispatch, "by", r.By.String(), "failure", rec.Reason, "statement", reply.Statement)
		rec, err = a.opts.Ledger.Get(ctx, f.key)
		if err != nil {
			return reply, err
		}
		reply.Outcome, reply.Record = "cleared", record(rec)
		return reply, nil
	}
	return reply, errorf(ErrRefused, "admin: the record of %v kept changing while it was being forgotten; look at it again", k)
}

// forgetTarget finds the record a forget of k clears: the intent's own, if
// it failed (or was cleared already), else the failed dispatch of one of
// its one-shot effects (the one effect names, if set).
func (a *Admin) forgetTarget(ctx context.Context, k dedupe.Key, effect string) (failedRecord, error) {
	own, err := a.opts.Ledger.Get(ctx, k)
	found := err == nil
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return failedRecord{}, err
	}
	if found && effect == "" {
		if err := refuseUnfailed(k, own); err != nil && own.State == ledger.StatePending {
			return failedRecord{}, err
		}
		if own.State == ledger.StateFailed {
			return failedRecord{key: k, rec: own}, nil
		}
	}
	// Its one-shot effects' dispatches, of every pipeline.
	var failed, cleared []failedRecord
	seen := map[dedupe.Key]bool{}
	consider := func(name string, dk dedupe.Key) error {
		if seen[dk] {
			return nil
		}
		seen[dk] = true
		rec, err := a.opts.Ledger.Get(ctx, dk)
		if errors.Is(err, ledger.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		f := failedRecord{key: dk, rec: rec, effect: name, dispatch: true}
		switch rec.State {
		case ledger.StateFailed:
			failed = append(failed, f)
		case ledger.StateCleared:
			cleared = append(cleared, f)
		case ledger.StatePending:
			if effect != "" {
				return errorf(ErrRefused, "admin: %s is under way (held by %s, lease until %s), or its holder stopped: only a failed record can be cleared", f.describe(k), rec.Owner, rec.LeaseUntil.UTC().Format(time.RFC3339Nano))
			}
		}
		return nil
	}
	for i := range a.cfg.Pipelines {
		p := &a.cfg.Pipelines[i]
		if !a.hasLedger(p) {
			continue
		}
		for _, e := range oneShotEffects(p) {
			if effect != "" && e.Name != effect {
				continue
			}
			if err := consider(e.Name, consumer.DispatchKey(consumer.EffectKey(k, e.Name))); err != nil {
				return failedRecord{}, err
			}
		}
	}
	if !found && len(failed)+len(cleared) == 0 {
		// The key a named one-shot effect is sent under, as an outbox
		// entry's dead letter named it before it named the intent.
		if err := consider("", consumer.DispatchKey(k)); err != nil {
			return failedRecord{}, err
		}
	}
	switch {
	case len(failed) == 1:
		return failed[0], nil
	case len(failed) > 1:
		var names []string
		for _, f := range failed {
			names = append(names, f.effect)
		}
		return failedRecord{}, errorf(ErrBadRequest, "admin: the dispatches of several effects of %v failed (%s): name the one to forget", k, strings.Join(names, ", "))
	case len(cleared) > 0 && (!found || own.State != ledger.StateCleared):
		return cleared[0], nil
	case found && own.State == ledger.StateCleared && effect == "":
		return failedRecord{key: k, rec: own}, nil
	case effect != "":
		return failedRecord{}, errorf(ErrNotFound, "admin: no failed dispatch of effect %q of %v", effect, k)
	case found:
		if err := refuseUnfailed(k, own); err != nil {
			return failedRecord{}, err
		}
	}
	return failedRecord{}, errorf(ErrNotFound, "admin: no ledger record for %v (new work, or forgotten after the retention)", k)
}

// failedWith returns the reason a failed record's Reason names: the
// consumer records a failure as "<reason>: <why>" (outcome.Reason), and a
// reason it does not name is poison, as the consumer reads it back.
func failedWith(reason string) outcome.Reason {
	if r, _, ok := strings.Cut(reason, ": "); ok && outcome.Reason(r).Valid() {
		return outcome.Reason(r)
	}
	return outcome.ReasonPoison
}

// refuseUnfailed refuses to clear a committed or pending record.
func refuseUnfailed(k dedupe.Key, rec ledger.Record) error {
	switch rec.State {
	case ledger.StateCommitted:
		return errorf(ErrRefused, "admin: %v is committed (%s): forgetting it would let its effect happen again", k, rec.Result.Committed.UTC().Format(time.RFC3339))
	case ledger.StatePending:
		return errorf(ErrRefused, "admin: %v is in progress (held by %s, lease until %s), or its holder stopped: its effect may be under way, and only a failed record can be cleared",
			k, rec.Owner, rec.LeaseUntil.UTC().Format(time.RFC3339Nano))
	}
	return nil
}
