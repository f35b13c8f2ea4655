package config

import (
	"fmt"
	"strings"
)

// ReplyOverlapError is the Err of the *FieldError for a
// stream.reply_prefixes entry under which lies a subject Oncegate reads or
// writes. A trigger names its reply subject itself (Oncegate-Reply), so a
// prefix that reaches such a subject would let any publisher of triggers
// make Oncegate publish there: an unkeyed copy into an effect stream, a
// loop back into the trigger stream, a forged approval, a message on a
// server API. It wraps ErrInvalid.
type ReplyOverlapError struct {
	// Prefix is the reply prefix, such as "effects.".
	Prefix string
	// Subject is the subject (or subject filter) it overlaps, such as
	// "effects.alerts" or "triggers.>".
	Subject string
	// Use says what Subject is to Oncegate, such as "the effect subject of
	// pipeline \"alerts\"".
	Use string
}

func (e *ReplyOverlapError) Error() string {
	return fmt.Sprintf("%q overlaps %q, %s: a trigger could make Oncegate publish its reply there; choose a prefix no subject of Oncegate's falls under, such as \"_INBOX.\"", e.Prefix, e.Subject, e.Use)
}

// Unwrap returns ErrInvalid.
func (e *ReplyOverlapError) Unwrap() error { return ErrInvalid }

// ownedSubject is a subject Oncegate reads or writes, and what it is.
type ownedSubject struct {
	subject string
	use     string
}

// reservedSubjects are the subjects that belong to the server and to
// Oncegate whatever the configuration: the server's reply mappings for
// service imports and gateways, and Oncegate's outbox, cancel and default
// dead-letter subjects. Every subject beginning with '$' (the JetStream
// and KV APIs, the system account, services) is refused besides.
var reservedSubjects = []ownedSubject{
	{"oncegate.>", "Oncegate's own subjects (outbox, cancel, dead letters)"},
	{"_R_.>", "the server's reply mapping for service imports"},
	{"_GR_.>", "the server's reply mapping across gateways"},
}

// ownedSubjects lists the subjects of c that Oncegate reads or writes: the
// trigger stream's subjects, every pipeline's subject, effect, dead-letter
// and approval subjects, and the ingress sources' subjects. Invalid
// subjects are left out (they are reported on their own).
func (c *Config) ownedSubjects() []ownedSubject {
	out := append([]ownedSubject(nil), reservedSubjects...)
	add := func(subj, use string, literal bool) {
		if checkSubject(subj, literal) == nil {
			out = append(out, ownedSubject{subj, use})
		}
	}
	for _, s := range c.Stream.Subjects {
		add(s, fmt.Sprintf("a subject of the trigger stream %s", c.Stream.Name), false)
	}
	for i := range c.Pipelines {
		p := &c.Pipelines[i]
		add(p.Subject, fmt.Sprintf("the subject of pipeline %q", p.Name), false)
		if p.Effect.Sink == SinkJetStream {
			add(p.Effect.Subject, fmt.Sprintf("the effect subject of pipeline %q", p.Name), true)
		}
		if p.Effect.ApprovalSubject != "" {
			add(p.Effect.ApprovalSubject, fmt.Sprintf("the approval subject of pipeline %q", p.Name), true)
		}
		add(c.Stream.DeadLetter(p.Name), fmt.Sprintf("the dead-letter subject of pipeline %q", p.Name), true)
	}
	for _, s := range c.Ingress.Sources {
		add(s.Subject, fmt.Sprintf("the subject of ingress source %q", s.Name), true)
	}
	return out
}

// replyOverlap returns the error for reply prefix p, which must be literal
// tokens ending in '.', if a subject Oncegate reads or writes lies under
// it, or nil. The overlap is computed on subject semantics: the prefix
// stands for every subject "p>" matches, and an owned subject's wildcards
// match as the server's do, so "in.x." overlaps "in.*.hooks".
func (c *Config) replyOverlap(p string, owned []ownedSubject) error {
	under := p + ">"
	if strings.HasPrefix(p, "$") {
		first, _, _ := strings.Cut(p, ".")
		return &ReplyOverlapError{Prefix: p, Subject: first + ".>", Use: "a subject of the server's (every subject beginning with '$': the JetStream and KV APIs, the system account, services)"}
	}
	for _, o := range owned {
		if subjectsCollide(under, o.subject) {
			return &ReplyOverlapError{Prefix: p, Subject: o.subject, Use: o.use}
		}
	}
	return nil
}
