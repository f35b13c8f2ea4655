package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/config"
)

// ErrIncompatibleStream is wrapped by Setup's error when a stream that
// exists cannot serve the configuration as it stands, and changing it would
// change what it keeps or deduplicates: Oncegate refuses to start rather
// than rewrite it.
var ErrIncompatibleStream = errors.New("consumer: incompatible stream")

// Setup creates the trigger stream, the streams that capture effect and
// dead-letter subjects no stream captures yet and the outbox, checks that
// the duplicate window of each stream an effect lands in covers its
// pipeline's redelivery horizon, and creates or updates each pipeline's
// durable consumer.
//
// With stream.manage: false it creates and changes no stream: it checks
// that the streams there are compatible (checkStreams) and refuses, with
// ErrIncompatibleStream, to start on ones that are not.
func (c *Consumer) Setup(ctx context.Context) error {
	s := c.cfg.Stream
	if !s.Manage {
		if err := c.checkStreams(ctx); err != nil {
			return err
		}
	} else if err := c.manageStreams(ctx); err != nil {
		return err
	}
	for _, p := range c.pipes {
		if err := c.checkHorizon(ctx, p); err != nil {
			return err
		}
	}
	for _, src := range c.sources() {
		if err := src.setup(ctx); err != nil {
			return err
		}
	}
	return nil
}

// storage is the configured storage of the streams Oncegate creates.
func (c *Consumer) storage() jetstream.StorageType {
	if c.cfg.Stream.Storage == config.StorageMemory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// manageStreams creates the trigger stream, the streams that capture
// effect and dead-letter subjects no stream captures yet, and the outbox,
// or updates them to the configuration.
func (c *Consumer) manageStreams(ctx context.Context) error {
	s := c.cfg.Stream
	retention := jetstream.WorkQueuePolicy
	if s.Retention == config.RetentionLimits {
		retention = jetstream.LimitsPolicy
	}
	discard := jetstream.DiscardNew
	if s.Discard == config.DiscardOld {
		discard = jetstream.DiscardOld
	}
	maxBytes := int64(s.MaxBytes)
	if maxBytes == 0 {
		maxBytes = -1
	}
	if err := c.ensureStream(ctx, jetstream.StreamConfig{
		Name: s.Name, Subjects: s.Subjects, Storage: c.storage(), Retention: retention,
		Duplicates: s.Duplicates, MaxAge: s.MaxAge, MaxBytes: maxBytes, Discard: discard, Replicas: s.Replicas,
	}); err != nil {
		return err
	}
	var effects, dead []string
	oneShot := false
	for _, p := range c.pipes {
		for _, e := range p.cfg.AllEffects() {
			if e.Sink == config.SinkJetStream && e.Class != config.ClassOneShot {
				subj := e.Subject
				if e.SubjectSuffix != "" {
					subj += ".>"
				}
				effects = append(effects, subj)
			}
		}
		dead = append(dead, p.deadLetter)
		oneShot = oneShot || p.dispatch != nil
	}
	if err := c.capture(ctx, s.Name+"_EFFECTS", effects, s.Duplicates); err != nil {
		return err
	}
	if err := c.capture(ctx, s.Name+"_DEAD", dead, 0); err != nil {
		return err
	}
	if oneShot {
		// A work queue: an entry is gone once dispatched, so that a
		// recreated dispatcher never sees it again.
		if err := c.ensureStream(ctx, jetstream.StreamConfig{
			Name: OutboxStream(s.Name), Subjects: []string{"oncegate.outbox.>"}, Storage: c.storage(),
			Retention: jetstream.WorkQueuePolicy, Duplicates: s.Duplicates, Replicas: s.Replicas,
		}); err != nil {
			return err
		}
	}
	return nil
}

// checkStreams checks, for stream.manage: false, that the streams there
// serve the configuration: the trigger stream captures every pipeline's
// subject and does not keep triggers longer than the ledger remembers
// them, nor drop them before their last redelivery; the effect subjects
// (checkHorizon), the dead letters and the outbox land in streams.
func (c *Consumer) checkStreams(ctx context.Context) error {
	s := c.cfg.Stream
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: stream.manage is false, so Oncegate uses the streams as they are, and "+format, append([]any{ErrIncompatibleStream}, args...)...)
	}
	st, err := c.js.Stream(ctx, s.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return refuse("the trigger stream %s does not exist: create it (nats stream add %s) or set stream.manage: true", s.Name, s.Name)
	}
	if err != nil {
		return fmt.Errorf("consumer: stream %s: %w", s.Name, err)
	}
	have := st.CachedInfo().Config
	for _, p := range c.pipes {
		name, err := c.js.StreamNameBySubject(ctx, probeSubject(p.cfg.Subject))
		if err != nil || name != s.Name {
			return refuse("pipeline %s's subject %s is not captured by stream %s (its subjects: %v)", p.cfg.Name, p.cfg.Subject, s.Name, have.Subjects)
		}
		h := c.cfg.RedeliveryHorizon(p.cfg)
		if have.MaxAge > 0 && have.MaxAge <= h {
			return refuse("stream %s keeps a trigger %v, not longer than pipeline %s's redelivery horizon %v: a trigger could age out between two deliveries, lost without a dead letter", s.Name, have.MaxAge, p.cfg.Name, h)
		}
	}
	if have.Retention != jetstream.WorkQueuePolicy {
		switch {
		case have.MaxAge == 0:
			return refuse("stream %s keeps every trigger for ever (retention %s, no max age), while the ledger forgets a record after %v: a recreated durable consumer would replay triggers older than that and redo their work; give it a max age shorter than ledger.retention, or make it a work queue", s.Name, have.Retention, c.cfg.Ledger.Retention)
		case have.MaxAge >= c.cfg.Ledger.Retention:
			return refuse("stream %s keeps triggers %v, as long as or longer than the ledger remembers them (ledger.retention %v): a replayed trigger could find no record and redo its work", s.Name, have.MaxAge, c.cfg.Ledger.Retention)
		}
	}
	for _, p := range c.pipes {
		if _, err := c.js.StreamNameBySubject(ctx, probeSubject(p.deadLetter)); err != nil {
			return refuse("no stream captures pipeline %s's dead letters (%s): a dead letter would be lost", p.cfg.Name, p.deadLetter)
		}
	}
	return nil
}

// ensureStream creates the stream, or updates the one that exists to the
// subjects, duplicate window and max age of want. A stream whose retention
// differs is refused: the server cannot turn a stream into a work queue or
// back.
func (c *Consumer) ensureStream(ctx context.Context, want jetstream.StreamConfig) error {
	st, err := c.js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := c.js.CreateStream(ctx, want); err != nil {
			return fmt.Errorf("consumer: stream %s: %w", want.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("consumer: stream %s: %w", want.Name, err)
	}
	have := st.CachedInfo().Config
	if have.Retention != want.Retention {
		return fmt.Errorf("%w: stream %s exists with retention %s, and Oncegate is configured for %s; the server cannot change a stream to or from a work queue. "+
			"Set stream.retention to match (limits needs a max_age), or drain the stream and delete it ('nats stream rm %s') so that Oncegate creates it anew",
			ErrIncompatibleStream, want.Name, have.Retention, want.Retention, want.Name)
	}
	upd := have
	upd.Subjects, upd.Duplicates, upd.MaxAge, upd.Replicas = want.Subjects, want.Duplicates, want.MaxAge, want.Replicas
	if want.MaxBytes != 0 {
		upd.MaxBytes, upd.Discard = want.MaxBytes, want.Discard
	}
	if slices.Equal(upd.Subjects, have.Subjects) && upd.Duplicates == have.Duplicates && upd.MaxAge == have.MaxAge &&
		upd.Replicas == have.Replicas && upd.MaxBytes == have.MaxBytes && upd.Discard == have.Discard {
		return nil
	}
	if _, err := c.js.UpdateStream(ctx, upd); err != nil {
		return fmt.Errorf("consumer: stream %s: %w", want.Name, err)
	}
	return nil
}

// capture makes sure every subject in subjects lands in some stream,
// creating (or extending) stream name for the ones that do not: a JetStream
// sink needs a PubAck, and a dead letter must be kept.
func (c *Consumer) capture(ctx context.Context, name string, subjects []string, dup time.Duration) error {
	var missing []string
	seen := map[string]bool{}
	for _, subj := range subjects {
		if seen[subj] {
			continue
		}
		seen[subj] = true
		_, err := c.js.StreamNameBySubject(ctx, probeSubject(subj))
		if err == nil {
			continue
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("consumer: looking up the stream of %s: %w", subj, err)
		}
		missing = append(missing, subj)
	}
	if len(missing) == 0 {
		return nil
	}
	sc := jetstream.StreamConfig{Name: name, Subjects: missing, Storage: c.storage(), Duplicates: dup, Replicas: c.cfg.Stream.Replicas}
	if st, err := c.js.Stream(ctx, name); err == nil {
		sc = st.CachedInfo().Config
		sc.Subjects = append(sc.Subjects, missing...)
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("consumer: stream %s: %w", name, err)
	}
	if _, err := c.js.CreateOrUpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("consumer: stream %s for %v: %w", name, missing, err)
	}
	c.log.Info("stream set up for subjects no other stream captured", "stream", name, "subjects", missing)
	return nil
}

func probeSubject(subj string) string { return strings.NewReplacer("*", "x", ">", "x").Replace(subj) }

// checkHorizon refuses a pipeline whose effect is a keyed JetStream
// publish to a stream whose duplicate window is shorter than the
// pipeline's redelivery horizon: a redo after a crash could land past it
// and be a second effect. The configuration is checked for the streams
// Oncegate creates; this checks the stream that is really there. It also
// gives the gate the window, which bounds when a taken-over claim may be
// redone.
func (c *Consumer) checkHorizon(ctx context.Context, p *pipeline) error {
	if !p.cfg.DedupesEffect() {
		return nil
	}
	subj := OutboxSubject(p.cfg.Name)
	if p.dispatch == nil {
		for _, e := range p.cfg.AllEffects() {
			if e.Sink == config.SinkJetStream {
				subj = e.Subject
				if e.SubjectSuffix != "" {
					subj += ".x"
				}
				break
			}
		}
	}
	name, err := c.js.StreamNameBySubject(ctx, probeSubject(subj))
	if err != nil {
		return fmt.Errorf("consumer: pipeline %s: the stream of %s: %w", p.cfg.Name, subj, err)
	}
	st, err := c.js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("consumer: pipeline %s: stream %s: %w", p.cfg.Name, name, err)
	}
	window := st.CachedInfo().Config.Duplicates
	if h := c.cfg.RedeliveryHorizon(p.cfg); window < h {
		return fmt.Errorf("%w: pipeline %s publishes its effects to %s in stream %s, whose duplicate window %s is shorter than the pipeline's redelivery horizon %s: a redo after a crash could land past it and be a second effect. Raise the stream's duplicate window, or lower the pipeline's max_deliver, ack_wait, backoff or ledger.lease",
			ErrIncompatibleStream, p.cfg.Name, subj, name, window, h)
	}
	p.gate.dedupeWindow = window
	return nil
}
