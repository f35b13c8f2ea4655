package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Placeholders that [JetStreamOptions.Subject] may contain.
const (
	KeyPlaceholder      = "{key}"
	PipelinePlaceholder = "{pipeline}"
	StepPlaceholder     = "{step}"
)

// JetStreamOptions configures a [JetStream] sink. The zero value is not
// valid: Subject is required.
type JetStreamOptions struct {
	// Subject is the subject published to. It may be fixed or contain the
	// placeholders "{key}", "{pipeline}" and "{step}", each standing for a
	// whole token and replaced by the effect's field, as in
	// "effects.{pipeline}.{key}". It must not contain wildcards, empty
	// tokens, white space, or other braces. Required.
	Subject string

	// Timeout bounds one Deliver, the wait for the PubAck included. The
	// default is 5s.
	Timeout time.Duration
}

// JetStream publishes each effect to a JetStream stream with the intent
// key as Nats-Msg-Id, so the stream's duplicate window drops a repeat.
type JetStream struct {
	js      jetstream.Publisher
	subject string
	timeout time.Duration
}

// NewJetStream returns a sink that publishes through js, which it does not
// own. It fails with an error matching [ErrPermanent] if the options are
// invalid.
//
// The stream bound to the subject should have a Duplicates window longer
// than the time within which a trigger is retried, since a publish whose
// PubAck was lost is retried and only the window makes the repeat a
// duplicate.
func NewJetStream(js jetstream.Publisher, opts JetStreamOptions) (*JetStream, error) {
	if js == nil {
		return nil, optionsError("jetstream", "nil JetStream")
	}
	if opts.Timeout < 0 {
		return nil, optionsError("jetstream", "negative Timeout %v", opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	// Check the subject with a sample token in each placeholder; Deliver
	// checks the effect's values.
	sample := strings.NewReplacer(KeyPlaceholder, "k", PipelinePlaceholder, "p", StepPlaceholder, "s").Replace(opts.Subject)
	if err := checkSubject(sample); err != nil {
		return nil, optionsError("jetstream", "Subject %q: %v", opts.Subject, err)
	}
	return &JetStream{js: js, subject: opts.Subject, timeout: opts.Timeout}, nil
}

// Deliver publishes e.Body with the headers Nats-Msg-Id (the key),
// Oncegate-Pipeline and Oncegate-Step, after those of e.Header, and waits
// for the PubAck. A PubAck marked duplicate is a success with
// Result.Duplicate set. Result.Body is the PubAck as JSON, such as
// {"stream":"EFFECTS","seq":7}.
//
// Errors follow the server: an API error with a 4xx code other than 408,
// 409, 425 and 429 (a message over the stream's size limit, a sealed
// stream) is permanent, like a message over the server's max payload; a
// timeout, a lost connection or a 5xx code is retryable. No stream bound
// to the subject (jetstream.ErrNoStreamResponse, also seen while a stream
// has no leader) is retryable too: the effect succeeds once the stream is
// there, and dead-lettering would lose it. It is a configuration error if
// it persists; callers can single it out with errors.Is.
func (s *JetStream) Deliver(ctx context.Context, e Effect) (Result, error) {
	if err := checkKey("jetstream", e.Key); err != nil {
		return Result{}, err
	}
	subject, err := s.expand(e)
	if err != nil {
		return Result{}, &Error{Sink: "jetstream", Key: e.Key, Err: err}
	}
	m := nats.NewMsg(subject)
	m.Data = e.Body
	for k, v := range e.Header {
		m.Header.Set(k, v)
	}
	m.Header.Set(PipelineHeader, e.Pipeline)
	m.Header.Set(StepHeader, e.Step)

	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	ack, err := s.js.PublishMsg(ctx, m, jetstream.WithMsgID(e.Key))
	if err != nil {
		return Result{Attempts: 1}, &Error{
			Sink:      "jetstream",
			Key:       e.Key,
			Retryable: retryablePublish(err),
			Err:       fmt.Errorf("publish to %s: %w", subject, err),
		}
	}
	body, err := json.Marshal(ack)
	if err != nil { // a PubAck always marshals
		return Result{Attempts: 1}, &Error{Sink: "jetstream", Key: e.Key, Err: err}
	}
	return Result{Duplicate: ack.Duplicate, Body: body, Attempts: 1}, nil
}

// Close does nothing: the sink owns no resource.
func (s *JetStream) Close() error { return nil }

// expand fills the placeholders of the subject with e's fields, each of
// which must then be a valid subject token.
func (s *JetStream) expand(e Effect) (string, error) {
	if e.SubjectSuffix != "" {
		if err := checkSubject(e.SubjectSuffix); err != nil {
			return "", fmt.Errorf("subject suffix %q: %w", e.SubjectSuffix, err)
		}
	}
	if !strings.Contains(s.subject, "{") {
		if e.SubjectSuffix != "" {
			return s.subject + "." + e.SubjectSuffix, nil
		}
		return s.subject, nil
	}
	var args []string
	for _, p := range []struct{ ph, v, name string }{
		{KeyPlaceholder, e.Key, "key"},
		{PipelinePlaceholder, e.Pipeline, "pipeline"},
		{StepPlaceholder, e.Step, "step"},
	} {
		if !strings.Contains(s.subject, p.ph) {
			continue
		}
		if p.v == "" || strings.ContainsAny(p.v, ".*> \t\r\n{}") {
			return "", fmt.Errorf("%s %q is not a subject token", p.name, p.v)
		}
		args = append(args, p.ph, p.v)
	}
	subj := strings.NewReplacer(args...).Replace(s.subject)
	if e.SubjectSuffix != "" {
		subj += "." + e.SubjectSuffix
	}
	return subj, nil
}

// checkSubject reports why subj is not a subject to publish to.
func checkSubject(subj string) error {
	if subj == "" {
		return errors.New("empty")
	}
	if strings.ContainsAny(subj, " \t\r\n{}") {
		return errors.New("white space or an unknown placeholder")
	}
	for tok := range strings.SplitSeq(subj, ".") {
		switch tok {
		case "":
			return errors.New("empty token")
		case "*", ">":
			return errors.New("wildcard")
		}
	}
	return nil
}

// retryablePublish classifies an error of PublishMsg.
func retryablePublish(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr):
		return retryableStatus(apiErr.Code)
	case errors.Is(err, nats.ErrMaxPayload),
		errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, nats.ErrHeadersNotSupported),
		errors.Is(err, jetstream.ErrInvalidOption):
		return false
	}
	return true
}

// Pending is an effect published without waiting; Wait returns what
// Deliver would have.
type Pending struct {
	key     string
	subject string
	fut     jetstream.PubAckFuture
	err     error
}

// PublishAsync publishes e like Deliver but returns at once; the PubAck is
// awaited with Pending.Wait. A pipeline that settles a batch of triggers
// publishes all their effects, then waits for all of them, keeping many
// effects in flight without a goroutine each.
func (s *JetStream) PublishAsync(e Effect) *Pending {
	p := &Pending{key: e.Key}
	if err := checkKey("jetstream", e.Key); err != nil {
		p.err = err
		return p
	}
	subject, err := s.expand(e)
	if err != nil {
		p.err = &Error{Sink: "jetstream", Key: e.Key, Err: err}
		return p
	}
	p.subject = subject
	m := nats.NewMsg(subject)
	m.Data = e.Body
	for k, v := range e.Header {
		m.Header.Set(k, v)
	}
	m.Header.Set(PipelineHeader, e.Pipeline)
	m.Header.Set(StepHeader, e.Step)
	if p.fut, err = s.js.PublishMsgAsync(m, jetstream.WithMsgID(e.Key)); err != nil {
		p.err = &Error{Sink: "jetstream", Key: e.Key, Retryable: retryablePublish(err), Err: fmt.Errorf("publish to %s: %w", subject, err)}
	}
	return p
}

// Wait waits for the PubAck, until ctx is done. Result.Body is left empty
// (the batch path stores no PubAck). A batch waits for all its effects
// under one deadline, Timeout after its last publish, instead of starting a
// timer per effect.
func (p *Pending) Wait(ctx context.Context) (Result, error) {
	if p.err != nil {
		return Result{}, p.err
	}
	select {
	case ack := <-p.fut.Ok():
		return Result{Duplicate: ack.Duplicate, Attempts: 1}, nil
	case err := <-p.fut.Err():
		return Result{Attempts: 1}, &Error{Sink: "jetstream", Key: p.key, Retryable: retryablePublish(err), Err: fmt.Errorf("publish to %s: %w", p.subject, err)}
	case <-ctx.Done():
		return Result{Attempts: 1}, &Error{Sink: "jetstream", Key: p.key, Retryable: true, Err: fmt.Errorf("publish to %s: %w", p.subject, ctx.Err())}
	}
}

// Timeout is the sink's bound on one publish.
func (s *JetStream) Timeout() time.Duration { return s.timeout }
