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
	// Owner names this process in Hello. The default is the NATS
	// connection's name.
	Owner string
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
	for i := range a.cfg.Pipelines {
		p := &a.cfg.Pipelines[i]
		a.pipes[p.Name] = p
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
		keyer, err := dedupe.NewKeyer(p.KeySpec())
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
	if p != nil && p.Effect.Class == config.ClassOneShot {
		if reply.Dispatch, err = a.get(ctx, consumer.DispatchKey(k)); err != nil {
			return reply, err
		}
	}
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

// Forget implements [API]. A failed record whose failure's reason is
// unknown_outcome (a holder stopped mid-effect: the effect may have
// happened, and the intent's next trigger would do it again) is refused
// with ErrRefused unless r.UnknownOutcome is StatementNotSent; the
// statement is then kept in the cleared record's reason, the log line and
// the reply, with who made it.
func (a *Admin) Forget(ctx context.Context, r ForgetRequest) (ForgetReply, error) {
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
		rec, err := a.opts.Ledger.Get(ctx, k)
		if errors.Is(err, ledger.ErrNotFound) {
			return reply, errorf(ErrNotFound, "admin: no ledger record for %v (new work, or forgotten after the retention)", k)
		}
		if err != nil {
			return reply, err
		}
		if err := refuseUnfailed(k, rec); err != nil {
			return reply, err
		}
		if rec.State == ledger.StateCleared {
			reply.Outcome, reply.Record = "already cleared", record(rec)
			return reply, nil
		}
		note := "forgotten by " + r.By.String()
		if failedWith(rec.Reason) == outcome.ReasonUnknownOutcome {
			if r.UnknownOutcome != StatementNotSent {
				_, why, _ := strings.Cut(rec.Reason, ": ")
				return reply, errorf(ErrRefused, "admin: %v failed with reason %s (%s): its effect may have happened, and the intent's next trigger would do it again; check the target, and forget it with the statement %s only if it did not (consumer forget -unknown-outcome=%[4]s, or the console's box)",
					k, outcome.ReasonUnknownOutcome, why, StatementNotSent)
			}
			reply.Statement = r.UnknownOutcome
			note += ", who stated that the effect was " + r.UnknownOutcome + ","
		}
		err = a.opts.Ledger.Clear(ctx, k, rec.Token, note+" at "+time.Now().UTC().Format(time.RFC3339))
		if errors.Is(err, ledger.ErrNotFailed) || errors.Is(err, ledger.ErrStaleToken) {
			continue // it changed since the read: look again
		}
		if err != nil {
			return reply, err
		}
		a.log.Warn("forgot a failed record: the intent's next trigger runs its work anew", "key", k.String(), "by", r.By.String(), "failure", rec.Reason, "statement", reply.Statement)
		rec, err = a.opts.Ledger.Get(ctx, k)
		if err != nil {
			return reply, err
		}
		reply.Outcome, reply.Record = "cleared", record(rec)
		return reply, nil
	}
	return reply, errorf(ErrRefused, "admin: the record of %v kept changing while it was being forgotten; look at it again", k)
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
