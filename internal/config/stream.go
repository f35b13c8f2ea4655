package config

import (
	"fmt"
	"strings"
	"time"
)

// Stream configures the JetStream stream triggers arrive on.
type Stream struct {
	// Name is the stream's name. The default is "ONCEGATE".
	Name string `yaml:"name"`
	// Subjects are the subjects the stream captures; they must not
	// overlap. The default is ["triggers.>"].
	Subjects []string `yaml:"subjects"`
	// Retention is RetentionLimits (the default: triggers stay until
	// MaxAge, acked or not, and pipelines may share subjects; a recreated
	// durable consumer replays them, and the ledger, whose retention
	// exceeds MaxAge, answers every replayed trigger whose work is done) or
	// RetentionWorkQueue (a trigger is removed once its pipeline acks it, so
	// nothing is ever replayed and a backlog waits however long it must;
	// each trigger subject belongs to one pipeline; the server writes a
	// tombstone per ack, which cost about 15% more CPU per trigger in
	// bench/e2e). The outbox of one-shot effects is always a work queue.
	Retention string `yaml:"retention"`
	// Duplicates is the Nats-Msg-Id duplicate window of the streams
	// Oncegate creates: the trigger stream, and the effect and outbox
	// streams that take the effects' keyed publishes. It must cover every
	// redelivery horizon of a pipeline whose effect it dedupes. The
	// default is 5m.
	Duplicates time.Duration `yaml:"duplicates"`
	// MaxAge is how long the stream keeps a trigger, acked or not: a
	// trigger not consumed by then (a consumer down that long) is gone. It
	// must exceed every pipeline's redelivery horizon (a trigger aged out
	// before its last redelivery would be lost without a dead letter), and
	// the ledger's retention must exceed it. 0 means no limit, which only a
	// work queue allows. The default is 72h, or 0 with a work queue.
	MaxAge time.Duration `yaml:"max_age"`
	// ReplyPrefixes are the subject prefixes on which Oncegate publishes a
	// trigger's stored result when the trigger names a subject in its
	// Oncegate-Reply header. A reply to any other subject is refused and
	// counted: a trigger must not make Oncegate publish into an effect,
	// outbox or KV subject, or call the JetStream API. No subject Oncegate
	// reads or writes may lie under a prefix (the trigger stream's and the
	// pipelines' subjects, effect, dead-letter and approval subjects, the
	// ingress sources' subjects, "oncegate.>", '$' subjects and the
	// server's "_R_." and "_GR_." reply mappings), wildcards taken into
	// account: Validate refuses such a prefix (ReplyOverlapError). The
	// default is ["_INBOX."], where request-reply clients listen.
	ReplyPrefixes []string `yaml:"reply_prefixes"`
	// DeadLetterSubject is where a trigger goes, with the reason, after
	// its last delivery fails. "{pipeline}" is replaced by the pipeline's
	// name. It must not be consumed by any pipeline. The default is
	// "oncegate.dead.{pipeline}".
	DeadLetterSubject string `yaml:"dead_letter_subject"`
	// Replicas is the number of copies the server keeps of each stream
	// Oncegate creates (triggers, effects, dead letters, outbox): 1, or 3
	// or 5 on a cluster. The default is 1.
	Replicas int `yaml:"replicas"`
	// Storage is StorageFile (the default) or StorageMemory, for every
	// stream Oncegate creates. Memory streams lose their messages when the
	// server stops.
	Storage string `yaml:"storage"`
	// MaxBytes bounds the trigger stream's size; 0 (the default) means no
	// bound. What happens at the bound is Discard's.
	MaxBytes ByteSize `yaml:"max_bytes"`
	// Discard is DiscardNew (the default: a publish to a full trigger
	// stream is refused, so the publisher knows and retries, and nothing
	// stored is dropped) or DiscardOld (the oldest triggers make room,
	// acked or not).
	Discard string `yaml:"discard"`
	// Manage is whether Oncegate creates and updates the streams. With
	// false it uses the streams that exist as they are, and refuses to
	// start, saying why, unless they are compatible: the trigger stream
	// captures every pipeline's subject, its retention and max age suit the
	// configuration, and the stream each effect lands in has a duplicate
	// window that covers the pipeline's redelivery horizon. The default is
	// true.
	Manage bool `yaml:"manage"`
}

// Stream storage kinds and discard policies.
const (
	StorageFile   = "file"
	StorageMemory = "memory"
	DiscardNew    = "new"
	DiscardOld    = "old"
)

// ReplyAllowed reports whether Oncegate may publish a trigger's result to
// subject: under one of ReplyPrefixes, never on a subject the server or
// Oncegate owns, never on a wildcard. That a prefix reaches no subject
// Oncegate reads or writes is Validate's to check, once, not this
// function's on every reply.
func (s *Stream) ReplyAllowed(subject string) bool {
	if subject == "" || strings.HasPrefix(subject, "$") || strings.HasPrefix(subject, "oncegate.") ||
		strings.ContainsAny(subject, "*> \t\r\n") {
		return false
	}
	for _, p := range s.ReplyPrefixes {
		if strings.HasPrefix(subject, p) && len(subject) > len(p) {
			return true
		}
	}
	return false
}

// Stream retention policies.
const (
	RetentionWorkQueue = "workqueue"
	RetentionLimits    = "limits"
)

// DeadLetter returns the dead-letter subject of the named pipeline.
func (s *Stream) DeadLetter(pipeline string) string {
	return strings.ReplaceAll(s.DeadLetterSubject, "{pipeline}", pipeline)
}

// Defaults of the stream section.
const (
	DefaultStreamName        = "ONCEGATE"
	DefaultStreamSubject     = "triggers.>"
	DefaultDuplicates        = 5 * time.Minute
	DefaultMaxAge            = 72 * time.Hour
	DefaultDeadLetterSubject = "oncegate.dead.{pipeline}"
)

// streamDefaults fills in the stream section; a work queue has no max
// age by default.
func (c *Config) streamDefaults() {
	s := &c.Stream
	setDefault(c, "stream.name", &s.Name, DefaultStreamName)
	setDefault(c, "stream.subjects", &s.Subjects, []string{DefaultStreamSubject})
	setDefault(c, "stream.retention", &s.Retention, RetentionLimits)
	setDefault(c, "stream.duplicates", &s.Duplicates, DefaultDuplicates)
	maxAge := DefaultMaxAge
	if s.Retention == RetentionWorkQueue {
		maxAge = 0 // a work queue keeps a trigger until it is acked
	}
	setDefault(c, "stream.max_age", &s.MaxAge, maxAge)
	setDefault(c, "stream.dead_letter_subject", &s.DeadLetterSubject, DefaultDeadLetterSubject)
	setDefault(c, "stream.reply_prefixes", &s.ReplyPrefixes, []string{"_INBOX."})
	setDefault(c, "stream.replicas", &s.Replicas, 1)
	setDefault(c, "stream.storage", &s.Storage, StorageFile)
	setDefault(c, "stream.max_bytes", &s.MaxBytes, 0)
	setDefault(c, "stream.discard", &s.Discard, DiscardNew)
	setDefault(c, "stream.manage", &s.Manage, true)
}

// stream checks the stream section: the name, the subjects (which must
// not overlap), the retention and the dead letters' subject, which no
// pipeline may consume.
func (v *validator) stream() {
	s := &v.c.Stream
	if err := checkStreamName(s.Name); err != nil {
		v.add("stream.name", err)
	}
	if len(s.Subjects) == 0 {
		v.add("stream.subjects", missing("at least one subject is required"))
	}
	var valid []int // indexes of the valid subjects
	for i, subj := range s.Subjects {
		at := indexPath("stream.subjects", i)
		if err := checkSubject(subj, false); err != nil {
			v.add(at, err)
			continue
		}
		for _, j := range valid {
			if subjectsCollide(s.Subjects[j], subj) {
				v.add(at, invalid("%q overlaps %q: a stream's subjects must not overlap", subj, s.Subjects[j]))
				break
			}
		}
		valid = append(valid, i)
	}
	v.positive("stream.duplicates", s.Duplicates)
	if s.MaxAge < 0 {
		v.add("stream.max_age", invalid("must be 0 (no limit) or positive, got %s", formatDuration(s.MaxAge)))
	}
	owned := v.c.ownedSubjects()
	for i, p := range s.ReplyPrefixes {
		at := indexPath("stream.reply_prefixes", i)
		if !strings.HasSuffix(p, ".") || checkSubject(strings.TrimSuffix(p, "."), true) != nil {
			v.add(at, invalid("%q: want literal subject tokens ending in '.', such as \"_INBOX.\"", p))
		} else if err := v.c.replyOverlap(p, owned); err != nil {
			v.add(at, err)
		}
	}
	if s.Replicas < 1 || s.Replicas > 5 {
		v.add("stream.replicas", invalid("%d: want 1 to 5", s.Replicas))
	}
	v.oneOf("stream.storage", s.Storage, StorageFile, StorageMemory)
	v.oneOf("stream.discard", s.Discard, DiscardNew, DiscardOld)
	if s.MaxBytes < 0 {
		v.add("stream.max_bytes", invalid("must be 0 (no bound) or positive, got %s", s.MaxBytes))
	}
	switch s.Retention {
	case RetentionWorkQueue:
		// Each trigger belongs to one pipeline: their subjects must not
		// overlap, or the server refuses the second consumer.
		for i := range v.c.Pipelines {
			for j := range i {
				a, b := &v.c.Pipelines[j], &v.c.Pipelines[i]
				if checkSubject(a.Subject, false) == nil && checkSubject(b.Subject, false) == nil && subjectsCollide(a.Subject, b.Subject) {
					v.add(joinPath(indexPath("pipelines", i), "subject"), invalid("%q overlaps pipeline %q's %q: on a work-queue stream each trigger belongs to one pipeline; use stream.retention: limits (with a max_age) for pipelines that share triggers", b.Subject, a.Name, a.Subject))
				}
			}
		}
	case RetentionLimits:
		if s.MaxAge == 0 {
			v.add("stream.max_age", missing("required with retention limits: without it every trigger is kept for ever, and a recreated consumer replays them all"))
		}
	default:
		v.add("stream.retention", invalid("%q: want %s or %s", s.Retention, RetentionWorkQueue, RetentionLimits))
	}
	if s.MaxAge > 0 && s.Duplicates > s.MaxAge {
		v.add("stream.duplicates", invalid("the duplicate window %s is longer than max_age %s", formatDuration(s.Duplicates), formatDuration(s.MaxAge)))
	}
	if s.DeadLetterSubject == "" {
		v.add("stream.dead_letter_subject", missing("a subject is required: failed triggers are dead-lettered, never dropped"))
		return
	}
	probe := strings.ReplaceAll(s.DeadLetterSubject, "{pipeline}", "p")
	if strings.ContainsAny(probe, "{}") {
		v.add("stream.dead_letter_subject", invalid("%q: the only placeholder is {pipeline}", s.DeadLetterSubject))
		return
	}
	if err := checkSubject(probe, true); err != nil {
		v.add("stream.dead_letter_subject", err)
		return
	}
	// Each distinct valid pipeline subject, split, with the first pipeline
	// that has it.
	type consumer struct {
		toks []string
		name string
	}
	var consumers []consumer
	seen := map[string]bool{}
	for i := range v.c.Pipelines {
		q := &v.c.Pipelines[i]
		if !seen[q.Subject] && checkSubject(q.Subject, false) == nil {
			seen[q.Subject] = true
			consumers = append(consumers, consumer{strings.Split(q.Subject, "."), q.Name})
		}
	}
	for i := range v.c.Pipelines {
		p := &v.c.Pipelines[i]
		dl := s.DeadLetter(p.Name)
		if checkSubject(dl, true) != nil {
			continue // a bad name, reported with the pipeline
		}
		dlToks := strings.Split(dl, ".")
		for _, q := range consumers {
			if tokensCover(q.toks, dlToks) {
				v.add("stream.dead_letter_subject", invalid("dead letters of pipeline %q go to %q, which pipeline %q consumes: they would come back as triggers", p.Name, dl, q.name))
				break
			}
		}
	}
}

// stream explains the stream section and where dead letters go.
func (x *explainer) stream() {
	c := x.c
	s := &c.Stream
	maxAge := "none"
	if s.MaxAge > 0 {
		maxAge = formatDuration(s.MaxAge)
	}
	x.row("stream", x.d("stream.name", s.Name, s.Name)+" on "+x.d("stream.subjects", s.Subjects, strings.Join(s.Subjects, ", ")),
		"retention "+x.d("stream.retention", s.Retention, s.Retention),
		"replicas "+x.d("stream.replicas", s.Replicas, fmt.Sprint(s.Replicas))+", "+x.d("stream.storage", s.Storage, s.Storage)+" storage",
		"managed "+x.d("stream.manage", s.Manage, fmt.Sprint(s.Manage)),
		"duplicate window "+x.d("stream.duplicates", s.Duplicates, formatDuration(s.Duplicates)),
		"max age "+x.d("stream.max_age", s.MaxAge, maxAge))
	x.row("dead letters", x.d("stream.dead_letter_subject", s.DeadLetterSubject, s.DeadLetterSubject))
}
